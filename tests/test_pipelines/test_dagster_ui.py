"""Dagster as a user runs it: ``duet ui`` (``dagster dev -m pipelines.dagster.workspace`` with
Kafka ready) on the session's broker, with BOTH example pipelines (flights and shop) in one
code location, driven through its GraphQL API and looked at in a real headless Chromium.

In order, as a user would:

1. ``duet ui --load --yes --limit 3000`` (no ``--pipeline``, outside a project: the examples)
   resets both pipelines (``--yes``: no terminal to ask), loads their sample data and starts
   the UI;
2. one day (``2013-01-02``) of ``flights_recompute`` and the first day of ``shop_recompute``
   are materialized: ingest, batch views, GX checks, serving publish;
3. the ``flights_new_kafka_data`` sensor skips while the lake holds everything, and requests
   a recompute once one more flight arrives;
4. a run against an unreachable broker fails, and Dagster shows why;
5. a backfill over the first week of flights' daily partitions (one run:
   ``BackfillPolicy.single_run``);
6. the browser opens the asset graph of both pipelines, a view's lineage, a partitioned asset,
   its checks, the finished backfill and the failed run, asserts what a user sees and saves
   the screenshots of ``docs/img/``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipelines.dagster_client import DagsterClient

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.browser, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
IMG = REPO / "docs" / "img"
LIMIT = 3000
DAY = "2013-01-02"
FAILED_DAY = "2013-02-01"  # outside WEEK: the failed run marks its partition failed
WEEK = [f"2013-01-0{d}" for d in range(1, 8)]
VIEWS = ["departures_hourly", "same_tz_hourly", "seats_by_dest_daily", "plane_duty_sessions"]
FLIGHTS = "pipelines.examples.flights:pipeline"


def _flights() -> Any:
    from pipelines.examples.flights import pipeline

    return pipeline


def _shop() -> Any:
    from pipelines.examples.shop import pipeline

    return pipeline


@dataclass
class DagsterUI:
    url: str
    lake: Path  # the lake ROOT: <lake>/flights, <lake>/shop
    bootstrap: str
    client: DagsterClient
    runs: dict[str, str]  # what the tests launched: name -> run id / backfill id

    def gql(self, query: str, **variables: Any) -> dict[str, Any]:
        return self.client.query(query, **variables)

    def wait_run(self, run_id: str, timeout_s: float = 600) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.client.run_status(run_id)
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                return status
            time.sleep(2)
        pytest.fail(f"run {run_id} did not finish in {timeout_s} s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ui(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DagsterUI]:
    tmp = tmp_path_factory.mktemp("dagster_ui")
    lake, port = tmp / "lake", _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp / "dagster_home"), "PYSPARK_PYTHON": sys.executable,
           "GX_ANALYTICS_ENABLED": "False"}
    for var in ("DUET_PIPELINE", "DUET_PIPELINES", "DUET_PROJECT_ROOT"):  # no --pipeline: both examples
        env.pop(var, None)
    log = (tmp / "duet-ui.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "ui", "--bootstrap", kafka_bootstrap, "--load", "--yes", "--limit",
         str(LIMIT), "--lake", str(lake), "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            pytest.fail(f"duet ui exited with {proc.returncode}:\n{(tmp / 'duet-ui.log').read_text()[-5000:]}")
        try:
            if httpx.get(f"{url}/server_info", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the Dagster UI did not answer within 300 s")
        time.sleep(2)
    try:
        yield DagsterUI(url=url, lake=lake, bootstrap=kafka_bootstrap, client=DagsterClient(url), runs={})
    finally:
        proc.send_signal(signal.SIGTERM)  # duet ui stops dagster dev and its children
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _materializations(ui: DagsterUI, path: list[str], partition: str) -> list[tuple[str, str]]:
    data = ui.gql(
        """query A($key: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $key) { ... on Asset {
             assetMaterializations(partitions: $p) { partition runId } } } }""",
        key={"path": path}, p=[partition],
    )
    return [(m["partition"], m["runId"]) for m in data["assetOrError"]["assetMaterializations"]]


def test_materialize_one_day_of_each_pipeline(ui: DagsterUI) -> None:
    from serving.quality.suite import load_results
    from serving.views.index import ViewIndex

    shop = _shop()
    shop_day = shop.partitions.start.isoformat()
    run_id = ui.client.launch_run("flights_recompute", DAY)
    ui.runs["day"] = run_id
    shop_run = ui.runs["shop_day"] = ui.client.launch_run("shop_recompute", shop_day)
    assert ui.wait_run(run_id) == "SUCCESS"
    assert ui.wait_run(shop_run) == "SUCCESS"
    assert _materializations(ui, ["flights", "view_departures_hourly"], DAY) == [(DAY, run_id)]
    for view in shop.view_names:
        assert _materializations(ui, ["shop", f"view_{view}"], shop_day) == [(shop_day, shop_run)]
    # each pipeline publishes and checks its views in its own folder of the lake
    for name, views in (("flights", VIEWS), ("shop", list(shop.view_names))):
        assert sorted(ViewIndex(ui.lake / name).views()) == sorted(views)
        assert {v: r.success for v, r in load_results(ui.lake / name).items()} == {v: True for v in views}


def test_the_sensor_requests_a_recompute_when_new_kafka_data_arrives(ui: DagsterUI) -> None:
    import dagster as dg
    from confluent_kafka import Producer
    from deltalake import DeltaTable

    from pipelines.dagster import KafkaResource, LakeResource
    from pipelines.dagster.schedules import recompute_job
    from pipelines.dagster.sensors import new_kafka_data as new_kafka_data_sensor

    flights = _flights()
    new_kafka_data = new_kafka_data_sensor(flights, recompute_job(flights))
    resources = {"kafka": KafkaResource(bootstrap_servers=ui.bootstrap), "lake": LakeResource(path=str(ui.lake))}
    with dg.build_sensor_context(resources=resources) as ctx:
        result = new_kafka_data(ctx)
    assert isinstance(result, dg.SkipReason), result
    assert "no new records" in result.skip_message

    # one more flight: the first archived one again, byte for byte
    row = DeltaTable(str(flights.lake(ui.lake) / "raw" / "flights")).to_pyarrow_table().slice(0, 1).to_pylist()[0]
    producer = Producer({"bootstrap.servers": ui.bootstrap})
    producer.produce("flights", key=row["key"], value=row["value"], timestamp=row["timestamp"],
                     partition=row["partition"])
    assert producer.flush(30) == 0
    del producer
    with dg.build_sensor_context(resources=resources) as ctx:
        request = new_kafka_data(ctx)
    assert isinstance(request, dg.RunRequest), request
    assert new_kafka_data.job_name == "flights_recompute" and request.tags["duet/new_records"] == "1"
    assert request.partition_key == "2013-12-31" and request.tags["duet/pipeline"] == "flights"
    assert "flights:" in request.run_key
    with dg.build_sensor_context(resources=resources) as ctx:  # same data, same run key: no second run
        assert new_kafka_data(ctx).run_key == request.run_key


def test_a_failed_run_says_why(ui: DagsterUI) -> None:
    run_id = ui.runs["failed"] = ui.client.launch_run(
        "flights_recompute", FAILED_DAY, {"resources": {"kafka": {"config": {"bootstrap_servers": "127.0.0.1:1"}}}})
    assert ui.wait_run(run_id) == "FAILURE"
    events = ui.gql(
        """query E($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { __typename
             ... on ExecutionStepFailureEvent { stepKey error { message } failureMetadata { description } } } } } }""",
        id=run_id,
    )["logsForRun"]["events"]
    failures = [e for e in events if e and e["__typename"] == "ExecutionStepFailureEvent"]
    assert {f["stepKey"] for f in failures} >= {"flights__raw_flights", "flights__raw_planes"}
    for f in failures:
        assert f["failureMetadata"]["description"].startswith("cannot reach Kafka at 127.0.0.1:1"), f


def test_backfill_a_week_of_daily_partitions(ui: DagsterUI) -> None:
    """``duet backfill`` launches it through the UI and shows its progress to the end."""
    res = subprocess.run([sys.executable, "-m", "pipelines.cli", "backfill", WEEK[0], WEEK[-1], "--url", ui.url,
                          "--pipeline", FLIGHTS],
                         capture_output=True, text=True, timeout=900, check=False, cwd=REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    backfill_id = ui.runs["backfill"] = out.split("backfill ", 1)[1].split(":", 1)[0]
    assert f"{ui.url}/runs/b/{backfill_id}" in out
    assert "28/28" in out  # the progress bar: 7 days x 4 views
    assert out.rstrip().endswith(f"backfill {backfill_id} completed_success: 28 asset partitions materialized, "
                                 "0 failed"), out
    state = ui.client.backfill_progress(backfill_id)
    assert (state.status, state.partitions, state.materialized, state.failed) == ("COMPLETED_SUCCESS", 7, 28, 0)
    assert [s for _, s in state.runs] == ["SUCCESS"]  # single_run: one batch run for the week
    stats = ui.gql(
        """query S($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
             partitionStats { numMaterialized numPartitions } } } }""",
        key={"path": ["flights", "view_seats_by_dest_daily"]},
    )["assetNodeOrError"]["partitionStats"]
    assert stats == {"numMaterialized": 7, "numPartitions": 365}  # the week (2013-01-02 among them)


# ------------------------------------------------------------------------------------- browser
def _open(browser: Any, url: str, text: str, timeout: float = 60) -> str:
    """Load ``url`` and wait until the page's text holds ``text``; return the text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    _dismiss_onboarding(browser)
    try:
        WebDriverWait(browser, timeout).until(lambda d: text in d.find_element(By.TAG_NAME, "body").text)
    except TimeoutException:
        page = browser.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"{url} never showed {text!r}; it shows:\n{page[:3000]}")
    time.sleep(1.5)  # let the graph layout settle before a screenshot
    return browser.find_element(By.TAG_NAME, "body").text


