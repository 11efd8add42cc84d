"""HTTP API: FastAPI TestClient over a real lake, and one real uvicorn server."""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from fastapi.testclient import TestClient

from serving.api import create_app, ms_to_iso, parse_time_ms
from serving.errors import InvalidTimeError
from serving.views import publish
from serving_testkit import HOUR, MIN, T0, TUMBLING, WATERMARK, frame


@pytest.fixture
def client(lake_with_quality: Path) -> TestClient:
    with TestClient(create_app(lake_with_quality, refresh_interval_s=0)) as c:
        yield c


def test_parse_time() -> None:
    assert parse_time_ms("1356998400000") == T0
    assert parse_time_ms("2013-01-01T00:00:00Z") == T0
    assert parse_time_ms("2013-01-01T00:00:00") == T0  # naive = UTC
    assert parse_time_ms("2013-01-01") == T0
    assert parse_time_ms("2013-01-01T01:00:00+01:00") == T0
    assert parse_time_ms("2013-01-01T00:00:00.123Z") == T0 + 123
    assert parse_time_ms(" -5 ") == -5
    with pytest.raises(InvalidTimeError, match="ISO-8601.*epoch milliseconds"):
        parse_time_ms("yesterday", "from")
    assert ms_to_iso(T0 + 1) == "2013-01-01T00:00:00.001Z" and ms_to_iso(None) is None
    assert ms_to_iso(10**18) is None


@given(st.integers(min_value=-62_135_596_800_000 - 10**10, max_value=253_402_300_800_000 + 10**10))
def test_ms_to_iso_is_datetime_isoformat(ms: int) -> None:
    # the arithmetic of ms_to_iso against what datetime formats, years 1..9999 and beyond
    try:
        dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    except OverflowError:
        assert ms_to_iso(ms) is None
    else:
        assert ms_to_iso(ms) == dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=8))
def test_parse_value_is_json_loads(doc: object) -> None:
    # a row's value: orjson when it can, json for NaN, infinities and integers beyond 64 bits
    from serving.api.app import _parse_value

    text = json.dumps(doc)
    assert repr(_parse_value(text)) == repr(json.loads(text))
    assert _parse_value("not json {") == "not json {" and _parse_value(None) is None


def test_health_and_views(client: TestClient) -> None:
    r = client.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "views": 3, "batch_watermark_ms": WATERMARK,
                        "batch_watermark": "2013-01-01T05:00:00.000Z", "speed": None, "speed_error": None,
                        "speed_skipped": None}
    views = {v["name"]: v for v in client.get("/views").json()["views"]}
    assert set(views) == {"dep_counts", "sessions", "latest"}
    assert views["dep_counts"] == {
        "name": "dep_counts", "windowed": True,
        "window": {"kind": "tumbling", "size_ms": HOUR, "advance_ms": HOUR, "grace_ms": 10 * MIN,
                   "gap_ms": None},
        "rows": 4, "keys": 2, "version": 0,
    }
    assert views["latest"]["window"] is None and views["latest"]["windowed"] is False
    assert views["sessions"]["window"]["gap_ms"] == 30 * MIN
    assert client.get("/views/latest").json()["rows"] == 2


def test_keys(client: TestClient) -> None:
    assert client.get("/views/dep_counts/keys").json() == {
        "view": "dep_counts", "total": 2, "offset": 0, "limit": 1000, "keys": ["EWR", "JFK"]}
    r = client.get("/views/dep_counts/keys", params={"limit": 1, "offset": 1}).json()
    assert r["keys"] == ["JFK"] and r["total"] == 2
    assert client.get("/views/dep_counts/keys", params={"limit": 0}).status_code == 422


