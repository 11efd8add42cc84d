"""The speed layer as a live, observed service (issue 23, item 3), on the session broker.

One child process runs ``serve_speed`` (what ``duet speed --follow --server HOST:PORT``
calls) on a tiny pipeline (:mod:`speed_service_kit`: clicks counted per user, and per page
in tumbling minutes, 1 h grace, through a repartition topic; 1 ms a click). In order:

1. ``/health`` says RUNNING; ``/metrics`` (scraped twice) carries Kafka Streams' metric names
   and ``process_total`` grows between the scrapes; interactive queries answer, from a
   key-value and a window store; a click past the grace is counted as a late drop;
2. Dagster: the ``<p>_speed_layer_lag`` sensor, evaluated on a real ephemeral instance
   against the service while a burst of clicks waits, records an observation with its lag,
   state and process rate and fails the ``speed_lag`` check under a bound of 100 records,
   passes it under 10^9; once caught up the check, run in a job, passes under 100;
3. ``reset_pipeline`` of another run keeps the state folder the service holds (and says so)
   and deletes a finished run's;
4. with the broker, a reset is refused while the service runs (as Kafka's application reset
   tool: its consumer group is still active), by ``reset_pipeline``, ``duet run`` and ``duet ui
   --load`` alike, naming the group and its member, and deletes nothing;
5. SIGTERM: the service closes the streams and the server and prints one line, exit 0; then
   the reset deletes the topics.

In this process: ``serve_speed`` with a live ``feed`` (as ``duet speed`` on an embedded
broker) stopped by its ``stop`` event; an address in use is one line (``UserError``).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

import dagster as dg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from speed_service_kit import START_MS, produce_clicks, start_child, tiny_pipeline

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]


@dataclass
class Service:
    proc: Popen[str]
    url: str
    pipeline: Any
    prefix: str
    bootstrap: str
    state: Path
    #: the click numbers produced so far
    produced: list[int] = field(default_factory=list)

    def produce(self, first: int, n: int, at_ms: int | None = None) -> None:
        produce_clicks(self.bootstrap, self.prefix, first, n, at_ms=at_ms)
        self.produced.extend(range(first, first + n))

    def clicks_of(self, user: int) -> int:
        """Clicks produced for ``u<user>``."""
        return sum(1 for i in self.produced if i % 10 == user)


@pytest.fixture(scope="module")
def service(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The speed service of a fresh tiny pipeline, in a child process (killed at the end if
    a test did not stop it)."""
    tag = uuid.uuid4().hex[:6]
    prefix, name = f"t-speed-svc-{tag}", f"svc_{tag}"
    state = tmp_path_factory.mktemp("speed-service") / "state"
    proc, url = start_child(kafka_bootstrap, prefix, name, state, slow_ms=1.0)
    try:
        yield Service(proc, url, tiny_pipeline(prefix, name), prefix, kafka_bootstrap, state)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _wait(what: str, ok: Any, timeout_s: float = 60, every_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = ok()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)


