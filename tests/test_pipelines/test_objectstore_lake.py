"""The lake on an object store through every layer (issue 43, items 2, 3, 4 and 7), on the
session's SeaweedFS (the ``object_store`` fixture), each test under a prefix of its own:

* the lake's files and the lease lock (broker-free): one writer at a time, renewal, an
  expired lease taken over with a warning and never deleted by its former holder, two racing
  writers of which one wins;
* ``duet run --limit 2000 --lake s3://...`` (the session's broker; Spark, s3a through
  hadoop-aws): 100 % agreement, every check passed, the tables on the store, nothing written
  to a local folder named ``s3:``; ``duet query`` answers from the store with a read-only
  identity; two ``duet serve`` on it answer the same version after a publish, never a part.

See docs/object-storage.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pipelines.examples.flights import pipeline as flights
from pipelines_testkit import log_lines

REPO = Path(__file__).resolve().parents[2]
LIMIT = 2000


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def s3_env(object_store: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The store's AWS settings in this process' environment (delta-rs, pyarrow, boto3 read them)."""
    for key, value in object_store.env().items():
        monkeypatch.setenv(key, value)
    return object_store.env()


def _objects(store: Any, prefix: str) -> list[str]:
    """The keys (``bucket/...``) of every object under ``prefix`` of the store's bucket."""
    from pyarrow import fs

    from batch_layer.delta.storage import s3_filesystem

    infos = s3_filesystem(store.env()).get_file_info(
        fs.FileSelector(f"{store.bucket}/{prefix}", recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == fs.FileType.File)


# ------------------------------------------------------------------ files and the lease lock
def test_lake_files_and_roots_on_the_store(object_store: Any, s3_env: dict[str, str]) -> None:
    from batch_layer.delta import storage
    from pipelines.lake.root import resolve_lake

    prefix = _prefix()
    root = resolve_lake(Path(f"s3a://{object_store.bucket}/{prefix}"))  # typer's Path folds s3a:// to s3a:/
    assert root == f"s3://{object_store.bucket}/{prefix}"
    folder = flights.lake(root)
    assert folder == f"{root}/flights"
    doc = f"{folder}/serving/_views.json"
    assert storage.read_text(doc) is None and not storage.exists(folder)
    storage.write_text(doc, '{"a": 1}\n')
    assert storage.read_text(doc) == '{"a": 1}\n' and storage.exists(folder)
    assert storage.list_names(folder) == ["serving"] and storage.list_names(f"{folder}/serving") == ["_views.json"]
    storage.remove(f"{folder}/serving")
    assert _objects(object_store, prefix) == []


def test_the_lake_root_from_the_environment_the_project_and_dagster(object_store: Any, s3_env: dict[str, str],
                                                                   tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``$DUET_LAKE``, ``[tool.duet] lake`` and the Dagster ``LakeResource`` take an
    ``s3://`` root as the ``--lake`` flag does (no local folder ``s3:`` made of it)."""
    from pipelines.dagster.resources import LakeResource
    from pipelines.declaration.resolve import find_project
    from pipelines.lake.root import resolve_lake

    root = f"s3://{object_store.bucket}/{_prefix()}"
    (tmp_path / "pyproject.toml").write_text(f'[tool.duet]\npipeline = "x:pipeline"\nlake = "{root}"\n')
    project = find_project(tmp_path)
    assert project is not None and project.lake == root
    monkeypatch.delenv("DUET_LAKE", raising=False)
    assert resolve_lake(None, project.lake) == root
    monkeypatch.setenv("DUET_LAKE", root + "/")
    assert resolve_lake(None) == root and LakeResource().root() == root
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("s3")]


def test_lease_lock_admits_one_writer_and_is_renewed(object_store: Any, s3_env: dict[str, str]) -> None:
    from pipelines.lake.lease import LeaseLock
    from pipelines.lake.lock import LakeBusy
    from pipelines.lake.locking import lock_holder

    folder = f"s3://{object_store.bucket}/{_prefix()}/flights"
    first = LeaseLock(folder, "duet run --limit 2000", ttl_s=3.0)
    with first:
        assert lock_holder(folder) is not None and lock_holder(folder).command == "duet run --limit 2000"
        time.sleep(4.5)  # longer than the lease: only its renewals keep it
        with pytest.raises(LakeBusy, match=r"in use by `duet run --limit 2000` \(pid \d+") as busy:
            LeaseLock(folder, "duet batch", ttl_s=3.0).acquire()
        assert "\n" not in str(busy.value) and not first.lost
    assert lock_holder(folder) is None
    with LeaseLock(folder, "duet batch", ttl_s=3.0):
        assert lock_holder(folder).command == "duet batch"
    assert _objects(object_store, folder[len(f"s3://{object_store.bucket}/"):]) == []


def test_an_expired_lease_is_taken_over_and_kept(object_store: Any, s3_env: dict[str, str]) -> None:
    """A holder that stops renewing (a process killed, a machine gone) loses the folder once
    its lease expires: the next writer takes it over with a one-line warning, and the former
    holder's late release does not delete the new holder's lease (``If-Match``)."""
    from pipelines.lake.lease import LeaseLock
    from pipelines.lake.locking import lock_holder

    folder = f"s3://{object_store.bucket}/{_prefix()}/shop"
    gone = LeaseLock(folder, "duet run (killed)", ttl_s=1.5)
    gone.acquire()
    gone._stop.set()  # its renewals stop, as when its process is killed
    time.sleep(2.0)
    warnings: list[str] = []
    taker = LeaseLock(folder, "duet batch", warn=warnings.append, ttl_s=10.0)
    taker.acquire()
    try:
        assert len(warnings) == 1 and "taking over the stale lake lock of `duet run (killed)`" in warnings[0]
        gone.release()
        assert lock_holder(folder).command == "duet batch"
    finally:
        taker.release()
    assert lock_holder(folder) is None


def test_two_racing_writers_one_wins(object_store: Any, s3_env: dict[str, str]) -> None:
    from pipelines.lake.lease import LeaseLock
    from pipelines.lake.lock import LakeBusy

    folder = f"s3://{object_store.bucket}/{_prefix()}/flights"
    locks = [LeaseLock(folder, f"writer {i}", ttl_s=30.0) for i in range(4)]
    start = threading.Barrier(len(locks))
    outcome: dict[int, str] = {}

    def take(i: int) -> None:
        start.wait()
        try:
            locks[i].acquire()
            outcome[i] = "won"
        except LakeBusy:
            outcome[i] = "busy"

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(locks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert sorted(outcome.values()) == ["busy", "busy", "busy", "won"], outcome
    finally:
        for lock in locks:
            lock.release()


# ------------------------------------------------------------------ duet run, query, serving
def _cli_env(store: Any, bootstrap: str) -> dict[str, str]:
    env = {**os.environ, **store.env(), "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "GX_ANALYTICS_ENABLED": "False",
           "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("DUET_PIPELINE", None)
    env.pop("DUET_LAKE", None)
    return env


@pytest.fixture(scope="module")
def s3_run(object_store: Any, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``duet run --limit 2000 --json --lake s3://duet/<prefix>`` in a fresh folder."""
    cwd = tmp_path_factory.mktemp("s3run")
    prefix = _prefix()
    root = f"s3://{object_store.bucket}/{prefix}"
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--limit", str(LIMIT), "--json",
                           "--lake", root], env=_cli_env(object_store, kafka_bootstrap), cwd=cwd,
                          capture_output=True, text=True, timeout=1500, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"stdout must hold one JSON object:\n{proc.stdout}\nstderr:\n{proc.stderr[-5000:]}"
    return {"proc": proc, "summary": json.loads(lines[0]), "root": root, "prefix": prefix, "cwd": cwd}


def _no_local_s3_folder(*folders: Path) -> None:
    for folder in folders:
        assert not [p for p in folder.iterdir() if p.name.lower().startswith(("s3:", "s3a:"))], folder


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_duet_run_on_the_object_store(s3_run: dict[str, Any], object_store: Any) -> None:
    proc, summary = s3_run["proc"], s3_run["summary"]
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert summary["lake"] == f"{s3_run['root']}/flights"
    assert summary["agreement"] == {v: 1.0 for v in flights.view_names}, summary.get("differences")
    assert all(summary["compared"][v] > 0 for v in flights.view_names), summary["compared"]
    assert summary["checks"] == {v: True for v in flights.view_names}, summary.get("check_failures")
    assert summary["unexplained"] == {v: 0 for v in flights.view_names}, summary.get("differences")
    assert log_lines(proc.stderr, summary["dead_lettered"]) == [], proc.stderr[-5000:]  # a quiet happy path
    keys = _objects(object_store, f"{s3_run['prefix']}/flights")
    base = f"{object_store.bucket}/{s3_run['prefix']}/flights"
    for part in ("raw/flights/_delta_log/", *(f"views/{v}/_delta_log/" for v in flights.view_names),
                 *(f"serving/{v}/_delta_log/" for v in flights.view_names)):
        assert any(k.startswith(f"{base}/{part}") for k in keys), part
    for name in ("views/_batch.json", "serving/_views.json", *(f"quality/{v}.json" for v in flights.view_names)):
        assert f"{base}/{name}" in keys, name
    assert f"{base}/.duet.lock" not in keys  # the lease was released
    assert object_store.secret_key not in proc.stderr + proc.stdout
    _no_local_s3_folder(s3_run["cwd"], REPO, REPO / "lake" if (REPO / "lake").is_dir() else REPO)


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_duet_query_answers_from_the_store(s3_run: dict[str, Any], object_store: Any, kafka_bootstrap: str) -> None:
    """With the read-only identity: a reader needs no write permission."""
    env = {**_cli_env(object_store, kafka_bootstrap), **object_store.env(reader=True)}
    env.pop("KAFKA_BOOTSTRAP_SERVERS")  # the published views alone
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "query", "departures_hourly", "EWR", "--json",
                           "--lake", s3_run["root"]], env=env, cwd=s3_run["cwd"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert rows and {r["source"] for r in rows} <= {"batch", "speed"}
    assert sum(r["value"]["count"] for r in rows) > 0
    _no_local_s3_folder(s3_run["cwd"])


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_two_duet_serve_answer_the_same_version_after_a_publish(s3_run: dict[str, Any], object_store: Any,
                                                               kafka_bootstrap: str, s3_env: dict[str, str]) -> None:
    """Two ``duet serve`` processes (the read-only identity) on one object-store lake: before
    and after a publish both answer the same version with the same rows, and every answer
    in between is one whole version, the old or the new one (Delta's atomic commit)."""
    import httpx
    from deltalake import DeltaTable

    from batch_layer.delta.storage import delta_storage_options
    from serving.views.batch import read_batch_watermark
    from serving.views.publish import served_view_path, write_served_view
    from speed_layer.runtime.kraft_config import free_ports

    folder = f"{s3_run['root']}/flights"
    env = {**_cli_env(object_store, kafka_bootstrap), **object_store.env(reader=True)}
    env.pop("KAFKA_BOOTSTRAP_SERVERS")  # the published views alone
    ports = free_ports(2)
    procs = [subprocess.Popen([sys.executable, "-m", "pipelines.cli", "serve", "--lake", s3_run["root"],
                               "--port", str(port)], env=env, cwd=s3_run["cwd"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for port in ports]
    url = "/views/departures_hourly/keys/EWR?limit=1000"
    try:
        clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) for port in ports]

        def answers() -> list[dict[str, Any]]:
            return [c.get(url).json() for c in clients]

        deadline = time.monotonic() + 120
        while True:
            try:
                before = answers()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                    [p.stderr.read()[-2000:] for p in procs if p.poll() is not None]
                time.sleep(0.5)
        assert before[0]["version"] == before[1]["version"] and before[0]["rows"] == before[1]["rows"] != []
        served = DeltaTable(served_view_path(folder, "departures_hourly"), storage_options=delta_storage_options())
        df = served.to_pandas()
        cut = sorted(r["window_start"] for r in before[0]["rows"])[len(before[0]["rows"]) // 2]
        df = df[(df["key"] != "EWR") | (df["window_start"] >= cut)]  # the new version: EWR's later half
        expected = {version: rows for version, rows in (
            (before[0]["version"], before[0]["rows"]),
            (before[0]["version"] + 1, [r for r in before[0]["rows"] if r["window_start"] >= cut]))}
        version = write_served_view(folder, "departures_hourly", df, read_batch_watermark(folder))
        assert version == before[0]["version"] + 1 and 0 < len(expected[version]) < len(before[0]["rows"])
        deadline = time.monotonic() + 60  # duet serve looks for new versions every 5 s
        while True:
            now = answers()
            assert all(a["version"] in expected and a["rows"] == expected[a["version"]] for a in now), now
            if [a["version"] for a in now] == [version, version]:
                break
            assert time.monotonic() < deadline, [a["version"] for a in now]
            time.sleep(0.5)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


#: the Dagster run of the test below, in a process of its own: its Spark session starts after
#: the lake resource resolved the s3:// root, with the S3A jars (batch_layer.spark_s3a), as in
#: a Dagster run worker; the session's own Spark may have started without them
_DAGSTER_RUN = """
import json, sys
import dagster as dg
from pipelines.dagster import KafkaResource, LakeResource, SparkResource
from pipelines.dagster.assets import batch_views, raw_assets
from pipelines.dagster.checks import view_checks
from pipelines.examples.flights import pipeline as flights
from pipelines.job.steps import load_data, reset_pipeline

bootstrap, root = sys.argv[1:3]
reset_pipeline(flights, bootstrap, flights.lake(root))
load_data(flights, bootstrap, limit=300)
resources = {"kafka": KafkaResource(bootstrap_servers=bootstrap), "lake": LakeResource(path=root),
             "spark": SparkResource()}
instance = dg.DagsterInstance.ephemeral()
raws = raw_assets(flights)
ok = dg.materialize(raws, resources=resources, instance=instance).success
res = dg.materialize([*(dg.AssetSpec(a.key) for a in raws), batch_views(flights), *view_checks(flights)],
                     partition_key="2013-01-01", resources=resources, instance=instance)
mats = {m.materialization.asset_key.path[-1]: m.materialization.metadata["rows"].value
        for m in res.get_asset_materialization_events()}
print(json.dumps({"raw": ok, "views": res.success, "rows": mats,
                  "checks": [ev.passed for ev in res.get_asset_check_evaluations()]}))
"""


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_dagster_assets_and_checks_on_the_store(object_store: Any, kafka_bootstrap: str) -> None:
    """The Dagster resources on an ``s3://`` root: the raw archive, a day's batch views (Spark
    through s3a) and their blocking checks; the run's lease is gone after it."""
    prefix = _prefix()
    root = f"s3://{object_store.bucket}/{prefix}"
    done = subprocess.run([sys.executable, "-c", _DAGSTER_RUN, kafka_bootstrap, root],
                          env=_cli_env(object_store, kafka_bootstrap), capture_output=True, text=True,
                          timeout=800, check=False)
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["raw"] and result["views"], done.stderr[-5000:]
    assert set(result["rows"]) == {f"view_{v}" for v in flights.view_names} and result["rows"]["view_departures_hourly"] > 0
    assert len(result["checks"]) == 4 and all(result["checks"])
    keys = _objects(object_store, f"{prefix}/flights")
    base = f"{object_store.bucket}/{prefix}/flights"
    assert f"{base}/quality/departures_hourly.json" in keys and f"{base}/.duet.lock" not in keys
    assert any(k.startswith(f"{base}/views/departures_hourly/_delta_log/") for k in keys)
