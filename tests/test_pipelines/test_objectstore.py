"""The lake on a real S3-compatible object store (SeaweedFS, one per test run: the
``object_store`` fixture): the store itself, ``duet objectstore``, delta-rs tables with two
writers racing, and the start-up check's one-line errors for a bad lake (issue 43).
See docs/object-storage.md."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.lake.objectstore import s3_filesystem
from pipelines.lake.uri import LakeUnreachable, check_s3_lake, delta_storage_options, parse_s3_lake
from pipelines.preflight import UserError

REPO = Path(__file__).resolve().parents[2]


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _objects(store: object, prefix: str) -> list[str]:
    from pyarrow import fs

    s3 = s3_filesystem(store.env())
    infos = s3.get_file_info(fs.FileSelector(f"{store.bucket}/{prefix}", recursive=True, allow_not_found=True))
    return [i.path for i in infos if i.type == fs.FileType.File]


def test_store_serves_the_bucket_and_the_reader_cannot_write(object_store) -> None:
    s3 = s3_filesystem(object_store.env())
    key = f"{object_store.bucket}/{_prefix()}/hello.txt"
    with s3.open_output_stream(key) as out:
        out.write(b"hi")
    assert s3.open_input_stream(key).read() == b"hi"
    reader = s3_filesystem(object_store.env(reader=True))
    assert reader.open_input_stream(key).read() == b"hi"
    with pytest.raises(OSError, match="AccessDenied|ACCESS_DENIED|403"):
        with reader.open_output_stream(key + ".2") as out:
            out.write(b"no")


def test_delta_table_round_trip_on_s3(object_store, monkeypatch: pytest.MonkeyPatch) -> None:
    from deltalake import DeltaTable, write_deltalake

    for key, value in object_store.env().items():
        monkeypatch.setenv(key, value)
    uri = parse_s3_lake(object_store.lake_uri(_prefix())).table_uri("t")
    write_deltalake(uri, pa.table({"k": ["a", "b"], "n": [1, 2]}), storage_options=delta_storage_options())
    table = DeltaTable(uri, storage_options=delta_storage_options())
    assert table.version() == 0
    assert sorted(table.to_pyarrow_table().column("n").to_pylist()) == [1, 2]


def test_two_writers_racing_on_one_table_lose_no_commit(object_store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads append to one table at once, 6 commits each: delta-rs puts each log entry
    with ``If-None-Match: *``, the loser of a version sees 412 and retries at the next one;
    all 12 commits and rows are there, each version exactly once."""
    from deltalake import DeltaTable, write_deltalake

    for key, value in object_store.env().items():
        monkeypatch.setenv(key, value)
    uri = parse_s3_lake(object_store.lake_uri(_prefix())).table_uri("race")
    options = delta_storage_options()
    write_deltalake(uri, pa.table({"writer": ["init"], "i": [0]}), storage_options=options)
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            start.wait()
            for i in range(6):
                write_deltalake(uri, pa.table({"writer": [name], "i": [i]}), mode="append", storage_options=options)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 12
    rows = table.to_pyarrow_table().to_pylist()
    assert sorted((r["writer"], r["i"]) for r in rows) == sorted(
        [("init", 0)] + [(w, i) for w in "ab" for i in range(6)])
    log = [p for p in _objects(object_store, uri[len(f"s3://{object_store.bucket}/"):] + "/_delta_log")
           if p.endswith(".json")]
    assert len(log) == 13


@pytest.mark.parametrize("case", ["endpoint", "bucket", "credentials", "write"])
def test_bad_lake_fails_in_one_line_naming_the_uri(object_store, case: str) -> None:
    env = object_store.env()
    prefix = _prefix()
    uri = object_store.lake_uri(prefix)
    if case == "endpoint":
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
        cause = "cannot connect to the endpoint"
    elif case == "bucket":
        uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/{prefix}"
        cause = "does not exist"
    elif case == "credentials":
        env["AWS_SECRET_ACCESS_KEY"] = "wrong-" + env["AWS_SECRET_ACCESS_KEY"]
        cause = "credentials were refused"
    else:
        env = object_store.env(reader=True)
        cause = "access denied"
    started = time.monotonic()
    with pytest.raises(LakeUnreachable) as caught:
        check_s3_lake(uri, env)
    message = str(caught.value)
    assert time.monotonic() - started < 10
    assert "\n" not in message and message.startswith(f"lake {uri}: ") and cause in message, message
    for secret in (object_store.secret_key, object_store.reader_secret_key, env["AWS_SECRET_ACCESS_KEY"]):
        assert secret not in message
    assert _objects(object_store, prefix) == []


def test_good_lake_passes_the_check_and_leaves_nothing(object_store) -> None:
    prefix = _prefix()
    assert check_s3_lake(object_store.lake_uri(prefix), object_store.env()).prefix == prefix
    assert _objects(object_store, prefix) == []


def test_the_pom_s_jars_beside_delta_s_join_only_object_store_sessions() -> None:
    """Every jar ``make setup`` copies from ``jvm/delta/pom.xml`` other than Delta's is one of
    the S3A set (``batch_layer.spark_s3a.is_s3a_jar``): a session on a local lake loads none
    of them; one on an object store loads them all, slf4j-nop (the AWS SDK bundle's SLF4J 1.x
    binding) included."""
    import xml.etree.ElementTree as ET

    from batch_layer.spark_s3a import is_s3a_jar

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    deps = ET.parse(REPO / "jvm" / "delta" / "pom.xml").getroot().findall("m:dependencies/m:dependency", ns)
    names = {f"{d.findtext('m:artifactId', namespaces=ns)}-{d.findtext('m:version', namespaces=ns)}.jar" for d in deps}
    s3a = {n for n in names if is_s3a_jar(n)}
    assert names - s3a == {"delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"}
    assert "slf4j-nop-1.7.36.jar" in s3a and "bundle-2.35.4.jar" in s3a


def test_credentials_in_the_uri_are_refused_without_echoing_them() -> None:
    with pytest.raises(UserError) as caught:
        parse_s3_lake("s3://AKIDSECRET:hunter2@bucket/lake")
    assert "hunter2" not in str(caught.value) and "AWS_ACCESS_KEY_ID" in str(caught.value)


def test_duet_objectstore_prints_settings_that_work(tmp_path: Path) -> None:
    """``duet objectstore`` starts a store, prints ``export AWS_...`` lines; with them a client
    reaches the bucket; Ctrl-C stops it."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "objectstore", "--dir", str(tmp_path / "s3"),
                             "--bucket", "cli"], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        settings: dict[str, str] = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            match = re.match(r"export (AWS_\w+)=(\S+)", line)
            if match:
                settings[match[1]] = match[2]
            if line.startswith("# lake:"):
                assert "--lake s3://cli/lake" in line
                break
        assert set(settings) >= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"}
        check_s3_lake("s3://cli/lake", settings)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0


def test_cli_lake_on_a_dead_endpoint_exits_2_in_one_line(tmp_path: Path) -> None:
    """``duet query --lake s3://...`` with an endpoint nobody serves: exit 2, one line naming
    the lake and the cause, no secret, and no local folder ``s3:`` made of the URI."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "duetkey",
           "AWS_SECRET_ACCESS_KEY": "very-secret-value", "AWS_REGION": "us-east-1"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "query", "--lake", "s3://duet/lake", "shop"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "lake s3://duet/lake: cannot connect to the endpoint" in lines[0], done.stderr
    assert "very-secret-value" not in done.stderr + done.stdout
    assert time.monotonic() - started < 30  # interpreter start included; the check itself < 10 s
    assert not list(tmp_path.iterdir())