def _scrape(url: str) -> dict[str, list[Any]]:
    """``/metrics`` as ``{sample name: [samples]}``, checked to be Prometheus' text format."""
    res = httpx.get(f"{url}/metrics", timeout=10)
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(res.text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _total(samples: dict[str, list[Any]], name: str) -> float:
    return sum(s.value for s in samples.get(name, []))


def _count(url: str, store: str, key: str) -> Any:
    res = httpx.get(f"{url}/speed/stores/{store}/keys/{key}", timeout=10)
    return res.json().get("value") if res.status_code == 200 else None


def test_health_metrics_and_interactive_queries(service: Service) -> None:
    url, prefix = service.url, service.prefix
    health = _wait("RUNNING", lambda: (r := httpx.get(f"{url}/health", timeout=10)).status_code == 200
                   and r.json()["state"] == "RUNNING" and r.json())
    assert health["application_server"] == url.removeprefix("http://")
    assert [t["state"] for t in health["threads"]] == ["RUNNING"]

    service.produce(0, 300)  # 30 clicks per user
    _wait("30 clicks of u0", lambda: _count(url, f"{prefix}-per_user", "u0") == service.clicks_of(0))
    # each click is processed twice: by the source task and after the repartition by page
    first = _wait("600 records processed",
                  lambda: (m := _scrape(url)) and _total(m, "kafka_streams_stream_thread_process_total") >= 600 and m)
    service.produce(300, 100)
    service.produce(400, 1, at_ms=START_MS - 3 * 3_600_000)  # 3 h behind the stream time: past the 1 h grace
    _wait("41 clicks of u0", lambda: _count(url, f"{prefix}-per_user", "u0") == service.clicks_of(0))
    second = _scrape(url)

    for name in ("kafka_streams_stream_thread_process_total", "kafka_streams_stream_thread_process_rate",
                 "kafka_streams_stream_thread_commit_total", "kafka_streams_stream_thread_commit_latency_avg",
                 "kafka_streams_stream_thread_commit_latency_max", "kafka_streams_stream_thread_poll_total",
                 "kafka_streams_stream_task_process_total", "kafka_streams_stream_state_restore_total",
                 "kafka_streams_stream_state_restore_rate", "kafka_streams_alive_stream_threads"):
        assert name in second, name
    assert _total(second, "kafka_streams_stream_thread_process_total") >= \
        _total(first, "kafka_streams_stream_thread_process_total") + 200
    assert _total(second, "kafka_streams_stream_thread_process_rate") > 0
    ratios = [s.value for s in second["kafka_streams_stream_task_active_process_ratio"]]  # per task
    assert ratios and all(0 <= r <= 1 for r in ratios) and sum(ratios) > 0, ratios
    assert _total(second, "kafka_streams_alive_stream_threads") == 1
    (running,) = [s for s in second["kafka_streams_client_state"] if s.value == 1]
    assert running.labels["kafka_streams_client_state"] == "RUNNING"
    # records-lag (sampled every second by the thread) per partition of the source AND the repartition topic
    def lags() -> dict[tuple[str, str], float]:
        return {(s.labels["topic"], s.labels["partition"]): s.value for s in _scrape(url)["kafka_streams_records_lag"]}

    caught_up = _wait("records-lag 0 on every partition", lambda: (m := lags()) and set(m.values()) == {0} and m)
    assert {(f"{prefix}-clicks", "0"), (f"{prefix}-clicks", "1")} <= set(caught_up)
    assert any(t.endswith("by-page-repartition") for t, _ in caught_up)
    assert _total(_scrape(url), "kafka_streams_records_lag_max") == 0
    latency = second["kafka_streams_stream_thread_commit_latency_max"][0].value
    assert 0 < latency < 60_000  # ms
    # the late click: dropped by the windowed count, counted as a late drop (and a drop)
    late = _wait("the late drop", lambda: _total(_scrape(url), "kafka_streams_stream_task_dropped_records_late_total"))
    assert late == 1 and _total(_scrape(url), "kafka_streams_stream_task_dropped_records_total") >= 1

    # interactive queries: the instance, a window store
    (instance,) = httpx.get(f"{url}/speed/instances", timeout=10).json()
    assert instance["host"] == url.removeprefix("http://") and f"{prefix}-per_page" in instance["stores"]
    res = httpx.get(f"{url}/speed/stores/{prefix}-per_page/keys/p0", params={"from": START_MS, "to": START_MS + 59_999},
                    timeout=10)
    assert res.status_code == 200
    assert res.json()["windows"] == [{"start": START_MS, "value": 12}]  # clicks 0, 5, ..., 55 of the first minute


def test_dagster_observes_the_service_and_checks_its_lag(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.dagster import definitions
    from pipelines.dagster.checks import speed_lag_check
    from pipelines.dagster.keys import speed_key
    from pipelines.dagster.resources import KafkaResource

    p = service.pipeline
    key = speed_key(p)
    monkeypatch.setenv(f"DUET_SPEED_SERVER_{p.name.upper()}", service.url.removeprefix("http://"))
    kafka = KafkaResource(bootstrap_servers=service.bootstrap)
    defs = definitions(p, resources={"kafka": kafka})
    sensor = defs.resolve_sensor_def(f"{p.name}_speed_layer_lag")
    instance = dg.DagsterInstance.ephemeral()

    def tick(bound: int) -> tuple[dg.AssetObservation, dg.AssetCheckEvaluation]:
        monkeypatch.setenv(f"DUET_SPEED_MAX_LAG_{p.name.upper()}", str(bound))
        with dg.build_sensor_context(instance=instance, resources={"kafka": kafka}, definitions=defs) as ctx:
            result = sensor.evaluate_tick(ctx)
        obs, check = result.asset_events
        assert isinstance(obs, dg.AssetObservation) and isinstance(check, dg.AssetCheckEvaluation)
        assert obs.asset_key == key and check.asset_key == key and check.check_name == "speed_lag"
        for event in (obs, check):  # what the daemon does with them
            instance.report_runless_asset_event(event)
        return obs, check

    # a burst of 3000 clicks: at 1 ms each, seconds of lag
    service.produce(1000, 3000)
    _wait("lag", lambda: _total(_scrape(service.url), "kafka_streams_records_lag") > 500, timeout_s=30, every_s=0.02)
    behind, failed = tick(100)
    md = behind.metadata
    assert md["lag_total"].value > 100 and md["state"].value == "RUNNING" and md["source"].value == "service"
    # per topic (the burst may already be past clicks and in the repartition topic): they add up
    per_topic = {k: v.value for k, v in md.items() if k.startswith("lag_") and k != "lag_total"}
    assert f"lag_{service.prefix}-clicks" in per_topic and sum(per_topic.values()) == md["lag_total"].value
    assert md["process_rate"].value > 0
    assert md["alive_stream_threads"].value == 1 and md["process_total"].value > 0
    assert abs(md["last_seen"].value - time.time()) < 60
    assert not failed.passed and failed.metadata["max_lag_records"].value == 100
    assert failed.metadata["lag_total"].value > 100
    _, passed = tick(10**9)
    assert passed.passed

    # stored as the daemon stores them
    (record,) = instance.fetch_observations(key, limit=1).records
    assert record.asset_observation is not None and record.asset_observation.metadata["lag_total"].value >= 0
    latest = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(key, "speed_lag"))
    assert latest is not None and latest.event is not None

    # caught up: the check, run in a job on demand, passes under 100 records
    _wait("caught up", lambda: _count(service.url, f"{service.prefix}-per_user", "u0") == service.clicks_of(0),
          timeout_s=60)
    _wait("no lag", lambda: _total(_scrape(service.url), "kafka_streams_records_lag") == 0, timeout_s=30)
    monkeypatch.setenv(f"DUET_SPEED_MAX_LAG_{p.name.upper()}", "100")
    check_defs = dg.Definitions(
        asset_checks=[speed_lag_check(p)],
        jobs=[dg.define_asset_job("speed_check", selection=dg.AssetSelection.checks_for_assets(key))],
        resources={"kafka": kafka},
    )
    run = check_defs.resolve_job_def("speed_check").execute_in_process(instance=instance)
    (evaluation,) = run.get_asset_check_evaluations()
    assert evaluation.passed and evaluation.metadata["lag_total"].value == 0, evaluation
    _, again = tick(100)
    assert again.passed


def test_a_reset_keeps_the_state_the_running_service_holds(service: Service, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """``reset_pipeline`` of another run of the service's pipeline (lake only: the topics are
    the service's) deletes a finished run's state folder, keeps the one the service's
    ``KafkaStreams`` holds (its ``.lock``) with one warning naming the folder and the service's
    pid, and the service goes on counting on that state. The same for the folders of an
    ``--instances N`` run (``<app id>-i<k>/<app id>/.lock``): a live instance's is kept (here
    held by this process), a finished one's deleted."""
    from pipelines.job.steps import reset_pipeline
    from pipelines.speed.service import state_root
    from speed_layer.runtime.restore import StateDirectory

    monkeypatch.setenv("DUET_STATE_DIR", str(service.state))  # the service's state folder is the state root
    assert state_root() == service.state
    (live,) = service.state.glob(f"{service.pipeline.run_app_id_prefix}-*")
    tasks = {d.name for d in live.iterdir() if d.is_dir()}
    assert tasks, "the service has no task folders"
    app_id = f"{service.pipeline.run_app_id_prefix}-20260301t000000-0ld0ne"
    finished, finished_instance, live_instance = (StateDirectory(service.state / folder, app_id)
                                                  for folder in ("", f"{app_id}-i1", f"{app_id}-i2"))
    for state in (finished, finished_instance, live_instance):
        state.lock()
        state.task_dir("0_0").mkdir()
    finished.unlock()
    finished_instance.unlock()
    try:
        with caplog.at_level(logging.WARNING, logger="pipelines.job.steps"):
            reset_pipeline(service.pipeline, None, tmp_path / "lake")
        assert live_instance.task_dir("0_0").is_dir() and live_instance.holder() == f"this process (pid {os.getpid()})"
    finally:
        live_instance.unlock()
    assert not finished.app_dir.exists() and not finished_instance.app_dir.parent.exists()
    assert {d.name for d in live.iterdir() if d.is_dir()} == tasks and (live / ".lock").exists()
    kept = [r.getMessage() for r in caplog.records if "kept" in r.getMessage()]
    (of_service,) = [m for m in kept if str(live) in m]
    (of_instance,) = [m for m in kept if str(live_instance.app_dir.parent) in m]
    assert len(kept) == 2 and f"pid {service.proc.pid} (" in of_service and "this process" in of_instance, kept
    service.produce(5000, 20)
    _wait("counted after the reset",
          lambda: _count(service.url, f"{service.prefix}-per_user", "u0") == service.clicks_of(0), timeout_s=60)


def _topics(service: Service) -> dict[str, int | None]:
    """The partitions of the service's source and view topics (None: no such topic)."""
    from speed_layer.admin import topic_partitions

    return {t: topic_partitions(service.bootstrap, t) for t in (*service.pipeline.input_topics, *service.pipeline.view_names)}


def test_a_reset_is_refused_while_the_service_runs(service: Service, tmp_path: Path) -> None:
    """``reset_pipeline`` with the broker fails naming the service's consumer group and its
    member (client id, host) and deletes nothing: no topic, no lake table, no state; ``duet
    run`` and ``duet ui --load`` on the pipeline exit 2 with that one line."""
    import subprocess
    import sys

    from pipelines.speed.live_groups import PipelineRunning
    from pipelines.job.steps import reset_pipeline
    from speed_layer.admin import group_members
    from speed_service_kit import HERE

    app_id = httpx.get(f"{service.url}/health", timeout=10).json()["application_id"]
    before = _topics(service)
    assert all(before.values()), before
    lake = tmp_path / "lake" / service.pipeline.name
    (lake / "views").mkdir(parents=True)
    (lake / "views" / "_batch.json").write_text("{}")
    # the service is a member of its group (on a loaded machine its 6 s session may have
    # lapsed a moment ago, the member evicted until it rejoins: Kafka's reset tool would not
    # see it either, so the refusal is checked once it is a member)
    deadline = time.monotonic() + 60
    while not group_members(service.bootstrap, [app_id], 10):
        assert time.monotonic() < deadline, f"the service's group {app_id} has no member"
        time.sleep(0.5)
    with pytest.raises(PipelineRunning) as refused:
        reset_pipeline(service.pipeline, service.bootstrap, lake)
    message = str(refused.value)
    assert f"consumer group {app_id} is still active (1 member(s): {app_id}-" in message, message
    member = f"-StreamThread-1-consumer@{service.url.removeprefix('http://')} on 127.0.0.1)"  # client id on host
    assert member in message and message.endswith("nothing was deleted"), message
    assert _topics(service) == before and (lake / "views" / "_batch.json").exists()
    assert (service.state / app_id / ".lock").exists()

    (tmp_path / "svc_ref.py").write_text("from speed_service_kit import tiny_pipeline\n"
                                         f"pipeline = tiny_pipeline({service.prefix!r}, {service.pipeline.name!r})\n")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": service.bootstrap, "COLUMNS": "400",
           "PYTHONPATH": os.pathsep.join([str(HERE), str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("DUET_PIPELINE", None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for args in (["run", "--no-load"], ["ui", "--load", "--yes", "--port", str(port)]):
        res = subprocess.run([sys.executable, "-m", "pipelines.cli", *args, "--pipeline", "svc_ref:pipeline",
                              "--lake", str(tmp_path / "lake")], env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f"duet {args[0]}: cannot reset pipeline {service.pipeline.name!r}") \
            and f"consumer group {app_id} is still active" in line, line
    assert _topics(service) == before and (lake / "views" / "_batch.json").exists()


def test_sigterm_stops_the_service_with_one_line(service: Service) -> None:
    service.proc.send_signal(signal.SIGTERM)
    out, _ = service.proc.communicate(timeout=90)
    assert service.proc.returncode == 0, out
    (line,) = [ln for ln in out.splitlines() if ln.strip()]
    assert line.startswith("speed service stopped (SIGTERM) after ") and f"at {service.url}:" in line, line
    assert re.search(r"application\.id \S+, [\d,]+ records processed, \d+ dropped as late, 0 dead-lettered$", line), line
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{service.url}/health", timeout=5)
    assert "Traceback" not in (service.state.parent / "speed-service.log").read_text()


def test_once_the_service_stopped_the_reset_deletes_its_topics(service: Service, tmp_path: Path) -> None:
    from pipelines.job.steps import reset_pipeline

    assert service.proc.poll() is not None, "the service still runs"
    reset_pipeline(service.pipeline, service.bootstrap, tmp_path / "lake")
    assert set(_topics(service).values()) == {None}


def test_serve_speed_runs_a_feed_and_stops_on_its_event(kafka_bootstrap: str, tmp_path: Path) -> None:
    from pipelines.produce.replay import ReplayStats
    from pipelines.speed.server import serve_speed

    tag = uuid.uuid4().hex[:6]
    prefix, name = f"t-speed-feed-{tag}", f"feed_{tag}"
    stop, box = threading.Event(), {}

    def feed(processed: Any, sync: Any) -> ReplayStats:  # called once caught up, as run_speed's
        produce_clicks(kafka_bootstrap, prefix, 0, 50)
        assert sync()
        box["processed"] = processed()
        return ReplayStats(produced=50)

    def serve() -> None:
        box["result"] = serve_speed(tiny_pipeline(prefix, name), kafka_bootstrap, "127.0.0.1", 0,
                                    state_dir=tmp_path / "state", feed=feed, stop=stop,
                                    on_ready=lambda svc: box.setdefault("url", svc.url))

    thread = threading.Thread(target=serve, daemon=True)  # not the main thread: signals are left alone
    thread.start()
    try:
        _wait("the feed", lambda: "processed" in box or not thread.is_alive(), timeout_s=90)
        assert box["processed"] >= 100  # 50 clicks, each through both sub-topologies
        assert _count(box["url"], f"{prefix}-per_user", "u0") == 5
    finally:
        stop.set()
        thread.join(90)
    result = box["result"]
    assert result.stopped_by == "stop" and result.state == "RUNNING" and result.replay.produced == 50
    assert result.processed >= 100 and result.line().startswith("speed service stopped (stop) after ")
    assert not (tmp_path / "state" / result.application_id).exists()  # a fresh application id's state is removed


def test_an_address_in_use_is_one_line(kafka_bootstrap: str) -> None:
    from pipelines.preflight import UserError
    from pipelines.speed.server import SpeedService, parse_server

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{port}"):
            SpeedService(tiny_pipeline("t-unused", "unused"), kafka_bootstrap, "127.0.0.1", port).start()
    assert parse_server("0.0.0.0:8081") == ("0.0.0.0", 8081)
    with pytest.raises(UserError, match="HOST:PORT"):
        parse_server("8081")


def test_a_service_that_does_not_answer_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.dagster import definitions
    from pipelines.dagster.resources import KafkaResource

    p = tiny_pipeline("t-unreachable", "unreachable")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DUET_SPEED_SERVER_UNREACHABLE", f"127.0.0.1:{port}")
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    defs = definitions(p)
    sensor = defs.resolve_sensor_def("unreachable_speed_layer_lag")
    with dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), cursor='{"last_seen": 1000.0}',
                                 resources={"kafka": KafkaResource()}, definitions=defs) as ctx:
        result = sensor.evaluate_tick(ctx)
    obs, check = result.asset_events
    assert obs.metadata["state"].value == "UNREACHABLE" and obs.metadata["last_seen"].value == 1000.0
    assert f"127.0.0.1:{port}" in obs.metadata["error"].value
    assert not check.passed and check.description.startswith("the speed layer is UNREACHABLE")
    assert result.cursor == '{"last_seen": 1000.0}'

