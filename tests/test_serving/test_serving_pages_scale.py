"""The views page on a long range (issue 23 item 4), in a real headless Chromium against the
real app over a real Delta lake (published by ``serving.views.publish``, no mock):

* ``departures_hourly``: a year of hourly tumbling windows for three airports (26,280 rows), the
  last hours from the speed layer. The chart draws at most ``MAX_POINTS`` points (one per day),
  the speed part is shaded with its legend and shown at full resolution in a second chart, and
  the range control (a preset, then typed bounds) re-queries the server.
* ``plane_duty_sessions``: sessions of 120 aircraft every other day: sessions per day and their
  mean duration; the key box finds an aircraft through the server's key search.
* ``planes``: a table: the top keys by a field.
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from browser_kit import click_and_load, serve_lake, wait_for
from serving.api.charts import SPEED_REGION_LABEL
from serving.api.pages import MAX_POINTS
from serving.views import ViewSpec, publish
from serving_testkit import HOUR, T0, frame

if TYPE_CHECKING:
    import pandas as pd

DAY = 24 * HOUR
HOURS = 365 * 24
WATERMARK = T0 + (HOURS - 6) * HOUR  # 2013-12-31T18:00Z
HOURLY = ViewSpec.tumbling("departures_hourly", HOUR, grace_ms=2 * HOUR)
SESSIONS = ViewSpec.session("plane_duty_sessions", gap_ms=4 * HOUR, grace_ms=2 * HOUR)
TABLE = ViewSpec.table("planes")
AIRPORTS = ("EWR", "JFK", "LGA")
PLANES = [f"N{p:03d}AA" for p in range(120)]


def _count(h: int, i: int) -> int:
    """Departures of airport ``i`` in hour ``h`` of the year."""
    return 10 + 8 * i + h % 24


def _hourly(hours: range) -> list[tuple]:
    return [(o, T0 + h * HOUR, T0 + (h + 1) * HOUR, {"count": _count(h, i), "mean_dep_delay": h % 7 - 2.5},
             T0 + (h + 1) * HOUR - 1) for h in hours for i, o in enumerate(AIRPORTS)]


def _sessions(days: range) -> list[tuple]:
    """Every plane flies a session on each of ``days`` (even days), ``1 + p % 4`` hours long."""
    out = []
    for d in days:
        for p, tail in enumerate(PLANES):
            start = T0 + d * DAY + (p % 12) * HOUR
            out.append((tail, start, start + (1 + p % 4) * HOUR, {"legs": 2 + p % 3}, start + (1 + p % 4) * HOUR))
    return out


@pytest.fixture(scope="module")
def year_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pages-scale") / "lake"
    # the speed layer holds the last day of sessions (2013-12-31): those still open at the
    # watermark are served from it, the others from the batch layer
    batch = {HOURLY.name: frame(_hourly(range(0, HOURS - 8))), SESSIONS.name: frame(_sessions(range(0, 365, 2))),
             TABLE.name: frame([(t, None, None, {"seats": 50 + p * 37 % 300}, T0 + p) for p, t in enumerate(PLANES)])}
    speed = {HOURLY.name: frame(_hourly(range(HOURS - 9, HOURS))), SESSIONS.name: frame(_sessions(range(364, 365)))}
    publish(root, [HOURLY, SESSIONS, TABLE], batch, speed, WATERMARK)
    (root / "views").mkdir(parents=True, exist_ok=True)
    (root / "views" / "_batch.json").write_text(json.dumps({"watermark_ms": WATERMARK}))
    return root


@pytest.fixture(scope="module")
def served(year_lake: Path) -> Iterator[str]:
    with serve_lake(year_lake) as url:
        yield url


def _served(lake: Path, view: str) -> "pd.DataFrame":
    from deltalake import DeltaTable

    return DeltaTable(str(lake / "serving" / view)).to_pyarrow_table().to_pandas()


def _speed_hours(lake: Path) -> list[int]:
    """The hours (of the year) whose windows the served view took from the speed layer."""
    df = _served(lake, HOURLY.name)
    return sorted({(ws - T0) // HOUR for ws in df.loc[df["source"] == "speed", "window_start"]})


def _traces(driver: object, chart: str = "chart") -> list[dict]:
    return driver.execute_script(
        f"return document.getElementById({chart!r}).data.map(t => ({{name: t.name, x: t.x, y: t.y}}));")


def _open(driver: object, url: str) -> None:
    driver.get(url)
    wait_for(driver, "body[data-rendered='true']")


@pytest.mark.browser
def test_a_year_is_drawn_per_day_with_the_speed_part_marked(browser: object, served: str, year_lake: Path) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, f"{served}/ui/views/{HOURLY.name}")
    resolution = browser.find_element(By.ID, "resolution")
    assert resolution.get_attribute("data-bucket") == "day"
    assert "8,760 windows in this range" in resolution.text and "one point per day" in resolution.text
    traces = _traces(browser)
    assert [t["name"] for t in traces] == ["batch", "speed"]
    assert sum(len(t["x"]) for t in traces) <= MAX_POINTS
    assert int(resolution.get_attribute("data-points")) == sum(len(t["x"]) for t in traces)
    batch = traces[0]
    assert len(batch["x"]) == 365 and batch["x"][0].startswith("2013-01-01T00:00")
    # a day is the sum of its 24 hourly windows over the three airports
    assert batch["y"][9] == sum(_count(9 * 24 + h, i) for h in range(24) for i in range(3))
    title = browser.find_element(By.CSS_SELECTOR, "#chart .gtitle").text
    assert title == f"{HOURLY.name}: count, sum per day, all keys"
    # the speed region: a shaded rectangle with its own legend entry, from the first speed window
    speed_hours = _speed_hours(year_lake)
    rect = browser.execute_script(
        "return document.getElementById('chart').layout.shapes.find(s => s.type === 'rect');")
    assert rect["name"] == SPEED_REGION_LABEL and rect["showlegend"]
    assert rect["x0"].startswith(f"2013-12-31T{speed_hours[0] % 24:02d}:00")
    legend = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#chart .legendtext")]
    assert legend == ["batch", "speed", SPEED_REGION_LABEL]
    assert traces[1]["y"] and traces[1]["x"][-1].startswith("2013-12-31")
    # ... and at full resolution in the fresh-edge chart: one point per speed window
    edge = _traces(browser, "edge-chart")
    edge_speed = next(t for t in edge if t["name"] == "speed")
    assert len(edge_speed["x"]) == len(speed_hours)
    assert edge_speed["y"][-1] == sum(_count(HOURS - 1, i) for i in range(3))
    assert "Speed-layer rows in this range: windows from 2013-12-31T" in browser.find_element(By.ID, "speed-note").text


@pytest.mark.browser
def test_the_range_control_re_queries_the_server(browser: object, served: str) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, f"{served}/ui/views/{HOURLY.name}")
    click_and_load(browser, browser.find_element(By.ID, "preset-week"), "body[data-rendered='true']")
    query = parse_qs(urlsplit(browser.current_url).query)
    assert query["from"] == ["2013-12-24T23:00Z"] and query["to"] == ["2013-12-31T23:00Z"]
    assert browser.find_element(By.ID, "resolution").get_attribute("data-bucket") == "window"
    week = _traces(browser)
    assert sum(len(t["x"]) for t in week) == 7 * 24 + 1  # one point per hourly window
    assert week[0]["x"][0].startswith("2013-12-24T23:00")
    assert "active" in browser.find_element(By.ID, "preset-week").get_attribute("class")
    assert not browser.find_elements(By.ID, "edge-chart")  # full resolution already

    # typed bounds: two days of March, batch only
    for name, value in (("from", "2013-03-01"), ("to", "2013-03-02T23:00")):
        box = browser.find_element(By.ID, name)
        box.clear()
        box.send_keys(value)
    click_and_load(browser, browser.find_element(By.ID, "show"), "body[data-rendered='true']")
    march = _traces(browser)
    assert [t["name"] for t in march] == ["batch"]
    assert len(march[0]["x"]) == 48 and march[0]["x"][0].startswith("2013-03-01T00:00")
    assert march[0]["y"][0] == sum(_count(59 * 24, i) for i in range(3))
    assert browser.find_element(By.ID, "speed-note").text == "No speed-layer row in this range."

    click_and_load(browser, browser.find_element(By.ID, "preset-all"), "body[data-rendered='true']")
    assert browser.find_element(By.ID, "resolution").get_attribute("data-bucket") == "day"


@pytest.mark.browser
def test_sessions_per_day_and_a_key_found_by_search(browser: object, served: str, year_lake: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, f"{served}/ui/views/{SESSIONS.name}")
    assert browser.find_element(By.ID, "resolution").get_attribute("data-bucket") == "day"
    traces = browser.execute_script(
        "return document.getElementById('chart').data.map(t => ({name: t.name, yaxis: t.yaxis, y: t.y}));")
    sessions = [t for t in traces if t["yaxis"] == "y"]
    durations = [t for t in traces if t["yaxis"] == "y2"]
    assert [t["name"] for t in sessions] == ["batch", "speed"]
    assert sessions[0]["y"][0] == len(PLANES) and len(sessions[0]["y"]) == 183
    assert durations[0]["y"][0] == pytest.approx(sum((1 + p % 4) * 60 for p in range(len(PLANES))) / len(PLANES))
    served_sessions = _served(year_lake, SESSIONS.name)
    from_speed = int((served_sessions["source"] == "speed").sum())
    assert 0 < from_speed < len(PLANES) and sessions[1]["y"] == [from_speed]  # 2013-12-31
    assert sessions[0]["y"][-1] + sessions[1]["y"][-1] == len(PLANES)
    title = browser.find_element(By.CSS_SELECTOR, "#chart .gtitle").text
    assert title == f"{SESSIONS.name}: sessions per day and their mean duration, all keys"
    assert not browser.find_elements(By.CSS_SELECTOR, "select[name='key']")  # no giant list

    box = browser.find_element(By.ID, "key-search")
    box.send_keys("n11")
    WebDriverWait(browser, 10).until(
        lambda d: d.find_element(By.ID, "key-status").get_attribute("data-query") == "n11")
    found = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#key-results a")]
    assert found == [f"N11{i}AA" for i in range(10)]
    assert "10 keys match" in browser.find_element(By.ID, "key-status").text
    click_and_load(browser, browser.find_element(By.LINK_TEXT, "N113AA"), "body[data-rendered='true']")
    assert browser.find_element(By.ID, "key").text == "N113AA"
    assert browser.find_element(By.CSS_SELECTOR, "#chart .gtitle").text.endswith("key N113AA")
    one = browser.execute_script("return document.getElementById('chart').data.filter(t => t.yaxis === 'y')"
                                 ".map(t => t.y.reduce((a, b) => a + b, 0));")
    assert sum(one) == 183  # one session every other day


def test_a_table_view_charts_its_top_keys(served: str) -> None:
    res = httpx.get(f"{served}/ui/views/{TABLE.name}")
    assert res.status_code == 200
    table = html.unescape(res.text.split('<table id="top-keys">')[1].split("</table>")[0])
    keys = re.findall(r"<tr><td>(N\d{3}AA)</td><td>([\d,]+)</td>", table)
    seats = {t: 50 + p * 37 % 300 for p, t in enumerate(PLANES)}
    best = sorted(seats, key=lambda t: (-seats[t], t))[:20]
    assert [k for k, _ in keys] == best and [int(v.replace(",", "")) for _, v in keys] == [seats[t] for t in best]
    assert f"top 20 of {len(PLANES)} keys by seats" in res.text


def test_key_search_api(served: str) -> None:
    base = f"{served}/views/{SESSIONS.name}/keys"
    body = httpx.get(base, params={"q": "n11", "limit": 3}).json()
    assert body == {"view": SESSIONS.name, "total": 10, "offset": 0, "limit": 3, "keys": ["N110AA", "N111AA", "N112AA"]}
    # prefix matches first, then the keys containing the text
    assert httpx.get(base, params={"q": "11a"}).json()["keys"] == ["N011AA", "N111AA"]
    assert httpx.get(base, params={"q": "zz"}).json()["total"] == 0
    assert httpx.get(base, params={"q": ""}).json()["total"] == len(PLANES)
    too_long = httpx.get(base, params={"q": "x" * 201})
    assert too_long.status_code == 422 and "'q'" in too_long.json()["detail"]
    schema = httpx.get(f"{served}/openapi.json").json()
    params = {p["name"]: p for p in schema["paths"]["/views/{view}/keys"]["get"]["parameters"]}
    assert "ignoring case" in params["q"]["description"]


@pytest.mark.parametrize(
    ("query", "status", "text"),
    [
        ("agg=median", 400, "unknown aggregate 'median'; expected one of sum, mean, max, min"),
        ("from=yesterday", 422, "invalid 'from' value 'yesterday': expected ISO-8601"),
        ("from=2013-03-02&to=2013-03-01", 400, "'from' (2013-03-02T00:00Z) is after 'to' (2013-03-01T00:00Z)"),
        ("from=99999999999999999999&to=1", 400, "'from' (99999999999999999999 ms) is after 'to'"),
        ("key=EWX", 404, "unknown key 'EWX' in view 'departures_hourly'; keys like it: EWR"),
        ("field=seats", 400, "numeric fields: count, mean_dep_delay"),
    ],
)
def test_bad_range_and_aggregate_get_a_4xx_page(served: str, query: str, status: int, text: str) -> None:
    res = httpx.get(f"{served}/ui/views/{HOURLY.name}?{query}")
    assert res.status_code == status
    assert text in html.unescape(res.text)
