"""The live merge: answers merge the published batch snapshot with the speed layer's current
rows read from the view output topics (real broker, real Delta tables, FastAPI)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from serving.api.app import create_app
from serving.views import ViewIndex, ViewSpec, publish
from serving_testkit import HOUR, MIN, T0, frame

pytestmark = pytest.mark.timeout(180)


def _topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    from speed_layer.admin import TopicSpec, ensure_topics

    ensure_topics(bootstrap, [TopicSpec(name, partitions)])


def _produce(bootstrap: str, topic: str, records: list[tuple[str, int | None, int | None, Any, int]]) -> None:
    """View topic records ``(key, window_start, window_end, value or None, timestamp)`` in the
    contract's form (docs/contracts.md)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, ws, we, value, ts in records:
        raw_key = key if ws is None else json.dumps({"key": key, "window_start": ws, "window_end": we})
        producer.produce(topic, key=raw_key.encode(), value=None if value is None else json.dumps(value).encode(),
                         timestamp=ts)
    assert producer.flush(30) == 0


def _hour(h: int, value: Any, key: str = "EWR") -> tuple[str, int, int, Any, int]:
    return (key, T0 + h * HOUR, T0 + (h + 1) * HOUR, value, T0 + (h + 1) * HOUR - 1)


@pytest.fixture
def view_name() -> str:
    return f"departures_hourly_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def live_client(tmp_path: Path, kafka_bootstrap: str, view_name: str) -> Iterator[tuple[TestClient, Path, ViewSpec]]:
    """A lake publishing ``view_name`` (hourly windows of EWR 0-3 from batch, W = 4 h, 4-5 from
    speed) and a live app over it; the view topic holds hours 4-5."""
    spec = ViewSpec.tumbling(view_name, HOUR)
    lake = tmp_path / "lake"
    batch = frame([_hour(h, {"count": h, "layer": "batch"}) for h in range(4)])
    speed = [_hour(h, {"count": h, "layer": "speed"}) for h in (4, 5)]
    publish(lake, [spec], {view_name: batch}, {view_name: frame(speed)}, T0 + 4 * HOUR)
    _topic(kafka_bootstrap, view_name)
    _produce(kafka_bootstrap, view_name, speed)
    app = create_app(lake, refresh_interval_s=0, bootstrap=kafka_bootstrap)
    with TestClient(app) as client:
        assert app.state.served.live.wait_caught_up(30)
        yield client, lake, spec


def test_the_published_version_records_its_batch_watermark(live_client: tuple[TestClient, Path, ViewSpec]) -> None:
    _, lake, spec = live_client
    snap = ViewIndex(lake, refresh_interval_s=60).snapshot(spec.name)
    assert snap.watermark_ms == T0 + 4 * HOUR
    publish(lake, [spec], {}, {}, None)
    assert ViewIndex(lake, refresh_interval_s=60).snapshot(spec.name).watermark_ms is None


def test_a_new_view_record_is_in_the_merged_answer_within_a_second(
        live_client: tuple[TestClient, Path, ViewSpec], kafka_bootstrap: str) -> None:
    client, _, spec = live_client
    before = client.get(f"/views/{spec.name}/keys/EWR").json()
    assert [r["window_start"] for r in before["rows"]] == [T0 + h * HOUR for h in range(6)]
    assert before["batch_watermark_ms"] == T0 + 4 * HOUR and before["live"] is True
    assert before["speed_stream_time_ms"] == T0 + 6 * HOUR - 1
    assert client.get("/health").json()["speed"] == {spec.name: {
        "stream_time_ms": T0 + 6 * HOUR - 1, "stream_time": "2013-01-01T05:59:59.999Z", "caught_up": True, "rows": 2}}

    produced = time.monotonic()
    _produce(kafka_bootstrap, spec.name, [_hour(6, {"count": 6, "layer": "speed"}),
                                          _hour(5, {"count": 50, "layer": "speed"})])
    deadline = produced + 1.0
    while True:
        body = client.get(f"/views/{spec.name}/keys/EWR").json()
        if len(body["rows"]) == 7 and body["rows"][5]["value"]["count"] == 50:
            break
        assert time.monotonic() < deadline, f"not in the answer 1 s after the produce: {body['rows']}"
        time.sleep(0.02)
    assert [(r["window_start"], r["source"], r["value"]["count"]) for r in body["rows"]] == [
        *[(T0 + h * HOUR, "batch", h) for h in range(4)],
        (T0 + 4 * HOUR, "speed", 4), (T0 + 5 * HOUR, "speed", 50), (T0 + 6 * HOUR, "speed", 6)]
    assert body["speed_stream_time_ms"] == T0 + 7 * HOUR - 1
    # a key only the speed layer has is served (and listed) without a publish
    _produce(kafka_bootstrap, spec.name, [_hour(6, {"count": 1}, key="LGA")])
    deadline = time.monotonic() + 5
    while client.get(f"/views/{spec.name}/keys/LGA").status_code == 404:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert "LGA" in client.get(f"/views/{spec.name}/keys").json()["keys"]