def test_key_rows(client: TestClient) -> None:
    r = client.get("/views/dep_counts/keys/EWR")
    assert r.status_code == 200
    body = r.json()
    assert body["view"] == "dep_counts" and body["key"] == "EWR" and body["from_ms"] is None
    first = body["rows"][0]
    assert first == {
        "key": "EWR", "window_start": T0 + 3 * HOUR, "window_end": T0 + 4 * HOUR,
        "window_start_iso": "2013-01-01T03:00:00.000Z", "window_end_iso": "2013-01-01T04:00:00.000Z",
        "value": {"count": 5, "mean_delay": 1.5}, "timestamp": T0 + 4 * HOUR - 1,
        "timestamp_iso": "2013-01-01T03:59:59.999Z", "source": "batch",
    }
    assert [x["source"] for x in body["rows"]] == ["batch", "speed", "speed"]

    def starts(**params: str) -> list[int]:
        res = client.get("/views/dep_counts/keys/EWR", params=params)
        assert res.status_code == 200, res.text
        return [x["window_start"] for x in res.json()["rows"]]

    assert starts(**{"from": "2013-01-01T04:30:00Z"}) == [T0 + 4 * HOUR, T0 + 5 * HOUR]
    assert starts(**{"from": "2013-01-01T04:30", "to": "2013-01-01T04:45"}) == [T0 + 4 * HOUR]
    assert starts(**{"from": "2013-01-01T05:15:00+01:00", "to": str(T0 + 4 * HOUR + 45 * MIN)}) == [T0 + 4 * HOUR]
    assert starts(to="2013-01-01") == []
    # a table ignores the bounds
    latest = client.get("/views/latest/keys/UA", params={"from": "2013-01-02"}).json()["rows"]
    assert latest[0]["value"] == {"name": "United Air Lines"} and latest[0]["window_start"] is None
    assert latest[0]["window_start_iso"] is None and latest[0]["source"] == "speed"


def test_error_paths(client: TestClient) -> None:
    r = client.get("/views/nope/keys/EWR")
    assert r.status_code == 404
    assert r.json()["detail"] == "unknown view 'nope'; known views: dep_counts, latest, sessions"
    assert client.get("/views/nope").status_code == 404
    assert client.get("/views/nope/keys").status_code == 404
    r = client.get("/views/dep_counts/keys/LGA")
    assert r.status_code == 404 and r.json()["detail"] == "unknown key 'LGA' in view 'dep_counts'"
    r = client.get("/views/dep_counts/keys/EWR", params={"from": "yesterday"})
    assert r.status_code == 422
    assert "'from'" in r.json()["detail"] and "ISO-8601" in r.json()["detail"]
    assert "epoch milliseconds" in r.json()["detail"]
    r = client.get("/views/dep_counts/keys/EWR", params={"to": "2013-13-01"})
    assert r.status_code == 422 and "'to'" in r.json()["detail"]
    r = client.get("/views/dep_counts/keys/EWR", params={"from": "2013-01-02", "to": "2013-01-01"})
    assert r.status_code == 400 and "after" in r.json()["detail"]
    assert client.get("/nope").status_code == 404


def test_quality_endpoint(client: TestClient) -> None:
    q = client.get("/quality").json()
    assert set(q) == {"dep_counts", "dep_counts_bad"}
    assert q["dep_counts"]["success"] is True and q["dep_counts_bad"]["success"] is False
    bad = [r for r in q["dep_counts_bad"]["results"] if not r["success"]]
    assert bad == [{"type": "expect_column_values_to_be_between", "column": "value.count",
                    "success": False, "observed_value": None, "unexpected_count": 1, "exception": None}]
    assert q["dep_counts"]["statistics"]["success_percent"] == 100.0


