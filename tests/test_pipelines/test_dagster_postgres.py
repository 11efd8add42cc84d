"""Dagster on PostgreSQL (issue 43, item 6): a throwaway PostgreSQL cluster on loopback
(Debian's server, :mod:`pipelines.dagster.postgres_server`) holds Dagster's run, event-log
and schedule storage (dagster-postgres) when ``duet ui --dagster-storage postgresql://...``
is given; what Dagster recorded survives a restart of the webserver and the daemon.

1. the runless catalog writer (:mod:`pipelines.dagster.catalog`) records a lake write into the
   PostgreSQL storage; another instance opened on the same ``DAGSTER_HOME`` reads it back;
2. ``duet ui`` on the shop's sample, with the storage on PostgreSQL: the ``shop_new_kafka_data``
   sensor, turned on, launches a run (the daemon), which materializes the views and evaluates
   their checks; ``duet ui`` is stopped and started again (no ``--load``): the run, its
   materializations and its check results are still there (GraphQL and ``DagsterInstance``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pytest

from pipelines.dagster.client import DagsterClient
from pipelines.dagster.home import STORAGE_ENV, ensure_dagster_home, sqlalchemy_url
from pipelines.dagster.keys import CHECK_NAME, view_asset_key
from pipelines.dagster.postgres_server import start_postgres, stop_postgres
from pipelines_testkit import wait_for_dagster_ui
from speed_layer.runtime.kraft_config import free_ports

pytestmark = [pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
SHOP = "pipelines.examples.shop:pipeline"
LIMIT = 400


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL cluster on 127.0.0.1 (a free port, a temp folder under /tmp that the
    ``postgres`` user can reach when the tests run as root); its URL."""
    folder = Path(tempfile.mkdtemp(prefix="duet-pg-"))
    os.chmod(folder, 0o755)
    try:
        yield start_postgres(folder, free_ports(1)[0])
    finally:
        stop_postgres(folder)
        shutil.rmtree(folder, ignore_errors=True)


def test_the_catalog_writer_records_into_postgres(postgres_url: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.dagster.catalog import record_lake_write
    from pipelines.examples.flights import pipeline as flights_p

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    home = ensure_dagster_home(storage=postgres_url, set_env=False)
    text = (home / "dagster.yaml").read_text()
    assert "postgres_url:\n      env: DUET_DAGSTER_STORAGE" in text and postgres_url not in text
    jan1 = 1356998400000
    frame = pd.DataFrame({"key": ["EWR", "JFK"], "window_start": [jan1, jan1 + 86_400_000], "window_end": [0, 0],
                          "value": ["{}"] * 2, "timestamp": [0] * 2})
    passed = type("Result", (), {"success": True, "results": []})()
    record_lake_write(flights_p, "duet batch", {"departures_hourly": frame}, {"departures_hourly": passed}, None)
    key = view_asset_key(flights_p, "departures_hourly")
    with dg.DagsterInstance.from_config(str(home)) as instance:  # a new instance: read back from the server
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert instance.get_materialized_partitions(key) == {"2013-01-01", "2013-01-02"}
        check = dg.AssetCheckKey(key, CHECK_NAME)
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key([check]).get(check)
        assert record is not None and record.evaluation is not None and record.evaluation.passed
    assert not any(home.glob("**/*.db"))  # nothing in SQLite


def _start_ui(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_ports(1)[0]
    out = log.open("a")
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "ui", *args, "--port", str(port)], env=env,
                            stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    wait_for_dagster_ui(proc, url, log)
    return proc, url


def _stop_ui(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)  # duet ui stops dagster dev: webserver, daemon, code server
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _runs(client: DagsterClient, sensor: str) -> list[dict[str, Any]]:
    return client.query("""query R($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs {
                             results { runId status } } } }""",
                        f={"tags": [{"key": "dagster/sensor_name", "value": sensor}]})["runsOrError"]["results"]


@pytest.mark.broker
@pytest.mark.spark
def test_a_sensor_run_survives_a_restart_of_webserver_and_daemon(postgres_url: str, kafka_bootstrap: str,
                                                                 tmp_path: Path) -> None:
    from pipelines.examples.shop import pipeline as shop

    home, log = tmp_path / "dagster_home", tmp_path / "duet-ui.log"
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYSPARK_PYTHON": sys.executable, "GX_ANALYTICS_ENABLED": "False"}
    for var in ("DUET_PIPELINE", "DUET_PIPELINES", "DUET_PROJECT_ROOT", STORAGE_ENV):
        env.pop(var, None)
    common = ["--pipeline", SHOP, "--bootstrap", kafka_bootstrap, "--lake", str(tmp_path / "lake"),
              "--dagster-storage", postgres_url]
    sensor = "shop_new_kafka_data"
    proc, url = _start_ui([*common, "--load", "--yes", "--limit", str(LIMIT)], env, log)
    try:
        client = DagsterClient(url)
        res = client.query("""mutation S($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename
                               ... on Sensor { sensorState { status } } ... on PythonError { message } } }""",
                           s={"repositoryLocationName": client.location_of("shop_recompute"),
                              "repositoryName": "__repository__", "sensorName": sensor})["startSensor"]
        assert res["__typename"] == "Sensor" and res["sensorState"]["status"] == "RUNNING", res
        deadline = time.monotonic() + 600
        while not (runs := _runs(client, sensor)) or runs[0]["status"] not in ("SUCCESS", "FAILURE", "CANCELED"):
            assert time.monotonic() < deadline, f"no finished run of {sensor}: {runs}"
            time.sleep(3)
        assert runs[0]["status"] == "SUCCESS", log.read_text()[-5000:]
        run_id = runs[0]["runId"]
    finally:
        _stop_ui(proc)
    assert postgres_url not in log.read_text()  # the credentials are never printed

    proc, url = _start_ui(common, env, log)  # webserver and daemon again, on the same storage
    try:
        client = DagsterClient(url)
        assert client.run_status(run_id) == "SUCCESS"
        assert [r["runId"] for r in _runs(client, sensor)][-1] == run_id
        os.environ[STORAGE_ENV] = sqlalchemy_url(postgres_url)  # what the dagster.yaml refers to
        try:
            with dg.DagsterInstance.from_config(str(home)) as instance:
                assert type(instance.run_storage).__name__ == "PostgresRunStorage"
                for view in shop.view_names:
                    key = view_asset_key(shop, view)
                    event = instance.get_latest_materialization_event(key)
                    assert event is not None and event.run_id == run_id, view
                    check = dg.AssetCheckKey(key, CHECK_NAME)
                    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([check]).get(check)
                    assert record is not None and record.run_id == run_id, view
                    assert record.evaluation is not None and record.evaluation.passed, view
        finally:
            os.environ.pop(STORAGE_ENV, None)
    finally:
        _stop_ui(proc)
    assert not any(home.glob("**/runs.db")) and not any(home.glob("**/index.db"))
