"""Paging of ``GET /views/{view}/keys/{key}`` (``limit``, ``cursor``, ``next_cursor``, ``Link``):
FastAPI TestClient over a real published lake.

The pages of a key, each requested with the previous one's cursor, concatenate to exactly the
rows of one request large enough to hold them all, for every window kind (tumbling, hopping,
session, table) and for rows with identical window bounds, with and without ``from``/``to``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.api import create_app
from serving.api.paging import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from serving.errors import InvalidCursorError
from serving.views import ViewIndex, ViewSpec, publish, save_catalogue, write_served_view
from serving.views.index import RowPosition
from serving_testkit import HOUR, MIN, T0, frame

HOURLY = ViewSpec.tumbling("hourly", HOUR, grace_ms=10 * MIN)
HOPPING = ViewSpec.hopping("hopping", 3 * HOUR, HOUR)
SESSIONS = ViewSpec.session("sessions", gap_ms=30 * MIN)
TABLE = ViewSpec.table("latest")
TIES = ViewSpec.session("ties", gap_ms=30 * MIN)
WATERMARK = T0 + 40 * HOUR
#: (view, key) pairs the property test pages through
KEYS = [("hourly", "K"), ("hourly", "J"), ("hopping", "K"), ("sessions", "S"), ("latest", "UA"),
        ("ties", "T")]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Windows of 57 hours (batch up to the watermark, speed after), hopping windows, 25
    sessions, a table, and a view whose rows repeat window bounds (written as it is, not merged)."""
    root = tmp_path_factory.mktemp("paging") / "lake"
    hourly_b = [("K", T0 + h * HOUR, T0 + (h + 1) * HOUR, {"count": h}, T0 + h * HOUR) for h in range(40)]
    hourly_s = [("K", T0 + h * HOUR, T0 + (h + 1) * HOUR, {"count": h}, T0 + h * HOUR) for h in range(38, 57)]
    hourly_b += [("J", T0 + h * HOUR, T0 + (h + 1) * HOUR, {"count": -h}, T0) for h in (3, 9, 30)]
    hopping = [("K", T0 + h * HOUR, T0 + (h + 3) * HOUR, {"count": h}, T0 + h * HOUR) for h in range(40)]
    sessions = [("S", T0 + 2 * h * HOUR, T0 + 2 * h * HOUR + (h % 4) * MIN, {"n": h}, T0) for h in range(25)]
    publish(root, [HOURLY, HOPPING, SESSIONS, TABLE],
            {"hourly": frame(hourly_b), "hopping": frame(hopping), "sessions": frame(sessions),
             "latest": frame([("UA", None, None, {"name": "United"}, T0)])},
            {"hourly": frame(hourly_s)}, WATERMARK)
    # bounds repeated 3 and 2 times, between single rows
    ties = [("T", T0 + s * HOUR, T0 + (s + 1) * HOUR, {"i": i}, T0)
            for i, s in enumerate([0, 1, 1, 1, 2, 3, 3, 4])]
    write_served_view(root, "ties", frame(ties).assign(source="batch"))
    save_catalogue(root, [HOURLY, HOPPING, SESSIONS, TABLE, TIES])
    return root


@pytest.fixture(scope="module")
def client(lake: Path) -> TestClient:
    with TestClient(create_app(lake, refresh_interval_s=60)) as c:
        yield c


def _all_rows(client: TestClient, view: str, key: str, **bounds: Any) -> list[dict[str, Any]]:
    body = client.get(f"/views/{view}/keys/{key}", params={**bounds, "limit": MAX_LIMIT}).json()
    assert body["next_cursor"] is None
    return body["rows"]


def _pages(client: TestClient, view: str, key: str, limit: int, **bounds: Any) -> list[list[dict[str, Any]]]:
    pages, cursor = [], None
    while True:
        params = {**bounds, "limit": limit, **({"cursor": cursor} if cursor else {})}
        r = client.get(f"/views/{view}/keys/{key}", params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["limit"] == limit and len(body["rows"]) <= limit
        pages.append(body["rows"])
        cursor = body["next_cursor"]
        if cursor is None:
            assert "link" not in r.headers
            return pages
        assert len(body["rows"]) == limit  # only the last page is short
        assert len(pages) <= 200


def test_rows_are_ordered_by_window_start_then_end(client: TestClient) -> None:
    for view, key in KEYS:
        rows = _all_rows(client, view, key)
        bounds = [(r["window_start"] or 0, r["window_end"] or 0) for r in rows]
        assert bounds == sorted(bounds), view
    assert len(_all_rows(client, "hourly", "K")) == 57
    assert [r["value"]["i"] for r in _all_rows(client, "ties", "T")] == list(range(8))


HOURS = st.one_of(st.none(), st.integers(min_value=-2, max_value=60))


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(KEYS), limit=st.integers(min_value=1, max_value=12), lo=HOURS, hi=HOURS,
       minutes=st.integers(min_value=0, max_value=59))