def test_openapi(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/health", "/views", "/views/{view}/keys", "/views/{view}/keys/{key}", "/quality"} <= set(spec["paths"])
    get = spec["paths"]["/views/{view}/keys/{key}"]["get"]
    assert {"404", "400", "422"} <= set(get["responses"])
    assert {p["name"] for p in get["parameters"]} == {"view", "key", "from", "to", "limit", "cursor"}
    assert "Link" in get["responses"]["200"]["headers"]
    rows_schema = spec["components"]["schemas"]["KeyRowsResponse"]["properties"]
    assert {"limit", "next_cursor", "rows"} <= set(rows_schema)
    assert {"Row", "ViewInfo", "HealthResponse", "QualityResult"} <= set(spec["components"]["schemas"])
    assert client.get("/docs").status_code == 200


def test_api_sees_new_version(lake: Path) -> None:
    with TestClient(create_app(lake, refresh_interval_s=0)) as c:
        assert c.get("/views/dep_counts").json()["version"] == 0
        publish(lake, [TUMBLING], {"dep_counts": frame([("LGA", T0, T0 + HOUR, {"count": 1}, T0)])}, {}, WATERMARK)
        assert c.get("/views/dep_counts").json()["version"] == 1
        assert c.get("/views/dep_counts/keys/LGA").json()["rows"][0]["value"] == {"count": 1}
        assert c.get("/quality").json() == {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_uvicorn_server(lake: Path) -> None:
    port = free_port()
    config = uvicorn.Config(create_app(lake), host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive(), "uvicorn exited"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=5) as http:
            assert http.get("/health").json()["views"] == 3
            rows = http.get("/views/dep_counts/keys/EWR", params={"from": "2013-01-01T05:00:00Z"}).json()["rows"]
            assert [r["source"] for r in rows] == ["speed"]
            assert http.get("/views/x/keys/EWR").status_code == 404
    finally:
        server.should_exit = True
        thread.join(timeout=15)
    assert not thread.is_alive()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)


def test_serve_in_subprocess(lake: Path) -> None:
    """``serve()`` as a process of its own, stopped by its PID."""
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    code = (
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "from serving.api import serve\n"
        f"serve(sys.argv[1], host='127.0.0.1', port={port}, log_level='warning')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(lake)], cwd=Path(__file__).parents[2],
                            env={**os.environ, "GX_ANALYTICS_ENABLED": "False"})
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "serve() exited early"
            assert time.monotonic() < deadline, "serve() did not answer"
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert r.json()["views"] == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode is not None


def test_root_redirects_to_the_ui(client: TestClient) -> None:
    r = client.get("/", follow_redirects=False)
    assert r.status_code in (302, 307, 308) and r.headers["location"] == "/ui"
    assert client.get("/").url.path == "/ui"
    assert "/" not in client.get("/openapi.json").json()["paths"]


def test_the_index_page_shows_the_pipeline_and_each_views_description(lake_with_quality: Path) -> None:
    """``/ui`` titles the views with the pipeline's name and description and gives each
    view's description from the declaration (escaped as text); a view the declaration does
    not describe has an empty cell, and an app without ``about`` is the plain "duet views"
    (issue 44)."""
    from serving.api.pages import About

    with TestClient(create_app(lake_with_quality, refresh_interval_s=0)) as plain:
        names = [v["name"] for v in plain.get("/views").json()["views"]]
        page = plain.get("/ui").text
    assert len(names) >= 2 and "<h1>duet views</h1>" in page and 'id="about"' not in page
    described, undescribed = names[0], names[1]
    about = About("flights", "Departures of NYC airports <2013>.", {described: "per origin & hour: count"})
    with TestClient(create_app(lake_with_quality, refresh_interval_s=0, about=about)) as c:
        page = c.get("/ui").text
        view_page = c.get(f"/ui/views/{described}").text
    assert "<title>flights views</title>" in page and "<h1>flights views</h1>" in page
    assert '<p id="about">Departures of NYC airports &lt;2013&gt;.</p>' in page
    rows = {name: page[page.index(f">{name}</a>"):] for name in names}
    assert rows[described].split("</tr>")[0].count('<td class="description">per origin &amp; hour: count</td>') == 1
    assert '<td class="description"></td>' in rows[undescribed].split("</tr>")[0]
    assert '<p id="view-description">per origin &amp; hour: count</p>' in view_page
