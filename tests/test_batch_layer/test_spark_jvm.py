"""The Spark driver JVM duet starts: its options, its class-data-sharing archive, its stderr."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from batch_layer import spark_cds
from batch_layer.spark import JAVA_OPTIONS_ENV, driver_java_options


def test_driver_options_in_order_log4j_archive_environment_then_conf(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    monkeypatch.delenv(spark_cds.CDS_ENV, raising=False)
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")
    archive = spark_cds.archive_path()
    assert archive is not None and archive.parent == tmp_path / "cds" and archive.name.startswith("spark-")

    opts = driver_java_options("-Dmine=1")  # no archive yet: none mapped
    assert opts.startswith("-Dlog4j2.configurationFile=file:") and "SharedArchiveFile" not in opts
    assert opts.endswith("-XX:TieredStopAtLevel=1 -Dmine=1")

    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    opts = driver_java_options("-Dmine=1").split()
    assert opts[1:] == [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off",
                        "-XX:TieredStopAtLevel=1", "-Dmine=1"]
    monkeypatch.setenv(spark_cds.CDS_ENV, "0")
    assert "SharedArchiveFile" not in driver_java_options()


def test_the_archive_name_follows_the_jvm_and_the_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another JDK (``$JAVA_HOME``) or another set of Spark jars: another archive, so a stale
    one is never mapped."""
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    here = spark_cds.archive_path()
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"x")
    monkeypatch.setattr(spark_cds, "_spark_jars", lambda: jars)
    one = spark_cds.archive_path()
    (jars / "spark-core.jar").write_bytes(b"xy")
    two = spark_cds.archive_path()
    assert len({here, one, two}) == 3
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert spark_cds.archive_path() is None and spark_cds.java_options() == ""


def test_a_jvm_given_a_stale_archive_starts_without_it_silently(tmp_path: Path) -> None:
    """An archive whose class path changed since it was written (here a jar touched, as an
    upgrade does) is refused by the JVM, which then starts without it: HotSpot warns on
    stdout unless told not to; with duet's options it says nothing and exits 0."""
    java = spark_cds._java()
    assert java is not None
    (tmp_path / "M.java").write_text("class M { public static void main(String[] a) { } }")
    subprocess.run([str(java.parent / "javac"), "-d", str(tmp_path), str(tmp_path / "M.java")], check=True, timeout=120)
    jar, archive = tmp_path / "m.jar", tmp_path / "m.jsa"
    subprocess.run([str(java.parent / "jar"), "cf", str(jar), "-C", str(tmp_path), "M.class"], check=True, timeout=60)
    subprocess.run([str(java), f"-XX:ArchiveClassesAtExit={archive}", *spark_cds._QUIET.split(), "-cp", str(jar), "M"],
                   check=True, timeout=60, capture_output=True)
    assert archive.is_file()
    os.utime(jar, (time.time() + 5, time.time() + 5))

    def run(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(java), f"-XX:SharedArchiveFile={archive}", *options, "-cp", str(jar), "M"],
                              capture_output=True, text=True, timeout=60, check=False)

    loud = run("-Xshare:auto")
    assert loud.returncode == 0 and "Unable to use shared archive" in loud.stdout + loud.stderr
    quiet = run(*spark_cds._QUIET.split())
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


@pytest.mark.spark
def test_the_session_jvm_maps_the_archive_of_make_setup(spark) -> None:
    """``make setup`` built the archive; the test session's driver JVM has it mapped (its
    ``/proc/<pid>/maps``), not merely named on its command line."""
    archive = spark_cds.archive_path()
    if archive is None or not archive.is_file():
        pytest.fail(f"no class-data-sharing archive at {archive}: `make setup` builds it (python -m batch_layer.spark_cds)")
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    pid = jvm.java.lang.ProcessHandle.current().pid()
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(archive) in maps, f"{archive} is not mapped by the driver JVM {pid}"


@pytest.mark.spark
def test_the_jvm_stderr_reaches_this_process_stderr(spark, capfd: pytest.CaptureFixture[str]) -> None:
    """The driver JVM writes to a pipe this process relays to its own stderr (so that
    nothing it prints after this process ended reaches the terminal): while the process
    lives, the JVM's lines arrive."""
    marker = f"duet-jvm-stderr-{uuid.uuid4().hex}"
    spark.sparkContext._jvm.java.lang.System.err.println(marker)  # type: ignore[attr-defined]
    deadline, seen = time.monotonic() + 15, ""
    while marker not in seen and time.monotonic() < deadline:
        time.sleep(0.1)
        seen += capfd.readouterr().err
    assert marker in seen
