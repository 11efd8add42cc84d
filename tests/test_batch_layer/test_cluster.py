"""The batch layer on a real distributed engine: a Spark standalone cluster on loopback.

``test_flights_batch_on_a_standalone_cluster_equals_local`` starts one master and two
workers (1 core, 1 GiB each) with ``bin/spark-class`` of the pyspark pip package, runs the
flights batch recompute (``pipelines.job.steps.run_batch_layer`` on the root
``pipelines.lake.root.resolve_lake`` gives, what ``duet batch --master spark://...`` runs) on
the cluster in a subprocess (a Python process holds one SparkContext, and the other tests
share a local one), with the master taken from ``$DUET_SPARK_MASTER`` and the lake on the
tests' object store (``s3://duet/<unique prefix>``, the ``object_store`` fixture): the
executors load the Delta and S3A jars from their own disk (on ``spark.executor.extraClassPath``,
``DUET_SPARK_JARS_ON_WORKERS=1``: nothing copied) and get the store's endpoint and keys from the
driver's Hadoop configuration, since the workers are started without any ``AWS_*``
setting, as on hosts of their own. It checks that the views the cluster wrote to the bucket
equal those the tests' shared local session (``local[*]``) computes from the same raw
tables on the local disk. To save time the cluster's driver starts while the workers boot
(it waits for both executors: ``spark.cores.max=2``,
``spark.scheduler.minRegisteredResourcesRatio=1``) and the local reference runs meanwhile.
Master and workers are stopped by process group (SIGTERM, then SIGKILL), even on failure.

The other tests check the configuration surface without starting Spark: master and Connect
URL validation, the Delta jars folder, lake URIs, ``duet batch --master``.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from batch_layer.delta.io import join_location, lake_location, local_path
from batch_layer.errors import BatchLayerError
from batch_layer.spark import (
    DEFAULT_MASTER,
    SparkConfigError,
    default_delta_jars_dir,
    delta_jars,
    get_spark,
    resolve_master,
    resolve_remote,
)

sys.path.insert(0, str(Path(__file__).parents[1] / "test_equivalence"))
from equivalence_kit import json_records, produce, write_raw  # noqa: E402

FLIGHTS = 1000  # flights in the test lake (plus every plane, airport and airline)
_SPARK_ENV = ("DUET_SPARK_MASTER", "SPARK_REMOTE", "MASTER", "SPARK_CONNECT_MODE_ENABLED")


# ------------------------------------------------------------------ configuration (no Spark)
@pytest.mark.parametrize(
    "master",
    ["local", "local[2]", "local[*]", "local[4,2]", "spark://127.0.0.1:7077", "spark://a:7077,b.example.com:7077",
     "yarn", "k8s://https://10.0.0.1:6443", "k8s://kube.local"],
)
def test_accepted_masters(master: str) -> None:
    assert resolve_master(master) == master


@pytest.mark.parametrize(
    "master", ["lokal", "local[0]", "local[x]", "spark://host", "spark://host:99999", "mesos://h:5050",
               "sc://h:15002", "yarn-client", "k8s://"],
)
def test_a_bad_master_names_the_key_and_the_allowed_forms(master: str) -> None:
    with pytest.raises(SparkConfigError) as err:
        resolve_master(master)
    msg = str(err.value)
    assert "spark.master" in msg and repr(master) in msg
    assert "local[*]" in msg and "spark://HOST:PORT" in msg and "yarn" in msg and "k8s://" in msg


def test_master_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DUET_SPARK_MASTER", raising=False)
    assert resolve_master() == DEFAULT_MASTER == "local[*]"
    monkeypatch.setenv("DUET_SPARK_MASTER", "spark://127.0.0.1:7077")
    assert resolve_master() == "spark://127.0.0.1:7077"
    assert resolve_master("local[2]") == "local[2]"  # the argument wins
    monkeypatch.setenv("DUET_SPARK_MASTER", "nonsense")
    with pytest.raises(SparkConfigError, match=r"\$DUET_SPARK_MASTER"):
        resolve_master()


def test_connect_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert resolve_remote() is None
    assert resolve_remote("sc://127.0.0.1:15002/;user_id=duet") == "sc://127.0.0.1:15002/;user_id=duet"
    monkeypatch.setenv("SPARK_REMOTE", "http://127.0.0.1:15002")
    with pytest.raises(SparkConfigError, match=r"SPARK_REMOTE .*sc://HOST"):
        resolve_remote()
    # both a master and a Connect URL: refused before any session is looked up or started
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    with pytest.raises(SparkConfigError, match="set only one"):
        get_spark(master="local[2]")


def test_delta_jars_folder_from_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DUET_DELTA_JARS", raising=False)
    monkeypatch.setenv("DUET_HOME", str(tmp_path / "home"))
    assert default_delta_jars_dir() == tmp_path / "home" / "jars" / "delta"
    monkeypatch.setenv("DUET_DELTA_JARS", str(tmp_path / "jars"))
    assert default_delta_jars_dir() == tmp_path / "jars"
    with pytest.raises(BatchLayerError, match="DUET_DELTA_JARS"):
        delta_jars()
    (tmp_path / "mine").mkdir()
    for name in ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"):
        (tmp_path / "mine" / name).write_bytes(b"")
    assert [j.name for j in delta_jars(tmp_path / "mine")] == ["delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"]


def test_jars_on_workers_go_on_the_class_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from batch_layer.spark import SparkConfigError
    from batch_layer.spark_jars import jar_settings, jars_on_workers

    jars = [tmp_path / "delta-spark.jar", tmp_path / "bundle-2.jar"]
    assert jar_settings(jars, ["/mine.jar"], on_workers=False) == {"spark.jars": f"{jars[0]},{jars[1]},/mine.jar"}
    path = f"{jars[0]}:{jars[1]}"
    assert jar_settings(jars, ["/mine.jar"], on_workers=True) == {
        "spark.jars": "/mine.jar", "spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}
    monkeypatch.delenv("DUET_SPARK_JARS_ON_WORKERS", raising=False)
    assert not jars_on_workers()
    monkeypatch.setenv("DUET_SPARK_JARS_ON_WORKERS", "1")
    assert jars_on_workers()
    monkeypatch.setenv("DUET_SPARK_JARS_ON_WORKERS", "yes")
    with pytest.raises(SparkConfigError, match="DUET_SPARK_JARS_ON_WORKERS='yes': allowed values are 0 and 1"):
        jars_on_workers()


def test_lake_locations() -> None:
    # local paths stay Path objects, exactly as before
    assert join_location("/data/lake", "raw", "flights") == Path("/data/lake/raw/flights")
    assert join_location(Path("lake"), "views", "v") == Path("lake/views/v")
    # URIs are joined as strings; a URI folded by Path() ("s3a:/b/l") gets its "//" back
    assert join_location("s3a://bucket/lake/", "raw", "flights") == "s3a://bucket/lake/raw/flights"
    assert join_location(Path("s3a://bucket/lake"), "raw", "t") == "s3a://bucket/lake/raw/t"
    assert join_location(Path("hdfs://nn:8020/lake"), "views", "v") == "hdfs://nn:8020/lake/views/v"
    assert lake_location("file:/data/lake") == lake_location(Path("file:///data/lake")) == "file:///data/lake"
    assert local_path("file:///data/lake/raw/t") == Path("/data/lake/raw/t")
    assert local_path("s3a://bucket/lake") is None


def test_duet_batch_master_option_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad ``--master`` (or ``$DUET_SPARK_MASTER``) fails with exit code 2 before any broker
    or JVM starts."""
    from pipelines.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["batch", "--help"], terminal_width=200)
    assert res.exit_code == 0 and "--master" in res.output
    for key in _SPARK_ENV:
        monkeypatch.delenv(key, raising=False)
    res = runner.invoke(app, ["batch", "--master", "spark://nohost"])
    assert res.exit_code == 2, res.output
    assert "spark.master" in res.output and "spark://HOST:PORT" in res.output
    monkeypatch.setenv("DUET_SPARK_MASTER", "local[0]")
    res = runner.invoke(app, ["batch"])
    assert res.exit_code == 2 and "$DUET_SPARK_MASTER" in res.output, res.output
    monkeypatch.delenv("DUET_SPARK_MASTER")
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    res = runner.invoke(app, ["batch", "--master", "local[2]"])
    assert res.exit_code == 2 and "set only one" in res.output, res.output


