"""Dagster as a user runs it: ``duet ui`` (``dagster dev -m pipelines.dagster.workspace`` with
Kafka ready) on the session's broker, with BOTH example pipelines (flights and shop) in one
code location, driven through its GraphQL API and looked at in a real headless Chromium.

In order, as a user would:

1. ``duet ui --load --yes --limit 3000`` (no ``--pipeline``, outside a project: the examples)
   resets both pipelines (``--yes``: no terminal to ask), loads their sample data and starts
   the UI, its code location told where the flights speed service will listen
   (``$DUET_SPEED_SERVER_FLIGHTS``);
2. three more flights arrive, on 2013-03-10, 03-12 and 03-13; the ``flights_new_kafka_data``
   sensor, turned on, runs ``flights_recompute`` for the days the new records fall on
   (the sample's 2013-01-01..04 and those three), while the first day of ``shop_recompute`` is
   launched by hand: ingest, batch views, GX checks, serving publish. The partitions show
   exactly those days materialized (GraphQL, and the partitions bar in Chromium); the sensor
   then skips;
3. a run against an unreachable broker fails, and Dagster shows why;
4. a backfill over the first week of flights' daily partitions (one run:
   ``BackfillPolicy.single_run``) materializes that week;
5. the browser opens the asset graph of both pipelines, a view's lineage, the partitions bar
   after the backfill, its checks, the finished backfill and the failed run, asserts what a
   user sees and saves the screenshots of ``docs/img/``;
6. ``duet speed --follow --server`` runs the flights speed layer as a service on the topics the
   UI loaded; the ``flights_speed_layer_lag`` sensor, turned on, observes it, and the speed
   layer's asset page shows the service's state, lag and processed records as its ``/metrics``
   gives them, and the passed ``speed_lag`` check.
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

from pipelines_testkit import wait_for_dagster_ui
from pipelines.dagster.client import DagsterClient

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.browser, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
IMG = REPO / "docs" / "img"
LIMIT = 3000
SAMPLE_DAYS = ["2013-01-01", "2013-01-02", "2013-01-03", "2013-01-04"]  # what the first 3000 flights fall on
NEW_DAYS = ["2013-03-10", "2013-03-12", "2013-03-13"]  # three flights arriving later (2013-03-11: none)
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
    speed_server: str  # HOST:PORT of the flights speed service, as $DUET_SPEED_SERVER_FLIGHTS names it

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
    from pipelines.dagster.speed_probe import server_env

    tmp = tmp_path_factory.mktemp("dagster_ui")
    lake, port = tmp / "lake", _free_port()
    speed_server = f"127.0.0.1:{_free_port()}"  # where a test starts the flights speed service
    env = {**os.environ, "DAGSTER_HOME": str(tmp / "dagster_home"), "PYSPARK_PYTHON": sys.executable,
           "GX_ANALYTICS_ENABLED": "False", server_env(_flights()): speed_server}
    for var in ("DUET_PIPELINE", "DUET_PIPELINES", "DUET_PROJECT_ROOT"):  # no --pipeline: both examples
        env.pop(var, None)
    log = (tmp / "duet-ui.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "ui", "--bootstrap", kafka_bootstrap, "--load", "--yes", "--limit",
         str(LIMIT), "--lake", str(lake), "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    wait_for_dagster_ui(proc, url, tmp / "duet-ui.log")
    try:
        yield DagsterUI(url=url, lake=lake, bootstrap=kafka_bootstrap, client=DagsterClient(url), runs={},
                        speed_server=speed_server)
    finally:
        proc.send_signal(signal.SIGTERM)  # duet ui stops dagster dev and its children
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _materializations(ui: DagsterUI, path: list[str], partition: str) -> list[tuple[str, str, dict[str, str]]]:
    """``(partition, run id, {metadata label: text})`` of each materialization of ``partition``."""
    data = ui.gql(
        """query A($key: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $key) { ... on Asset {
             assetMaterializations(partitions: $p) { partition runId metadataEntries { label
               ... on TextMetadataEntry { text } ... on IntMetadataEntry { intValue } } } } } }""",
        key={"path": path}, p=[partition],
    )
    return [(m["partition"], m["runId"],
             {e["label"]: str(e.get("text", e.get("intValue"))) for e in m["metadataEntries"]}) for m in data["assetOrError"]["assetMaterializations"]]


def _partition_statuses(ui: DagsterUI, path: list[str]) -> list[tuple[str, str, str]]:
    """What the partitions bar draws: ``(first day, last day, status)`` ranges from Dagster's
    GraphQL (the days of no range are missing)."""
    data = ui.gql(
        """query S($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
             assetPartitionStatuses { ... on TimePartitionStatuses { ranges { startKey endKey status } } } } } }""",
        key={"path": path},
    )
    return [(r["startKey"], r["endKey"], r["status"])
            for r in data["assetNodeOrError"]["assetPartitionStatuses"]["ranges"]]


def _sensor(ui: DagsterUI, name: str, on: bool) -> None:
    """Turn sensor ``name`` on or off, as its toggle under Automation does."""
    if on:
        res = ui.gql("""mutation S($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename
                          ... on Sensor { sensorState { id status } } ... on PythonError { message } } }""",
                     s={"repositoryLocationName": ui.client.location_of("flights_recompute"),
                        "repositoryName": "__repository__", "sensorName": name})["startSensor"]
        assert res["__typename"] == "Sensor" and res["sensorState"]["status"] == "RUNNING", res
        ui.runs[f"sensor_state:{name}"] = res["sensorState"]["id"]
        return
    res = ui.gql("""mutation S($id: String) { stopSensor(id: $id) { __typename
                      ... on StopSensorMutationResult { instigationState { status } }
                      ... on PythonError { message } } }""",
                 id=ui.runs[f"sensor_state:{name}"])["stopSensor"]
    assert res["__typename"] == "StopSensorMutationResult" and res["instigationState"]["status"] == "STOPPED", res


def _run_of_sensor(ui: DagsterUI, name: str, timeout_s: float = 300) -> str:
    """The id of the first run sensor ``name`` launches (waiting for its tick)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = ui.gql("""query R($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs { results { runId } } } }""",
                      f={"tags": [{"key": "dagster/sensor_name", "value": name}]})["runsOrError"]["results"]
        if runs:
            return str(runs[-1]["runId"])
        time.sleep(2)
    pytest.fail(f"sensor {name} launched no run in {timeout_s} s")


