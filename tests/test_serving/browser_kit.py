"""Helpers of the browser tests: the app on a loopback port, waits, a headless Chromium (the
session's ``browser`` fixture is one) and an offline one."""

from __future__ import annotations

import contextlib
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_lake(lake: Path, **options: Any) -> Iterator[str]:
    """The serving app over ``lake`` (``create_app(lake, **options)``) on a free loopback port
    (uvicorn in a thread); yields its base URL and stops it on exit. Fails the test if
    ``/health`` does not answer in 30 s."""
    import uvicorn

    from serving.api.app import create_app

    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(lake, **options), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    else:
        pytest.fail("the serving app did not start")
    try:
        yield url
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def wait_for(driver: object, css: str, timeout: float = 30.0) -> object:
    """The first element matching ``css`` once present (TimeoutException after ``timeout`` s)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def click_and_load(driver: object, element: object, css: str, timeout: float = 30.0) -> object:
    """Click ``element`` (a link or a form's submit button), wait until the current page is
    gone, then for ``css`` on the next one. Waiting for ``css`` alone can match the page the
    click leaves (``body[data-rendered='true']`` is on both): on a loaded machine the old page
    answered and its traces were read as the new range's."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, timeout).until(ec.staleness_of(page))
    return wait_for(driver, css, timeout)


@contextlib.contextmanager
def chromium(*args: str, capabilities: dict[str, object] | None = None) -> Iterator[object]:
    """A headless Chromium (Debian's ``chromium`` + ``chromium-driver``, installed by ``make
    setup``) driven by Selenium, 1400x900 px, with the extra command-line ``args`` and
    ``capabilities``; quit on exit. Fails the test naming the packages when they are missing."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.fail("the browser tests need Debian's chromium and chromium-driver: run `make setup`")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for name, value in (capabilities or {}).items():
        options.set_capability(name, value)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,900", "--hide-scrollbars", *args):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def offline_chromium() -> contextlib.AbstractContextManager[object]:
    """A headless :func:`chromium` without network access beyond loopback: every host name but
    ``127.0.0.1`` fails to resolve (``--host-resolver-rules``) and any other address goes to a
    closed proxy port, so a page loading a CDN script gets nothing. Its console is readable with
    ``driver.get_log("browser")``."""
    return chromium("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                    f"--proxy-server=http://127.0.0.1:{free_port()}", "--proxy-bypass-list=127.0.0.1",
                    capabilities={"goog:loggingPrefs": {"browser": "ALL"}})  # console, CSP reports