# ------------------------------------------------------------------ a real standalone cluster
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """Stop ``proc`` and its children (its own process group): SIGTERM, then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        try:  # the JVM is gone; its children (executors, Python workers) may not be yet
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
    if proc.poll() is None:
        proc.wait(timeout=5)


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1, started with the
    ``bin/spark-class`` of the pyspark package on free ports; logs and work dirs under
    ``root``. Use as a context manager: entering returns once the master is ALIVE and the
    workers are launched (:meth:`wait_workers` waits for their registration); leaving
    stops everything."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        import pyspark

        self.root, self.n_workers, self.cores, self.memory = root, workers, cores, memory
        self.spark_home = Path(pyspark.__file__).parent
        self.port, self.webui_port = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def __enter__(self) -> "StandaloneCluster":
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        props = self.root / "cluster.properties"
        props.write_text("spark.master.rest.enabled false\nspark.worker.cleanup.enabled false\n")
        self.env = {
            # no AWS_* settings: the executors get the store's from the driver, as on other hosts
            **{k: v for k, v in os.environ.items() if k not in _SPARK_ENV and not k.startswith("AWS_")},
            "SPARK_HOME": str(self.spark_home),
            "SPARK_CONF_DIR": str(self.root / "conf"),  # no ambient spark-defaults.conf
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "PYSPARK_PYTHON": sys.executable,
        }
        try:
            self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(self.port), "--webui-port", str(self.webui_port), "--properties-file", str(props))
            self.wait(lambda s: s.get("status") == "ALIVE", "the master to be ALIVE")
            for i in range(self.n_workers):
                work = self.root / f"worker{i}"
                work.mkdir(exist_ok=True)
                self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                            "--port", str(_free_port()), "--webui-port", str(_free_port()),
                            "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work),
                            "--properties-file", str(props), self.url)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self, name: str, cls: str, *args: str) -> None:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(self.spark_home / "bin" / "spark-class"), cls, *args],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: executors and Python workers die with it
            )
        self.procs.append((name, proc, log))

    def wait_workers(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """The master's state once every worker has registered (ALIVE).

        Raises:
            RuntimeError: a master or worker process exited.
            TimeoutError: not all workers registered within ``timeout_s`` seconds.
        """
        return self.wait(lambda s: s.get("aliveworkers") == self.n_workers, f"{self.n_workers} workers to register",
                         timeout_s)

    def state(self) -> dict[str, Any]:
        """The master's JSON status (``/json/``): workers, apps, ``aliveworkers``..."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def wait(self, ready: Any, what: str, timeout_s: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            for name, proc, log in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}:\n{_tail(log)}")
            try:
                state = self.state()
                if ready(state):
                    return state
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}\n{_tail(log, 10)}" for n, _, log in self.procs)
                raise TimeoutError(f"waited {timeout_s:.0f} s for {what}\n{logs}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop the workers, then the master (each by its process group)."""
        for _, proc, _ in reversed(self.procs):
            _stop_group(proc)
        self.procs.clear()


#: The flights batch recompute of ``duet batch`` in a fresh process; prints one JSON line.
_DRIVER = """
import json, sys, time
from batch_layer.spark import get_spark, stop_spark
from pipelines.examples.flights import pipeline
from pipelines.job.steps import run_batch_layer
from pipelines.lake.root import resolve_lake

t0 = time.monotonic()
lake, conf = resolve_lake(sys.argv[1]), json.loads(sys.argv[2])  # an s3:// root: checked, the S3A jars wanted
spark = get_spark("duet-cluster-test", conf=conf)  # the master from $DUET_SPARK_MASTER, else local[*]
sc = spark.sparkContext
started_s = time.monotonic() - t0
stats = run_batch_layer(pipeline, spark, lake)
infos = sc._jsc.sc().statusTracker().getExecutorInfos()  # the driver's own entry included
out = {"master": sc.master, "app_id": sc.applicationId, "executors": len(infos) - 1,
       "parallelism": sc.defaultParallelism, "rows": stats.rows, "watermark_ms": stats.watermark_ms,
       "dropped": stats.dropped, "start_s": round(started_s, 1), "batch_s": round(stats.seconds, 1)}
stop_spark()
print(json.dumps(out), flush=True)
"""


class Driver:
    """``_DRIVER`` in a subprocess (own process group, killed if still running on exit)."""

    def __init__(self, name: str, lake: str, log_dir: Path, master: str | None, conf: dict[str, str],
                 env_extra: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _SPARK_ENV}
        env["PYSPARK_PYTHON"] = sys.executable
        if master is not None:
            env["DUET_SPARK_MASTER"] = master  # the environment route of get_spark()
        env.update(env_extra or {})
        self.name, self.err = name, log_dir / f"driver-{name}.err"
        with self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _DRIVER, lake, json.dumps(conf)], env=env, stdout=subprocess.PIPE,
                stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def result(self, timeout_s: float) -> dict[str, Any]:
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(self.proc, grace_s=5)
            raise AssertionError(f"{self.name} driver still running after {timeout_s:.0f} s:\n{_tail(self.err)}") from None
        lines = out.decode().strip().splitlines()
        assert self.proc.returncode == 0 and lines, (
            f"{self.name} driver failed ({self.proc.returncode}):\n{_tail(self.err)}"
        )
        return json.loads(lines[-1])

    def close(self) -> None:
        if self.proc.poll() is None:
            _stop_group(self.proc, grace_s=5)