def _dismiss_onboarding(browser: Any) -> None:
    """Dagster's first-visit dialog ("Join the Dagster community"): Skip."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        buttons = browser.find_elements(By.XPATH, "//button[normalize-space()='Skip']")
        if buttons:
            buttons[0].click()
            return
        if "Join the Dagster community" not in browser.find_element(By.TAG_NAME, "body").text:
            time.sleep(0.5)
        else:
            time.sleep(0.2)


def test_what_a_user_sees_in_the_dagster_ui(ui: DagsterUI, browser: Any) -> None:
    if {"day", "backfill", "failed"} - set(ui.runs):
        pytest.skip("needs the runs of the tests above")
    # both pipelines, each: Kafka -> ingest -> batch -> serving, the speed layer beside it
    text = _open(browser, f"{ui.url}/asset-groups", "Global asset lineage")
    for name in ("flights", "shop"):
        for group in ("kafka", "ingest", "batch", "serving", "speed"):
            assert f"{name}_{group}" in text, (name, group)
    browser.save_screenshot(str(IMG / "dagster-pipelines.png"))
    # one batch view with its lineage: the raw topics it reads, the publish that reads it
    text = _open(browser, f"{ui.url}/assets/flights/view_departures_hourly?view=lineage&lineageScope=neighbors"
                 "&lineageDepth=1", "serving_publish")
    for asset in ("raw_flights", "raw_planes", "raw_airports", "raw_airlines", "serving_publish"):
        assert asset in text
    browser.save_screenshot(str(IMG / "dagster-lineage.png"))
    # the partitioned asset: the 7 days of the week materialized, the failed run's day failed
    text = _open(browser, f"{ui.url}/assets/flights/view_departures_hourly?view=partitions", "Materialized (7)")
    assert "Failed (1)" in text and "Missing (357)" in text
    browser.save_screenshot(str(IMG / "dagster-partitions.png"))
    # the asset check wrapping the Great Expectations suite
    text = _open(browser, f"{ui.url}/assets/flights/view_departures_hourly?view=checks", "gx_suite")
    assert "Great Expectations suite of departures_hourly" in text and "Passed" in text
    browser.save_screenshot(str(IMG / "dagster-checks.png"))
    # the finished backfill
    text = _open(browser, f"{ui.url}/runs/b/{ui.runs['backfill']}", "2013-01-01...2013-01-07")
    assert "Succeeded" in text
    browser.save_screenshot(str(IMG / "dagster-backfill.png"))
    # the failed run names its reason
    text = _open(browser, f"{ui.url}/runs/{ui.runs['failed']}", "cannot reach Kafka at 127.0.0.1:1")
    assert "Failure" in text or "Failed" in text
    browser.save_screenshot(str(IMG / "dagster-failed-run.png"))