def test_pages_concatenate_to_the_unpaged_rows(client: TestClient, which: tuple[str, str], limit: int,
                                               lo: int | None, hi: int | None, minutes: int) -> None:
    view, key = which
    bounds = {}
    if lo is not None:
        bounds["from"] = T0 + lo * HOUR + minutes * MIN
    if hi is not None:
        bounds["to"] = T0 + hi * HOUR
    if lo is not None and hi is not None and bounds["from"] > bounds["to"]:
        bounds["from"], bounds["to"] = bounds["to"], bounds["from"]
    whole = _all_rows(client, view, key, **bounds)
    pages = _pages(client, view, key, limit, **bounds)
    assert [r for page in pages for r in page] == whole
    assert len(pages) == max(1, -(-len(whole) // limit))


def test_link_header_follows_to_the_last_page(client: TestClient) -> None:
    url: str | None = "/views/hourly/keys/K?limit=10&from=2013-01-01T05:30:00Z"
    rows, cursors = [], []
    while url is not None:
        r = client.get(url)
        assert r.status_code == 200, r.text
        body = r.json()
        rows += body["rows"]
        cursors.append(body["next_cursor"])
        link = r.links.get("next")
        if link is None:
            assert body["next_cursor"] is None
            url = None
        else:
            assert r.headers["link"].endswith('>; rel="next"')
            query = parse_qs(urlsplit(link["url"]).query)
            # the next page keeps the request's bounds and limit, with the body's cursor
            assert query == {"limit": ["10"], "from": ["2013-01-01T05:30:00Z"], "cursor": [body["next_cursor"]]}
            url = link["url"]
    assert rows == _all_rows(client, "hourly", "K", **{"from": "2013-01-01T05:30:00Z"})
    assert len(rows) == 57 - 5 and cursors[-1] is None and len(cursors) == 6


def test_default_limit_and_a_single_page(client: TestClient) -> None:
    r = client.get("/views/hourly/keys/K")
    body = r.json()
    assert body["limit"] == DEFAULT_LIMIT and len(body["rows"]) == 57 and body["next_cursor"] is None
    assert "link" not in r.headers
    table = client.get("/views/latest/keys/UA", params={"limit": 1}).json()
    assert len(table["rows"]) == 1 and table["next_cursor"] is None
    # the bounds hold: nothing before 'to', and an empty page has no cursor
    empty = client.get("/views/hourly/keys/K", params={"to": T0 - 1, "limit": 1}).json()
    assert empty["rows"] == [] and empty["next_cursor"] is None


@pytest.mark.parametrize("limit", ["0", "-1", str(MAX_LIMIT + 1), "abc", "1.5"])
def test_a_limit_out_of_range_is_a_422_naming_it(client: TestClient, limit: str) -> None:
    r = client.get("/views/hourly/keys/K", params={"limit": limit})
    assert r.status_code == 422
    assert "'limit'" in r.json()["detail"]


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


@pytest.mark.parametrize("cursor", [
    "!!!", "abc", "x" * 500, "", "%00", _b64('{"a": 1}'), _b64("[1, 2]"), _b64("[1, 2, 0]"),
    _b64("[true, 1, 1]"), _b64('["1", 2, 3]'), _b64("[1.5, 2, 1]"), _b64(f"[{2**70}, 1, 1]"),
    base64.urlsafe_b64encode(b"\xff\xfe\x00").decode(),
])
def test_a_malformed_cursor_is_a_400_with_a_message(client: TestClient, cursor: str) -> None:
    r = client.get("/views/hourly/keys/K", params={"cursor": cursor})
    if cursor == "":  # an empty cursor reads as none given (as an empty from/to)
        assert r.status_code == 200 and len(r.json()["rows"]) == 57
        return
    assert r.status_code == 400, r.text
    assert "malformed cursor" in r.json()["detail"] and "next_cursor" in r.json()["detail"]


def test_cursor_round_trip_and_opacity() -> None:
    for pos in (RowPosition(None, None), RowPosition(T0, T0 + HOUR, 3), RowPosition(-(2**63), 2**63 - 1)):
        text = encode_cursor(pos)
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert decode_cursor(text) == pos
    with pytest.raises(InvalidCursorError):
        decode_cursor(encode_cursor(RowPosition(T0, T0))[:-3] + "!")


def test_a_cursor_outlives_a_new_version_of_the_view(lake: Path, tmp_path: Path) -> None:
    """Keyset paging: a page continues after the bounds of the last row read, so rows added
    before them in a new Delta version neither repeat nor shift the rest."""
    import shutil

    root = tmp_path / "lake"
    shutil.copytree(lake, root)
    with TestClient(create_app(root, refresh_interval_s=0)) as c:
        first = c.get("/views/hourly/keys/J", params={"limit": 2}).json()
        assert [r["window_start"] for r in first["rows"]] == [T0 + 3 * HOUR, T0 + 9 * HOUR]
        extra = [("J", T0 + h * HOUR, T0 + (h + 1) * HOUR, {"count": 0}, T0) for h in (1, 5, 3, 9, 30, 31)]
        publish(root, [HOURLY], {"hourly": frame(extra)}, {}, WATERMARK)
        rest = c.get("/views/hourly/keys/J", params={"limit": 2, "cursor": first["next_cursor"]}).json()
        assert [r["window_start"] for r in rest["rows"]] == [T0 + 30 * HOUR, T0 + 31 * HOUR]
        assert rest["next_cursor"] is None


def test_index_page_reads_only_its_rows(lake: Path) -> None:
    """``ViewIndex.page`` is what the endpoint pages with; ``next`` counts rows of repeated bounds."""
    index = ViewIndex(lake, refresh_interval_s=60)
    page = index.page("ties", "T", limit=3)
    assert [r["value"] for r in page.rows] == [json.dumps({"i": i}) for i in range(3)]
    assert page.next == RowPosition(T0 + HOUR, T0 + 2 * HOUR, seen=2)
    page = index.page("ties", "T", after=page.next, limit=3)
    assert [json.loads(r["value"])["i"] for r in page.rows] == [3, 4, 5]
    assert index.page("ties", "T", after=RowPosition(T0 + 3 * HOUR, T0 + 4 * HOUR, seen=9)).rows[0]["window_start"] \
        == T0 + 4 * HOUR
    assert index.page("hourly", "K", after=page.next, limit=None).next is None
    assert pd.isna(index.page("latest", "UA").rows[0]["window_start"])