def _flights_lake(lake: Path) -> None:
    """``<lake>/raw/*`` of the flights topology: the first FLIGHTS flights, every plane,
    airport and airline, partitioned as the Java producer would (no broker)."""
    from pipelines.examples.flights.data import TOPICS, flight_records, table_records

    raws = produce("flights", json_records(flight_records(FLIGHTS)), TOPICS["flights"])
    for t in ("planes", "airports", "airlines"):
        raws += produce(t, json_records(table_records(t)), TOPICS[t])
    write_raw(lake, raws)


@pytest.mark.spark
def test_flights_batch_on_a_standalone_cluster_equals_local(spark: Any, tmp_path: Path, object_store: Any,
                                                            unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from batch_layer.delta.storage import read_text
    from batch_layer.run import read_view
    from pipelines.examples.flights import pipeline as flights
    from pipelines.job.steps import run_batch_layer
    from pipelines.examples.flights.topology import VIEW_NAMES as VIEWS

    t0 = time.monotonic()
    for key, value in object_store.env().items():  # the standard AWS settings: the driver's and delta-rs's
        monkeypatch.setenv(key, value)
    local_lake, cluster_lake = tmp_path / "lake-local", object_store.lake_uri(f"cluster/{unique_name}")
    _flights_lake(local_lake)
    _flights_lake(cluster_lake)
    conf = {
        "spark.executor.memory": "768m",  # within the workers' 1 GiB
        "spark.cores.max": "2",  # with the ratio 1: jobs wait for both executors
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
    }
    with StandaloneCluster(tmp_path / "spark", workers=2, cores=1, memory="1g") as cluster:
        # the workers run on this host, so the jars folder is at the same path on each
        remote = Driver("cluster", cluster_lake, tmp_path, cluster.url, conf, {"DUET_SPARK_JARS_ON_WORKERS": "1"})
        try:
            local = run_batch_layer(flights, spark, local_lake)  # the reference, while the cluster boots
            cluster.wait_workers()
            workers_up_s = time.monotonic() - t0
            on_cluster = remote.result(timeout_s=600)
        finally:
            remote.close()
        apps = {a["id"]: a for a in cluster.wait(
            lambda s: any(a["id"] == on_cluster["app_id"] for a in s.get("completedapps", [])),
            "the application to complete", timeout_s=60)["completedapps"]}

    # the recompute ran on the cluster: its master, one executor per worker, 2 cores in all
    assert on_cluster["master"] == cluster.url
    assert on_cluster["executors"] == 2 and on_cluster["parallelism"] == 2
    assert apps[on_cluster["app_id"]]["cores"] == 2 and apps[on_cluster["app_id"]]["state"] == "FINISHED"
    for i in range(2):  # each worker launched an executor of the application, which loaded the jars
        app = tmp_path / "spark" / f"worker{i}" / on_cluster["app_id"]  # from their paths on the worker,
        assert app.is_dir() and not list(app.rglob("*.jar"))  # not copied into its work folder (~660 MB each)
    assert spark.sparkContext.master.startswith("local")
    logs = [*(tmp_path / "spark").glob("*.log"), *(tmp_path / "spark").rglob("stderr"), remote.err]
    assert not [p for p in logs if object_store.secret_key in p.read_text(errors="replace")]  # executors log at INFO

    # same views, same watermark, same _batch.json as the local session
    assert on_cluster["rows"] == local.rows and set(local.rows) == set(VIEWS)
    assert all(n > 0 for n in local.rows.values())
    assert (on_cluster["watermark_ms"], on_cluster["dropped"]) == (local.watermark_ms, local.dropped)
    for view in VIEWS:
        pd.testing.assert_frame_equal(read_view(cluster_lake, view), read_view(local_lake, view),
                                      check_dtype=True, obj=view)
    batch_docs = [json.loads(read_text(f"{cluster_lake}/views/_batch.json") or "null"),
                  json.loads((local_lake / "views" / "_batch.json").read_text())]
    for doc in batch_docs:
        doc.pop("finished_at")
    assert batch_docs[0] == batch_docs[1]
    print(f"\ncluster test: local reference {local.seconds:.1f} s, both workers seen registered at {workers_up_s:.1f} s; "
          f"cluster driver start {on_cluster['start_s']} s, batch {on_cluster['batch_s']} s; "
          f"total {time.monotonic() - t0:.1f} s")
