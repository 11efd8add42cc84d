"""The views page's fresh edge updates by itself: a real headless Chromium on a live app (a
real broker): a record produced to the view topic shows on the open page, with the speed
layer's stream time, without a reload and without a publish."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from browser_kit import serve_lake, wait_for
from serving.api.times import ms_to_iso
from serving.views import ViewSpec, publish
from serving_testkit import HOUR, T0, frame
from test_serving_live import _hour, _produce, _topic

pytestmark = pytest.mark.timeout(180)


def test_the_fresh_edge_updates_by_itself(tmp_path: Path, kafka_bootstrap: str, browser: object) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    name = f"departures_hourly_{uuid.uuid4().hex[:8]}"
    spec = ViewSpec.tumbling(name, HOUR)
    lake = tmp_path / "lake"
    publish(lake, [spec], {name: frame([_hour(h, {"count": h}) for h in range(4)])},
            {name: frame([_hour(4, {"count": 4})])}, T0 + 4 * HOUR)
    _topic(kafka_bootstrap, name)
    _produce(kafka_bootstrap, name, [_hour(4, {"count": 4})])
    driver = browser
    with serve_lake(lake, refresh_interval_s=0, bootstrap=kafka_bootstrap) as url:
        driver.get(f"{url}/ui/views/{name}?key=EWR")  # type: ignore[attr-defined]
        wait = WebDriverWait(driver, 20)
        wait.until(lambda d: d.find_element(By.ID, "live-status").text == "live")
        assert driver.find_element(By.ID, "live-watermark").text == ms_to_iso(T0 + 4 * HOUR)  # type: ignore[attr-defined]
        assert driver.find_element(By.ID, "live-stream-time").text == ms_to_iso(T0 + 5 * HOUR - 1)  # type: ignore[attr-defined]
        rows = driver.find_elements(By.CSS_SELECTOR, "#live-edge tbody tr")  # type: ignore[attr-defined]
        assert [r.get_attribute("data-window-start") for r in rows] == [str(T0 + 4 * HOUR)]

        produced = time.monotonic()
        _produce(kafka_bootstrap, name, [_hour(5, {"count": 5})])
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#live-edge tbody tr")) == 2)
        seen_after = time.monotonic() - produced
        first = driver.find_element(By.CSS_SELECTOR, "#live-edge tbody tr")  # type: ignore[attr-defined]
        assert first.get_attribute("data-window-start") == str(T0 + 5 * HOUR)  # the newest first
        assert "speed" in first.text and '"count":5' in first.text.replace(" ", "")
        wait.until(lambda d: d.find_element(By.ID, "live-stream-time").text == ms_to_iso(T0 + 6 * HOUR - 1))
        assert seen_after < 5, seen_after  # one poll (1 s) plus the read, with room for a busy host