def _wait_lake_lock_released(folder: Path, timeout_s: float = 30) -> None:
    """Wait until no run holds the lake lock of ``folder``: a run's status turns SUCCESS just
    before its resources, and with them the lock, are torn down."""
    from pipelines.lake.lock import lock_holder

    deadline = time.monotonic() + timeout_s
    while (holder := lock_holder(folder)) is not None:
        if time.monotonic() > deadline:
            pytest.fail(f"{folder} still held by {holder.describe()} {timeout_s} s after its run ended")
        time.sleep(0.2)


def test_the_sensor_runs_for_the_days_new_data_falls_on(ui: DagsterUI, browser: Any) -> None:
    import dagster as dg

    from pipelines.dagster import KafkaResource, LakeResource
    from pipelines.dagster.schedules import RANGE_END_TAG, RANGE_START_TAG, recompute_job
    from pipelines.dagster.sensors import new_kafka_data as new_kafka_data_sensor
    from pipelines_testkit import flight_on, produce
    from serving.quality.suite import load_results
    from serving.views.index import ViewIndex

    flights, shop = _flights(), _shop()
    shop_day = shop.partitions.start.isoformat()
    shop_run = ui.runs["shop_day"] = ui.client.launch_run("shop_recompute", shop_day)
    # three flights after the sample: the first is produced with the Kafka timestamp of 2013-01-01
    # (its event time, which the flights' timestamp extractor reads, is 2013-03-10)
    produce(ui.bootstrap, "flights", [flight_on(NEW_DAYS[0], record_timestamp=1357034400000), flight_on(NEW_DAYS[1]),
                                      flight_on(NEW_DAYS[2])])
    new_kafka_data = new_kafka_data_sensor(flights, recompute_job(flights))
    resources = {"kafka": KafkaResource(bootstrap_servers=ui.bootstrap), "lake": LakeResource(path=str(ui.lake))}
    with dg.build_sensor_context(resources=resources) as ctx:  # what the sensor will ask for
        request = new_kafka_data(ctx)
    assert isinstance(request, dg.RunRequest), request
    # the last block of new days, as Dagster's range tags; the run materializes the others
    assert request.partition_key is None and (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == \
        (NEW_DAYS[1], NEW_DAYS[2])
    assert request.tags["duet/touched_days"] == "2013-01-01..2013-01-04, 2013-03-10, 2013-03-12..2013-03-13"
    assert "flights:" in request.run_key and request.tags["duet/pipeline"] == "flights"

    _sensor(ui, "flights_new_kafka_data", on=True)
    try:
        run_id = ui.runs["sensor"] = _run_of_sensor(ui, "flights_new_kafka_data")
        assert ui.wait_run(run_id) == "SUCCESS"
    finally:
        _sensor(ui, "flights_new_kafka_data", on=False)
    assert ui.wait_run(shop_run) == "SUCCESS"
    _wait_lake_lock_released(ui.lake / "flights")
    with dg.build_sensor_context(resources=resources) as ctx:
        skip = new_kafka_data(ctx)
    assert isinstance(skip, dg.SkipReason) and "no new records" in (skip.skip_message or "")

    # the sensor's run materialized the days its records fall on, and no other
    touched = [("2013-01-01", "2013-01-04", "MATERIALIZED"), (NEW_DAYS[0], NEW_DAYS[0], "MATERIALIZED"),
               (NEW_DAYS[1], NEW_DAYS[2], "MATERIALIZED")]
    for view in VIEWS:
        assert _partition_statuses(ui, ["flights", f"view_{view}"]) == touched, view
    (day, by, meta), = _materializations(ui, ["flights", "view_departures_hourly"], NEW_DAYS[0])
    assert (day, by, meta["materialized_because"]) == (NEW_DAYS[0], run_id, "1 new record of this run falls on it")
    (_, _, meta), = _materializations(ui, ["flights", "view_departures_hourly"], NEW_DAYS[1])
    assert meta["materialized_because"] == "the run targets it; 1 new record of this run falls on it"
    assert meta["days_with_new_data"] == "2013-01-01..2013-01-04, 2013-03-10, 2013-03-12..2013-03-13"
    assert meta["partitions"] == "2013-03-12..2013-03-13"
    assert _materializations(ui, ["flights", "view_departures_hourly"], "2013-03-11") == []
    for view in shop.view_names:  # shop's run: its day, and the next one, which its 3000 events reach
        mats = _materializations(ui, ["shop", f"view_{view}"], shop_day)
        assert [(d, r) for d, r, _ in mats] == [(shop_day, shop_run)]
        assert _partition_statuses(ui, ["shop", f"view_{view}"]) == [(shop_day, "2026-01-06", "MATERIALIZED")]
    # each pipeline publishes and checks its views in its own folder of the lake
    for name, views in (("flights", VIEWS), ("shop", list(shop.view_names))):
        assert sorted(ViewIndex(ui.lake / name).views()) == sorted(views)
        assert {v: r.success for v, r in load_results(ui.lake / name).items()} == {v: True for v in views}

    # what a user sees: 7 days materialized, the bar green on them and only them
    text = _open(browser, f"{ui.url}/assets/flights/view_departures_hourly?view=partitions&partition={NEW_DAYS[0]}",
                 "Materialized (7)")
    assert "Missing (358)" in text and "Failed (0)" in text
    assert "1 new record of this run falls on it" in text and run_id[:8] in text  # the day's materialization
    assert _bar_days(browser) == {d: "materialized" for d in [*SAMPLE_DAYS, *NEW_DAYS]}
    _assert_bar_pixels(browser, green=[*SAMPLE_DAYS, *NEW_DAYS], not_green=["2013-03-11", "2013-03-09", "2013-12-31"])
    browser.save_screenshot(str(IMG / "dagster-partitions-sensor.png"))
    text = _open(browser, f"{ui.url}/assets/flights/view_departures_hourly?view=partitions&partition=2013-03-11",
                 "Materialized (7)")
    details = text[text.index("Latest materialization"):]
    assert details.split("\n")[1] == "None", details[:200]  # no materialization of a day no data falls on


def test_the_ui_opens_without_the_first_visit_dialog(ui: DagsterUI) -> None:
    """Dagster's "Join the Dagster community" dialog is off on duet's DAGSTER_HOME (the
    webserver asks ``shouldShowNux``; dagster.yaml's ``nux: enabled: false``)."""
    assert ui.gql("{ shouldShowNux }") == {"shouldShowNux": False}


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
    assert stats == {"numMaterialized": 10, "numPartitions": 365}  # the week, and the sensor's three days of March
    assert _partition_statuses(ui, ["flights", "view_seats_by_dest_daily"]) == [
        (WEEK[0], WEEK[-1], "MATERIALIZED"), (FAILED_DAY, FAILED_DAY, "FAILED"),
        (NEW_DAYS[0], NEW_DAYS[0], "MATERIALIZED"), (NEW_DAYS[1], NEW_DAYS[2], "MATERIALIZED")]


# ------------------------------------------------------------------------------------- browser
def _open(browser: Any, url: str, text: str, timeout: float = 60) -> str:
    """Load ``url`` and wait until the page's text holds ``text``; return the text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    try:
        WebDriverWait(browser, timeout).until(lambda d: text in d.find_element(By.TAG_NAME, "body").text)
    except TimeoutException:
        page = browser.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"{url} never showed {text!r}; it shows:\n{page[:3000]}")
    time.sleep(1.5)  # let the graph layout settle before a screenshot
    page = browser.find_element(By.TAG_NAME, "body").text
    # duet's DAGSTER_HOME turns Dagster's first-visit dialog off (dagster.yaml `nux: enabled: false`)
    assert "Join the Dagster community" not in page, page[:2000]
    return page


_BAR = "[class*=partitionSpansContainer]"  # the partitions bar of an asset's Partitions tab
_STATUS_OF_COLOR = {"green": "materialized", "red": "failed", "blue": "materializing"}


def _bar_days(browser: Any) -> dict[str, str]:
    """``{day: status}`` of the colored spans of the partitions bar on the page (each span's
    left and width in % of the flights' 365 days; a day of no span is missing)."""
    from pipelines.dagster.partitions import partition_keys

    keys = partition_keys(_flights())
    spans = browser.execute_script(f"""return [...document.querySelector('{_BAR}').children].map(s => [
        s.style.left, s.style.width, (s.querySelector('[class*=colorSpan]') || s).style.background]);""")
    days: dict[str, str] = {}
    for left, width, color in spans:
        first = round(float(left.rstrip("%)").split()[-1].rstrip("%")) * len(keys) / 100)
        count = max(1, round(float(width.rstrip("%")) * len(keys) / 100))
        status = next((v for k, v in _STATUS_OF_COLOR.items() if f"accent-{k}" in color), color)
        days.update({d: status for d in keys[first:first + count]})
    return days


def _assert_bar_pixels(browser: Any, green: list[str], not_green: list[str], timeout_s: float = 15.0) -> None:
    """The color the browser paints at the middle of each day's slice of the partitions bar:
    Dagster's green on the days of ``green``, not on those of ``not_green``. Read again until
    it holds or ``timeout_s`` passes: once, in a run of the suite on two workers, the read hit
    a half-transparent layer over the whole bar (``rgba(13, 17, 33, 0.5)`` on every day) just
    after the bar's days had been read from the page as expected."""
    from pipelines.dagster.partitions import partition_keys

    keys = partition_keys(_flights())

    def is_green(css: str) -> bool:
        r, g, b = (int(x) for x in css[css.index("(") + 1:css.index(")")].split(",")[:3])
        return g > r + 60 and g > b + 40

    deadline = time.monotonic() + timeout_s
    while True:
        colors = browser.execute_script(f"""const r = document.querySelector('{_BAR}').getBoundingClientRect();
            return arguments[0].map(i => getComputedStyle(document.elementFromPoint(
                r.left + (i + 0.5) / arguments[1] * r.width, r.top + r.height / 2)).backgroundColor);""",
            [keys.index(d) for d in [*green, *not_green]], len(keys))
        painted = dict(zip([*green, *not_green], colors))
        wrong = [d for d in green if not is_green(painted[d])] + [d for d in not_green if is_green(painted[d])]
        if not wrong or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [d for d in green if not is_green(painted[d])] == [], painted
    assert [d for d in not_green if is_green(painted[d])] == [], painted


def test_what_a_user_sees_in_the_dagster_ui(ui: DagsterUI, browser: Any) -> None:
    if {"sensor", "backfill", "failed"} - set(ui.runs):
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
    # the partitioned asset: the week backfilled and the sensor's three days materialized, the failed run's day
    # failed, the rest missing
    text = _open(browser, f"{ui.url}/assets/flights/view_departures_hourly?view=partitions", "Materialized (10)")
    assert "Failed (1)" in text and "Missing (354)" in text
    assert _bar_days(browser) == {**{d: "materialized" for d in [*WEEK, *NEW_DAYS]}, FAILED_DAY: "failed"}
    _assert_bar_pixels(browser, green=[*WEEK, *NEW_DAYS], not_green=["2013-01-08", "2013-03-11", FAILED_DAY])
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


# ------------------------------------------------------------------------------- the speed layer
def _scrape(url: str) -> dict[str, Any]:
    """What the speed service at ``url`` says of itself on ``GET /metrics``: ``state`` (of the
    client), ``total`` (records processed), ``lag`` (``{topic: records}``), ``threads`` (alive
    stream threads)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = threads = 0
    state = None
    lag: dict[str, int] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for s in family.samples:
            if s.name == "kafka_streams_client_state" and s.value == 1:
                state = s.labels["kafka_streams_client_state"]
            elif s.name == "kafka_streams_stream_thread_process_total":
                total += int(s.value)
            elif s.name == "kafka_streams_records_lag":
                lag[s.labels["topic"]] = lag.get(s.labels["topic"], 0) + int(s.value)
            elif s.name == "kafka_streams_alive_stream_threads":
                threads += int(s.value)
    return {"state": state, "total": total, "lag": lag, "threads": threads}


def _caught_up(url: str, timeout_s: float = 180) -> dict[str, Any]:
    """The service's :func:`_scrape` once it has processed every record the topics hold:
    RUNNING, no lag, a total above 0 that two scrapes a second apart agree on."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        now = _scrape(url)
        if now["state"] == "RUNNING" and now["total"] and not sum(now["lag"].values()) and now == last:
            return now
        last = now
        time.sleep(1)
    pytest.fail(f"the speed service at {url} did not catch up in {timeout_s} s: {last}")


def _observation(ui: DagsterUI, path: list[str], timeout_s: float = 180) -> dict[str, Any]:
    """``{label: value}`` of the first observation of asset ``path`` (waiting for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = ui.gql(
            """query O($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
                 assetObservations(limit: 1) { metadataEntries { label
                   ... on TextMetadataEntry { text } ... on IntMetadataEntry { intValue }
                   ... on FloatMetadataEntry { floatValue } ... on TimestampMetadataEntry { timestamp } } } } } }""",
            key={"path": path})["assetOrError"]
        if data.get("assetObservations"):
            return {e["label"]: next(v for k, v in e.items() if k != "label")
                    for e in data["assetObservations"][0]["metadataEntries"]}
        time.sleep(2)
    pytest.fail(f"no observation of {path} in {timeout_s} s")


def _metadata_table(browser: Any) -> dict[str, str]:
    """``{key: value}`` of the Metadata table of the asset page open in ``browser`` (its rows
    are key, timestamp of the event that reported it, value)."""
    rows = browser.execute_script("""return [...document.querySelectorAll('table tr')].map(
        tr => [...tr.querySelectorAll('td')].map(td => td.innerText.trim()));""")
    return {cells[0]: cells[-1] for cells in rows if len(cells) >= 2}


def test_the_speed_service_observed_in_dagster(ui: DagsterUI, browser: Any, tmp_path: Path) -> None:
    """``duet speed --follow --server`` on the flights the UI loaded, at the address the code
    location's ``$DUET_SPEED_SERVER_FLIGHTS`` names; the ``flights_speed_layer_lag`` sensor,
    turned on, observes it: the speed layer's page shows the service's state, lag and
    processed records as its ``/metrics`` gives them, and its ``speed_lag`` check passed."""
    from speed_service_kit import wait_healthy

    url = f"http://{ui.speed_server}"
    env = {**os.environ, "DUET_HOME": str(tmp_path / "duet_home"), "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "duet-speed.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "speed", "--follow", "--fresh", "--server", ui.speed_server,
         "--bootstrap", ui.bootstrap, "--pipeline", FLIGHTS],
        env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_healthy(proc, url)
        served = _caught_up(url)
        _sensor(ui, "flights_speed_layer_lag", on=True)
        try:
            observed = _observation(ui, ["flights", "speed_layer"])
        finally:
            _sensor(ui, "flights_speed_layer_lag", on=False)
        # the observation is the service's own word
        assert (observed["source"], observed["servers"], observed["state"]) == ("service", url, "RUNNING"), observed
        assert observed["process_total"] == served["total"] > 3000, (observed, served)  # the 3003 flights and more
        assert {k: v for k, v in observed.items() if k.startswith("lag_")} == \
            {**{f"lag_{t}": n for t, n in served["lag"].items()}, "lag_total": 0}, observed
        assert "lag_flights" in observed and observed["alive_stream_threads"] == served["threads"] >= 1
        assert observed["process_rate"] >= 0 and observed["last_seen"] > time.time() - 600

        _open(browser, f"{ui.url}/assets/flights/speed_layer", "RUNNING")
        shown = _metadata_table(browser)
        assert (shown["state"], shown["servers"], shown["lag_total"], shown["lag_flights"]) == \
            ("RUNNING", url, "0", "0"), shown
        assert shown["process_total"].replace(",", "") == str(served["total"]), shown
        assert shown["alive_stream_threads"] == str(served["threads"]) and float(shown["process_rate"]) >= 0, shown
        assert "last_seen" in shown, shown
        browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(  # the service's own rows
            "xpath", "//td[normalize-space()='lag_total']"))
        browser.save_screenshot(str(IMG / "dagster-speed.png"))
        text = _open(browser, f"{ui.url}/assets/flights/speed_layer?view=checks", "speed_lag")
        assert "Passed" in text and "lag 0 records <= 10,000" in text, text[:3000]
        browser.save_screenshot(str(IMG / "dagster-speed-check.png"))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        finally:
            log.close()
    assert proc.returncode == 0, (tmp_path / "duet-speed.log").read_text()[-3000:]