def test_closed_windows_come_from_batch_even_when_speed_rewrites_them(
        live_client: tuple[TestClient, Path, ViewSpec], kafka_bootstrap: str) -> None:
    client, _, spec = live_client
    _produce(kafka_bootstrap, spec.name, [_hour(2, {"count": 99, "layer": "speed"}),
                                          _hour(7, {"count": 7, "layer": "speed"})])
    deadline = time.monotonic() + 5
    while len(client.get(f"/views/{spec.name}/keys/EWR").json()["rows"]) < 7:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    rows = client.get(f"/views/{spec.name}/keys/EWR").json()["rows"]
    assert [(r["source"], r["value"]["count"]) for r in rows][2] == ("batch", 2)


def test_pages_of_a_merged_answer_concatenate_to_it(
        live_client: tuple[TestClient, Path, ViewSpec], kafka_bootstrap: str) -> None:
    client, _, spec = live_client
    _produce(kafka_bootstrap, spec.name, [_hour(h, {"count": h}) for h in range(6, 12)])
    deadline = time.monotonic() + 5
    while len(client.get(f"/views/{spec.name}/keys/EWR").json()["rows"]) < 12:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    whole = client.get(f"/views/{spec.name}/keys/EWR").json()["rows"]
    paged: list[dict[str, Any]] = []
    cursor = ""
    while True:
        body = client.get(f"/views/{spec.name}/keys/EWR", params={"limit": 5, "cursor": cursor}).json()
        paged += body["rows"]
        if body["next_cursor"] is None:
            break
        cursor = body["next_cursor"]
    assert paged == whole and len(whole) == 12


