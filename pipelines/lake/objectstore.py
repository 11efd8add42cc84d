"""A local S3-compatible object store for the lake: SeaweedFS's ``weed mini`` (master, volume
server, filer and S3 gateway in one process) on free loopback ports, with two identities and
one bucket.

``make setup`` builds ``weed`` (pinned, from Go sources) into ``$DUET_HOME/bin``
(:func:`weed_binary`). ``duet objectstore`` starts one in the foreground and prints the
``AWS_*`` settings to export; the tests share one per run (the ``object_store`` fixture of
``tests/conftest.py``). See docs/object-storage.md.

Identities (SeaweedFS's ``-s3.config``): ``duet`` may read, list and write every bucket;
``duet-reader`` may read and list only (a lake it cannot write, for the bad-input tests).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from speed_layer.runtime.kraft_config import free_ports
from speed_layer.runtime.paths import duet_home

__all__ = ["ObjectStore", "ObjectStoreError", "weed_binary", "object_store", "WEED_VERSION"]

#: the pinned SeaweedFS module version ``make setup`` builds (Makefile ``WEED_VERSION``)
WEED_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
#: the region the store reports (SeaweedFS accepts any; boto/delta-rs/s3a need one)
REGION = "us-east-1"
_START_TIMEOUT_S = 60.0


class ObjectStoreError(RuntimeError):
    """``weed`` is missing, or the store did not answer within the start timeout."""


@dataclass(frozen=True)
class ObjectStore:
    """A running store: its S3 endpoint (``http://127.0.0.1:<port>``), bucket and the two
    identities' keys."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    reader_access_key: str
    reader_secret_key: str
    data_dir: Path

    def env(self, *, reader: bool = False) -> dict[str, str]:
        """The standard AWS settings for this store (what ``duet objectstore`` prints):
        ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``,
        ``AWS_REGION``, ``AWS_ALLOW_HTTP`` (delta-rs: the endpoint is plain http)."""
        return {
            "AWS_ACCESS_KEY_ID": self.reader_access_key if reader else self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.reader_secret_key if reader else self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def lake_uri(self, prefix: str = "lake") -> str:
        """``s3://<bucket>/<prefix>``."""
        return f"s3://{self.bucket}/{prefix.strip('/')}"


def weed_binary() -> Path:
    """``$DUET_WEED`` when set, else ``$DUET_HOME/bin/weed`` (``make setup`` builds it).

    Raises :class:`ObjectStoreError` naming the make rule when it is not there."""
    env = os.environ.get("DUET_WEED")
    path = Path(env) if env else duet_home() / "bin" / "weed"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ObjectStoreError(f"SeaweedFS's weed is not at {path}: run `make setup` (it builds "
                               f"github.com/seaweedfs/seaweedfs/weed@{WEED_VERSION})")
    return path


def _s3_config(store_keys: tuple[str, str], reader_keys: tuple[str, str]) -> dict[str, object]:
    """SeaweedFS's identities file (``-s3.config``): no anonymous access."""
    return {"identities": [
        {"name": "duet", "credentials": [{"accessKey": store_keys[0], "secretKey": store_keys[1]}],
         "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
        {"name": "duet-reader", "credentials": [{"accessKey": reader_keys[0], "secretKey": reader_keys[1]}],
         "actions": ["Read", "List"]},
    ]}


def _command(weed: Path, data_dir: Path, config: Path, bucket: str, ports: list[int]) -> list[str]:
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, admin = ports
    return [
        str(weed), "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-master.port.grpc={master_grpc}", "-master.telemetry=false",
        f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
        f"-filer.localSocket={data_dir}/filer.sock",
        f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", f"-s3.localSocket={data_dir}/s3.sock",
        "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}",
        "-s3.autoCreateBucket=false", f"-bucket={bucket}",
        "-webdav=false", "-admin.ui=false", f"-admin.port={admin}", "-admin.port.legacy=0",
    ]


def _wait_ready(proc: subprocess.Popen[bytes], store: ObjectStore, log: Path) -> None:
    """Until an authenticated HEAD of the bucket answers 200 (the S3 gateway is up and the
    bucket exists), else :class:`ObjectStoreError` with the log's tail."""
    from pyarrow import fs

    deadline = time.monotonic() + _START_TIMEOUT_S
    last: str = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            urllib.request.urlopen(store.endpoint + "/status", timeout=1.0).close()
        except (urllib.error.URLError, OSError) as exc:
            if not isinstance(exc, urllib.error.HTTPError):
                last = str(exc)
                time.sleep(0.3)
                continue
        try:
            info = s3_filesystem(store.env(), connect_timeout=2.0).get_file_info(store.bucket)
            if info.type == fs.FileType.Directory:
                return
            last = f"bucket {store.bucket} not there yet"
        except OSError as exc:
            last = str(exc).splitlines()[0]
        time.sleep(0.3)
    tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
    raise ObjectStoreError(f"SeaweedFS did not serve s3://{store.bucket} at {store.endpoint} within "
                           f"{_START_TIMEOUT_S:.0f} s (exit code {proc.poll()}; last: {last}); "
                           f"log {log}:\n" + "\n".join(tail))


def s3_filesystem(env: dict[str, str], *, connect_timeout: float = 5.0) -> object:
    """A :class:`pyarrow.fs.S3FileSystem` for the settings ``env`` (``AWS_*`` names)."""
    from pyarrow import fs

    endpoint = env["AWS_ENDPOINT_URL"]
    scheme, _, host = endpoint.partition("://")
    return fs.S3FileSystem(access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
                           endpoint_override=host, scheme=scheme, region=env.get("AWS_REGION", REGION),
                           connect_timeout=connect_timeout, request_timeout=connect_timeout,
                           retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1))


@contextmanager
def object_store(data_dir: Path | None = None, *, bucket: str = "duet") -> Iterator[ObjectStore]:
    """Start ``weed mini`` on free loopback ports with a fresh identities file and ``bucket``;
    yield the running :class:`ObjectStore`; stop it (SIGTERM, then SIGKILL after 10 s) on exit.

    ``data_dir``: where the store keeps its volumes and metadata (kept); ``None``: a temporary
    folder, removed on exit. Raises :class:`ObjectStoreError` when ``weed`` is missing or the
    store does not answer within 60 s."""
    weed = weed_binary()
    temp = data_dir is None
    root = Path(tempfile.mkdtemp(prefix="duet-objectstore-")) if data_dir is None else data_dir
    root.mkdir(parents=True, exist_ok=True)
    keys = ("duet" + secrets.token_hex(6), secrets.token_hex(20))
    reader = ("reader" + secrets.token_hex(6), secrets.token_hex(20))
    config = root / "s3.json"
    config.write_text(json.dumps(_s3_config(keys, reader), indent=2))
    config.chmod(0o600)
    ports = free_ports(9)
    log = root / "weed.log"
    store = ObjectStore(endpoint=f"http://127.0.0.1:{ports[6]}", bucket=bucket,
                        access_key=keys[0], secret_key=keys[1],
                        reader_access_key=reader[0], reader_secret_key=reader[1], data_dir=root)
    with log.open("ab") as out:
        proc = subprocess.Popen(_command(weed, root, config, bucket, ports), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=root, start_new_session=True)
    try:
        _wait_ready(proc, store, log)
        yield store
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if temp:
            shutil.rmtree(root, ignore_errors=True)
