"""Class-data-sharing archives of the JVMs duet starts (speed_layer/runtime/jvm_cds.py), and
the embedded broker's (kraft_cds.py); Spark's: tests/test_batch_layer/test_spark_jvm.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from speed_layer.runtime import jvm_cds, kraft_cds
from speed_layer.runtime.broker import EmbeddedKafka
from speed_layer.runtime.kraft_jvm import jvm_command


def test_a_jvm_given_a_stale_archive_starts_without_it_silently(tmp_path: Path) -> None:
    """An archive whose class path changed since it was written (here a jar touched, as an
    upgrade does) is refused by the JVM, which then starts without it: HotSpot warns
    unless told not to; with duet's options it says nothing and exits 0."""
    java = jvm_cds.resolve_java()
    assert java is not None
    (tmp_path / "M.java").write_text("class M { public static void main(String[] a) { } }")
    subprocess.run([str(java.parent / "javac"), "-d", str(tmp_path), str(tmp_path / "M.java")], check=True, timeout=120)
    jar, archive = tmp_path / "m.jar", tmp_path / "m.jsa"
    subprocess.run([str(java.parent / "jar"), "cf", str(jar), "-C", str(tmp_path), "M.class"], check=True, timeout=60)
    subprocess.run([str(java), f"-XX:ArchiveClassesAtExit={archive}", *jvm_cds.QUIET_OPTIONS, "-cp", str(jar), "M"],
                   check=True, timeout=60, capture_output=True)
    assert archive.is_file()
    os.utime(jar, (time.time() + 5, time.time() + 5))

    def run(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(java), f"-XX:SharedArchiveFile={archive}", *options, "-cp", str(jar), "M"],
                              capture_output=True, text=True, timeout=60, check=False)

    loud = run("-Xshare:auto")
    assert loud.returncode == 0 and "Unable to use shared archive" in loud.stdout + loud.stderr
    quiet = run(*jvm_cds.QUIET_OPTIONS)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


def test_the_archive_name_follows_the_java_and_every_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    java = jvm_cds.resolve_java()
    assert java is not None
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"a")
    one = jvm_cds.archive_path("kafka", java, jars.glob("*.jar"))
    assert one.parent == tmp_path / "cds" and one.name.startswith("kafka-") and one.suffix == ".jsa"
    assert jvm_cds.archive_path("kafka", java, jars.glob("*.jar")) == one
    (jars / "b.jar").write_bytes(b"b")
    two = jvm_cds.archive_path("kafka", java, jars.glob("*.jar"))
    (jars / "b.jar").write_bytes(b"bb")
    three = jvm_cds.archive_path("kafka", java, jars.glob("*.jar"))
    assert len({one, two, three}) == 3
    assert jvm_cds.map_options(three) == []  # not written: nothing mapped
    three.parent.mkdir()
    three.write_bytes(b"")
    assert jvm_cds.map_options(three) == [f"-XX:SharedArchiveFile={three}", *jvm_cds.QUIET_OPTIONS]
    monkeypatch.setenv(jvm_cds.CDS_ENV, "0")
    assert jvm_cds.map_options(three) == []


def test_replacing_an_archive_removes_the_stale_ones_of_its_kind(tmp_path: Path) -> None:
    old, other, new = tmp_path / "kafka-old.jsa", tmp_path / "spark-old.jsa", tmp_path / "kafka-new.jsa"
    for f in (old, other):
        f.write_bytes(b"")
    written = tmp_path / "kafka-new.123.tmp"
    with pytest.raises(FileNotFoundError, match="wrote no class-data-sharing archive"):
        jvm_cds.replace_archive(written, new)
    written.write_bytes(b"archive")
    jvm_cds.replace_archive(written, new)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kafka-new.jsa", "spark-old.jsa"]


def test_the_archive_builds_set_their_jvm_environment_for_the_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builds (``*_cds_build.build_archive``) set ``DUET_CDS=0`` and the JVM options
    for the JVMs they start; the process' environment is as before afterwards, also
    when the block raises."""
    monkeypatch.setenv("DUET_CDS", "1")
    monkeypatch.delenv("DUET_KAFKA_JAVA_OPTIONS", raising=False)
    with pytest.raises(RuntimeError):
        with jvm_cds.scoped_environment({"DUET_CDS": "0", "DUET_KAFKA_JAVA_OPTIONS": "-Xint"}):
            assert (os.environ["DUET_CDS"], os.environ["DUET_KAFKA_JAVA_OPTIONS"]) == ("0", "-Xint")
            raise RuntimeError("the JVM failed")
    assert os.environ["DUET_CDS"] == "1"
    assert "DUET_KAFKA_JAVA_OPTIONS" not in os.environ


def test_kafka_jvms_map_the_archive_then_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jvm_cds.CDS_ENV, raising=False)
    monkeypatch.setenv(kraft_cds.JAVA_OPTIONS_ENV, "-Dmine=1")
    archive = kraft_cds.kafka_archive()
    cmd = jvm_command("java", str(archive.parent.parent / "jars" / "kafka" / "*") if archive else "", tmp_path, "256m")
    if archive is not None and archive.is_file():
        assert cmd[1:6] == [f"-XX:SharedArchiveFile={archive}", *jvm_cds.QUIET_OPTIONS, "-Dmine=1"]
    else:
        assert cmd[1] == "-Dmine=1"
    monkeypatch.setenv(jvm_cds.CDS_ENV, "0")
    assert not any("SharedArchiveFile" in c for c in jvm_command("java", "x/*", tmp_path, "256m"))


@pytest.mark.broker
def test_the_broker_jvm_maps_the_archive_of_make_setup() -> None:
    """``make setup`` built the broker's archive; an embedded broker's JVM has it mapped (its
    ``/proc/<pid>/maps``), not merely named on its command line."""
    archive = kraft_cds.kafka_archive()
    if archive is None or not archive.is_file():
        pytest.fail(f"no class-data-sharing archive at {archive}: `make setup` builds it "
                    "(python -m speed_layer.runtime.kraft_cds_build)")
    with EmbeddedKafka() as kafka:
        assert kafka.pid is not None
        assert str(archive) in Path(f"/proc/{kafka.pid}/maps").read_text()