def test_the_watermark_moves_without_a_seam(tmp_path: Path, kafka_bootstrap: str, view_name: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Recomputes publish new batch versions (W 4 h -> 6 h -> ... -> 10 h) while queries run:
    every answer holds each of the 12 windows exactly once, a window closed at the answer's
    watermark from batch, an open one from speed."""
    import serving.views.live as live_module

    monkeypatch.setattr(live_module, "PRUNE_DELAY_S", 1.0)
    spec = ViewSpec.tumbling(view_name, HOUR)
    lake = tmp_path / "lake"
    hours = range(12)

    def batch_until(h: int) -> Any:
        return frame([_hour(i, {"count": i, "layer": "batch"}) for i in range(h)])

    _topic(kafka_bootstrap, view_name)
    _produce(kafka_bootstrap, view_name, [_hour(h, {"count": h, "layer": "speed"}) for h in hours])
    publish(lake, [spec], {view_name: batch_until(4)}, {view_name: frame([_hour(4, {"count": 4, "layer": "speed"})])},
            T0 + 4 * HOUR)
    app = create_app(lake, refresh_interval_s=0, bootstrap=kafka_bootstrap)
    answers: list[dict[str, Any]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def query(client: TestClient) -> None:
        try:
            while not stop.is_set():
                answers.append(client.get(f"/views/{view_name}/keys/EWR").json())
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    with TestClient(app) as client:
        assert app.state.served.live.wait_caught_up(30)
        threads = [threading.Thread(target=query, args=(client,)) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for h in (6, 8, 10):
                time.sleep(0.3)
                publish(lake, [spec], {view_name: batch_until(h)}, {}, T0 + h * HOUR)
            deadline = time.monotonic() + 10  # past the prune delay: the live table drops what W = 10 h closes
            while (pruned := len(app.state.served.live.view_rows(view_name))) != 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # answers after the prune
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert not errors, errors
    watermarks = {a["batch_watermark_ms"] for a in answers}
    assert watermarks == {T0 + h * HOUR for h in (4, 6, 8, 10)}, watermarks
    assert pruned == 2  # hours 10 and 11
    for a in answers:
        starts = [r["window_start"] for r in a["rows"]]
        assert starts == [T0 + h * HOUR for h in hours], (a["batch_watermark_ms"], starts)
        for r in a["rows"]:
            closed = r["window_end"] <= a["batch_watermark_ms"]
            assert (r["source"], r["value"]["layer"]) == (("batch", "batch") if closed else ("speed", "speed")), r


def test_the_edge_endpoint_follows_the_speed_layer(
        live_client: tuple[TestClient, Path, ViewSpec], kafka_bootstrap: str) -> None:
    client, _, spec = live_client
    edge = client.get(f"/views/{spec.name}/edge").json()
    assert edge["batch_watermark_ms"] == T0 + 4 * HOUR and edge["live"] is True
    assert [(r["window_start"], r["keys"], r["value"]) for r in edge["rows"]] == [
        (T0 + 4 * HOUR, 1, 4.0), (T0 + 5 * HOUR, 1, 5.0)]
    _produce(kafka_bootstrap, spec.name, [_hour(6, {"count": 3}), _hour(6, {"count": 4}, key="JFK")])
    deadline = time.monotonic() + 5
    while len(edge["rows"]) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
        edge = client.get(f"/views/{spec.name}/edge").json()
    assert edge["rows"][-1] == {"window_start": T0 + 6 * HOUR, "window_end": T0 + 7 * HOUR, "keys": 2,
                                "value": 7.0, "source": "speed"}
    assert edge["speed_stream_time_ms"] == T0 + 7 * HOUR - 1
    keyed = client.get(f"/views/{spec.name}/edge", params={"key": "EWR"}).json()
    assert [(r["window_start"], r["source"]) for r in keyed["rows"]] == [
        (T0 + h * HOUR, "speed") for h in (4, 5, 6)]
    assert client.get(f"/views/{spec.name}/edge", params={"key": "nope"}).status_code == 404


def test_session_and_table_views_merge_live_rows(tmp_path: Path, kafka_bootstrap: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    sessions, latest = ViewSpec.session(f"sessions_{suffix}", gap_ms=30 * MIN), ViewSpec.table(f"latest_{suffix}")
    w = T0 + 5 * HOUR
    lake = tmp_path / "lake"
    publish(lake, [sessions, latest],
            {sessions.name: frame([("N1", T0 + HOUR, T0 + 2 * HOUR, {"n": 3}, T0 + 2 * HOUR)]),
             latest.name: frame([("UA", None, None, {"name": "United"}, T0 + HOUR)])},
            {sessions.name: frame([("N1", T0 + 4 * HOUR + 50 * MIN, T0 + 5 * HOUR, {"n": 2}, T0 + 5 * HOUR)])}, w)
    for spec in (sessions, latest):
        _topic(kafka_bootstrap, spec.name)
    # the open session grew (the old one replaced: a tombstone), the table key updated after W
    _produce(kafka_bootstrap, sessions.name, [
        ("N1", T0 + 4 * HOUR + 50 * MIN, T0 + 5 * HOUR, None, T0 + 5 * HOUR + 10 * MIN),
        ("N1", T0 + 4 * HOUR + 50 * MIN, T0 + 5 * HOUR + 10 * MIN, {"n": 3}, T0 + 5 * HOUR + 10 * MIN)])
    _produce(kafka_bootstrap, latest.name, [("UA", None, None, {"name": "United Air Lines"}, w + 1),
                                            ("AA", None, None, {"name": "old"}, w - 1)])
    app = create_app(lake, refresh_interval_s=0, bootstrap=kafka_bootstrap)
    with TestClient(app) as client:
        assert app.state.served.live.wait_caught_up(30)
        rows = client.get(f"/views/{sessions.name}/keys/N1").json()["rows"]
        assert [(r["window_start"], r["window_end"], r["source"]) for r in rows] == [
            (T0 + HOUR, T0 + 2 * HOUR, "batch"), (T0 + 4 * HOUR + 50 * MIN, T0 + 5 * HOUR + 10 * MIN, "speed")]
        ua = client.get(f"/views/{latest.name}/keys/UA").json()["rows"]
        assert [(r["value"]["name"], r["source"]) for r in ua] == [("United Air Lines", "speed")]
        assert client.get(f"/views/{latest.name}/keys/AA").status_code == 404  # not after W: batch's answer


def test_duet_query_merges_the_view_topic(tmp_path: Path, kafka_bootstrap: str, view_name: str) -> None:
    """``duet query --bootstrap``: the published snapshot and the view topic's rows after it."""
    from typer.testing import CliRunner

    from pipelines.cli import app
    from pipelines.declaration.resolve import resolve_pipeline

    pipeline, _ = resolve_pipeline(None)
    lake = pipeline.lake(tmp_path / "lake")
    spec = ViewSpec.tumbling(view_name, HOUR)
    publish(lake, [spec], {view_name: frame([_hour(h, {"count": h}) for h in range(2)])}, {}, T0 + 2 * HOUR)
    _topic(kafka_bootstrap, view_name)
    _produce(kafka_bootstrap, view_name, [_hour(1, {"count": 10}), _hour(2, {"count": 2})])
    args = ["query", view_name, "EWR", "--lake", str(tmp_path / "lake"), "--json"]
    live = CliRunner().invoke(app, [*args, "--bootstrap", kafka_bootstrap])
    assert live.exit_code == 0, live.output
    assert [(r["window_start"], r["source"], r["value"]["count"]) for r in json.loads(live.stdout)] == [
        (T0, "batch", 0), (T0 + HOUR, "batch", 1), (T0 + 2 * HOUR, "speed", 2)]


def test_the_views_page_charts_a_key_from_its_merged_rows(
        live_client: tuple[TestClient, Path, ViewSpec], kafka_bootstrap: str) -> None:
    client, _, spec = live_client
    _produce(kafka_bootstrap, spec.name, [_hour(6, {"count": 60})])
    deadline = time.monotonic() + 5
    while len(client.get(f"/views/{spec.name}/keys/EWR").json()["rows"]) < 7:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    page = client.get(f"/ui/views/{spec.name}", params={"key": "EWR"}).text
    figure = json.loads(page.split("const figure = ", 1)[1].split(";\n", 1)[0])
    speed = next(t for t in figure["data"] if t.get("name") == "speed")
    assert speed["y"][-1] == 60 and len(speed["y"]) == 3  # hours 4, 5 and the new 6
    assert "7 rows · 1 keys" not in page and "6 rows" in page  # the header counts the published view


def test_a_watermark_moving_back_reads_the_view_topic_again(
        live_client: tuple[TestClient, Path, ViewSpec], kafka_bootstrap: str) -> None:
    """Hours 2-3 on the topic are closed at W = 4 h (skipped); a lake rebuilt to W = 2 h needs them."""
    client, lake, spec = live_client
    _produce(kafka_bootstrap, spec.name, [_hour(h, {"count": h, "layer": "speed"}) for h in (2, 3)])
    publish(lake, [spec], {spec.name: frame([_hour(h, {"count": h, "layer": "batch"}) for h in range(2)])}, {},
            T0 + 2 * HOUR)
    deadline = time.monotonic() + 10
    while True:
        body = client.get(f"/views/{spec.name}/keys/EWR").json()
        got = [(r["window_start"], r["source"]) for r in body["rows"]]
        if got == [(T0, "batch"), (T0 + HOUR, "batch"), *[(T0 + h * HOUR, "speed") for h in range(2, 6)]]:
            break
        assert time.monotonic() < deadline, got
        time.sleep(0.05)
    assert body["batch_watermark_ms"] == T0 + 2 * HOUR


def test_a_record_breaking_the_contract_is_skipped_and_counted(
        live_client: tuple[TestClient, Path, ViewSpec], kafka_bootstrap: str) -> None:
    from confluent_kafka import Producer

    client, _, spec = live_client
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(spec.name, key=b"EWR", value=b'{"count": 1}')  # a plain key on a windowed view
    producer.produce(spec.name, key=json.dumps({"key": "EWR", "window_start": T0 + 6 * HOUR,
                                                "window_end": T0 + 7 * HOUR}).encode(), value=b"\xff")
    assert producer.flush(30) == 0
    _produce(kafka_bootstrap, spec.name, [_hour(7, {"count": 7})])
    deadline = time.monotonic() + 5
    while len(client.get(f"/views/{spec.name}/keys/EWR").json()["rows"]) < 7:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    rows = client.get(f"/views/{spec.name}/keys/EWR").json()["rows"]
    assert [r["window_start"] for r in rows][-2:] == [T0 + 5 * HOUR, T0 + 7 * HOUR]  # the bad ones are not rows
    assert client.get("/health").json()["speed_skipped"] == 2


def test_duet_query_on_a_broker_without_the_view_topic_answers_the_snapshot(tmp_path: Path, kafka_bootstrap: str,
                                                                           view_name: str) -> None:
    from serving.views.served import query_live

    lake = tmp_path / "lake"
    spec = ViewSpec.tumbling(view_name, HOUR)
    publish(lake, [spec], {view_name: frame([_hour(0, {"count": 1})])}, {}, T0 + HOUR)
    started = time.monotonic()
    page = query_live(lake, kafka_bootstrap, view_name, "EWR", timeout_s=60)
    assert time.monotonic() - started < 30  # not the whole timeout: the topic is known missing
    assert [(r["source"], r["window_start"]) for r in page.rows] == [("batch", T0)]
    assert page.speed is not None and not page.speed.caught_up
