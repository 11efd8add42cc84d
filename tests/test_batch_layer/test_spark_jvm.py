"""The Spark driver JVM duet starts: its options, its class-data-sharing archive, its stderr
(the archive mechanism itself: tests/test_speed_layer/test_jvm_cds.py)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from batch_layer import spark_cds
from speed_layer.runtime import jvm_cds
from batch_layer.spark import JAVA_OPTIONS_ENV, driver_java_options


def test_driver_options_in_order_log4j_archive_environment_then_conf(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    monkeypatch.delenv(jvm_cds.CDS_ENV, raising=False)
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")
    archive = spark_cds.spark_archive()
    assert archive is not None and archive.parent == tmp_path / "cds" and archive.name.startswith("spark-")

    opts = driver_java_options("-Dmine=1")  # no archive yet: none mapped
    assert opts.startswith("-Dlog4j2.configurationFile=file:") and "SharedArchiveFile" not in opts
    assert opts.endswith("-XX:TieredStopAtLevel=1 -Dmine=1")

    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    opts = driver_java_options("-Dmine=1").split()
    assert opts[1:] == [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off",
                        "-XX:TieredStopAtLevel=1", "-Dmine=1"]
    monkeypatch.setenv(jvm_cds.CDS_ENV, "0")
    assert "SharedArchiveFile" not in driver_java_options()


def test_the_spark_archive_follows_the_jvm_and_the_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another JDK (``$JAVA_HOME``) or another set of Spark jars: another archive, so a stale
    one is never mapped."""
    here = spark_cds.spark_archive()
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"x")
    monkeypatch.setattr(spark_cds, "_spark_jars", lambda: jars)
    one = spark_cds.spark_archive()
    (jars / "spark-core.jar").write_bytes(b"xy")
    two = spark_cds.spark_archive()
    assert len({here, one, two}) == 3
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert spark_cds.spark_archive() is None and spark_cds.java_options() == ""


@pytest.mark.spark
def test_the_session_jvm_maps_the_archive_of_make_setup(spark) -> None:
    """``make setup`` built the archive; the test session's driver JVM has it mapped (its
    ``/proc/<pid>/maps``), not merely named on its command line."""
    archive = spark_cds.spark_archive()
    if archive is None or not archive.is_file():
        pytest.fail(f"no class-data-sharing archive at {archive}: `make setup` builds it (python -m batch_layer.spark_cds_build)")
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


def test_the_relay_drains_the_jvm_stderr_once_its_own_stderr_is_closed() -> None:
    """A driver process whose stderr is closed still reads the JVM's lines to the end (a JVM
    writing to a full pipe would block), and logs the failure once instead of per line."""
    import sys

    code = ("import io, logging, sys; logging.basicConfig(stream=sys.stdout, level=logging.DEBUG)\n"
            "from batch_layer.spark import _relay\n"
            "stream = io.BytesIO(b'jvm line\\n' * 100000)\n"
            "_relay(stream); print('drained', stream.tell() == 900000)\n")
    res = subprocess.run([sys.executable, "-c", code], stderr=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, text=True, timeout=120, check=False,
                         preexec_fn=lambda: os.close(2))
    assert res.returncode == 0, res.stdout
    assert res.stdout.count("stderr is dropped from now on") == 1 and res.stdout.rstrip().endswith("drained True")


def test_the_relay_keeps_the_jvms_start_notice_out_of_stderr() -> None:
    """The JVM's ``WARNING: Using incubator modules: jdk.incubator.vector`` (Spark 4's
    launcher adds the module on every start) goes to the DEBUG log, not to stderr; every
    other line of the JVM's stderr is copied as it is, in order."""
    import sys

    code = ("import io, logging, sys; logging.basicConfig(stream=sys.stdout, level=logging.DEBUG)\n"
            "from batch_layer.spark import _relay\n"
            "_relay(io.BytesIO(b'WARNING: Using incubator modules: jdk.incubator.vector\\n'\n"
            "                  b'12:00:01 ERROR SparkContext: boom\\nWARNING: something else\\n'))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "12:00:01 ERROR SparkContext: boom\nWARNING: something else\n"
    assert "DEBUG:batch_layer.spark:Spark JVM: WARNING: Using incubator modules: jdk.incubator.vector" in res.stdout
