"""The views web page (``/ui``), in a real headless Chromium against a real uvicorn server.

The lake holds two days of an hourly view for three airports, the first 30 hours from the
batch layer (closed before the watermark) and the rest from the speed layer, plus a stored
Great Expectations result. The test asserts what a person sees: the chart with a batch and a
speed trace, the shaded speed region and the watermark line, the source table, the check results; and it saves the
screenshot shown in docs/views.md (``docs/img/serving-view.png``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from browser_kit import serve_lake, wait_for
from serving.api.charts import SPEED_REGION_LABEL
from serving.quality import run_suite, save_result, standard_expectations
from serving.views import ViewSpec, publish
from serving_testkit import HOUR, T0, frame

REPO = Path(__file__).resolve().parents[2]
VIEW = ViewSpec.tumbling("departures_hourly", HOUR, grace_ms=2 * HOUR)
WATERMARK = T0 + 32 * HOUR  # windows ending by T0+30h are closed (grace 2 h)


def _rows(hours: range, scale: float) -> list[tuple]:
    rows = []
    for h in hours:
        for i, origin in enumerate(("EWR", "JFK", "LGA")):
            n = int(scale * (10 + 8 * i + 12 * abs(((h % 24) - 12) / 12)))
            ws = T0 + h * HOUR
            rows.append((origin, ws, ws + HOUR, {"count": n, "cancelled": n // 9}, ws + HOUR - 1))
    return rows


@pytest.fixture(scope="module")
def page_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pages") / "lake"
    batch = {VIEW.name: frame(_rows(range(0, 30), 1.0))}
    speed = {VIEW.name: frame(_rows(range(29, 48), 1.05))}
    publish(root, [VIEW], batch, speed, WATERMARK)
    (root / "views").mkdir(parents=True, exist_ok=True)
    (root / "views" / "_batch.json").write_text(json.dumps({"watermark_ms": WATERMARK}))
    from deltalake import DeltaTable

    served = DeltaTable(str(root / "serving" / VIEW.name)).to_pyarrow_table().to_pandas()
    save_result(root, run_suite(VIEW.name, served, standard_expectations(VIEW, {"count": (0, None)})))
    return root


@pytest.fixture(scope="module")
def server(page_lake: Path) -> Iterator[str]:
    """The serving app on a free loopback port (uvicorn in a thread)."""
    with serve_lake(page_lake) as url:
        yield url


_wait_for = wait_for


@pytest.mark.browser
def test_the_view_page_shows_batch_speed_watermark_and_checks(browser: object, server: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/ui/views/{VIEW.name}")
    _wait_for(browser, "#chart[data-rendered='true'] .main-svg")
    legend = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#chart .legendtext")]
    assert legend == ["batch", "speed", SPEED_REGION_LABEL]
    # one point per hour: 30 batch hours, and the speed hours after the merge (29 is batch's)
    traces = browser.execute_script(
        "return document.getElementById('chart').data.map(t => [t.name, t.x.length, t.y[0]]);")
    assert traces[0][:2] == ["batch", 30] and traces[1][:2] == ["speed", 18]
    assert traces[0][2] == sum(r[3]["count"] for r in _rows(range(0, 1), 1.0))
    assert "batch watermark" in browser.find_element(By.ID, "chart").text
    assert browser.find_element(By.ID, "watermark").text == "2013-01-02T08:00:00.000Z"
    sources = browser.find_element(By.ID, "sources").text
    assert "batch 30 2013-01-01T00:00:00.000Z 2013-01-02T05:00:00.000Z" in sources
    assert "speed 18" in sources
    assert browser.find_element(By.ID, "checks").text.startswith("Great Expectations suite: passed")
    assert "expect_column_values_to_not_be_null" in browser.find_element(By.ID, "check-results").text
    save_full_page(browser, REPO / "docs" / "img" / "serving-view.png")


def save_full_page(driver: object, out: Path) -> None:
    """Screenshot the whole page (the window grown to the document's height) into ``out``."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, max(900, min(int(height) + 40, 3000)))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(out)), out
    finally:
        driver.set_window_size(width, 900)


@pytest.mark.browser
def test_one_key_and_the_index_page(browser: object, server: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/ui/views/{VIEW.name}?key=JFK&field=cancelled")
    _wait_for(browser, "#chart[data-rendered='true'] .main-svg")
    title = browser.find_element(By.CSS_SELECTOR, "#chart .gtitle").text
    assert title == f"{VIEW.name}: cancelled per window, key JFK"
    browser.get(f"{server}/ui")
    table = _wait_for(browser, "#views")
    assert f"{VIEW.name} tumbling 144 3 passed" in table.text
    browser.find_element(By.LINK_TEXT, VIEW.name).click()
    _wait_for(browser, "#chart[data-rendered='true']")
    assert browser.find_element(By.ID, "view-name").text == VIEW.name


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/ui/views/nope", 404, "unknown view 'nope'; known views: departures_hourly"),
        (f"/ui/views/{VIEW.name}?key=ZZZ", 404, "unknown key 'ZZZ'"),
        (f"/ui/views/{VIEW.name}?field=seats", 400, "numeric fields: count, cancelled"),
        ("/ui/views/..%2F..%2Fetc%2Fpasswd", 404, ""),  # decoded to a path no route matches
    ],
)
def test_bad_page_requests_get_a_4xx_naming_what_exists(server: str, path: str, status: int, text: str) -> None:
    res = httpx.get(server + path)
    assert res.status_code == status
    assert text in html.unescape(res.text)


def test_plotly_is_served_locally(server: str) -> None:
    res = httpx.get(server + "/ui/static/plotly.min.js")
    assert res.status_code == 200 and res.headers["content-type"].startswith("application/javascript")
    assert "plotly" in res.text[:2000].lower() and len(res.text) > 1_000_000
