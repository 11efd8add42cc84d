"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) render in a headless Chromium that cannot reach
anything but the loopback interface: their JavaScript and CSS come from the serving app
itself (the ``fastapi-offline`` package's assets), not from a CDN.

ReDoc's sidebar always asks for a logo at ``cdn.redoc.ly``: the pages' Content-Security-Policy
blocks it in the browser (no request leaves; ReDoc then hides the image), which the test reads
from the console."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from browser_kit import offline_chromium, serve_lake, wait_for

# every src / href the rendered page holds
_ELEMENT_URLS = """
return [...[...document.querySelectorAll('script[src]')].map(e => e.src),
        ...[...document.querySelectorAll('link[href]')].map(e => e.href),
        ...[...document.querySelectorAll('img[src]')].map(e => e.src)];
"""
# every resource the page asked for (elements and fetches, loaded, failed or blocked)
_REQUESTED = "return performance.getEntriesByType('resource').map(e => e.name);"


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    lake = tmp_path_factory.mktemp("docs") / "lake"  # no view: the docs need none
    with serve_lake(lake) as url:
        yield url


@pytest.fixture(scope="module")
def offline_browser() -> Iterator[object]:
    with offline_chromium() as driver:
        yield driver


def _assert_same_origin(driver: object, server: str) -> list[str]:
    """Every URL in the rendered DOM is on ``server``; every resource requested elsewhere was
    blocked by the page's Content-Security-Policy (a console message says so). Returns the
    requested URLs."""
    origin = urlsplit(server).netloc
    local = [u for u in driver.execute_script(_ELEMENT_URLS) if not u.startswith(("data:", "blob:"))]
    assert local and all(urlsplit(u).netloc == origin for u in local), local
    requested = driver.execute_script(_REQUESTED)
    console = [entry["message"] for entry in driver.get_log("browser")]
    for url in requested:
        if urlsplit(url).netloc != origin:
            assert any(url in m and "Content Security Policy" in m and "blocked" in m for m in console), \
                (url, console)
    return requested


@pytest.mark.browser
def test_swagger_ui_renders_offline(offline_browser: object, docs_server: str) -> None:
    from selenium.webdriver.common.by import By

    offline_browser.get(f"{docs_server}/docs")
    wait_for(offline_browser, ".opblock")
    operations = httpx.get(f"{docs_server}/openapi.json").json()["paths"]
    expected = sum(len(methods) for methods in operations.values())
    blocks = offline_browser.find_elements(By.CSS_SELECTOR, ".opblock")
    assert len(blocks) == expected >= 6
    assert "/views/{view}/keys" in offline_browser.find_element(By.ID, "swagger-ui").text
    urls = _assert_same_origin(offline_browser, docs_server)
    assert any(u.endswith("/static/docs/swagger-ui-bundle.js") for u in urls)
    assert any(u.endswith("/static/docs/swagger-ui.css") for u in urls)


@pytest.mark.browser
def test_redoc_renders_offline(offline_browser: object, docs_server: str) -> None:
    from selenium.webdriver.common.by import By

    offline_browser.get(f"{docs_server}/redoc")
    wait_for(offline_browser, ".api-content h2")
    time.sleep(0.5)  # ReDoc's logo image fails (blocked) and is removed
    text = offline_browser.find_element(By.CSS_SELECTOR, ".api-content").text
    assert "duet serving" in text and "One served view" in text
    urls = _assert_same_origin(offline_browser, docs_server)
    assert any(u.endswith("/static/docs/redoc.standalone.js") for u in urls)


@pytest.mark.browser
def test_the_offline_browser_cannot_reach_a_cdn(offline_browser: object, docs_server: str) -> None:
    """The check above means something: the same browser cannot load a CDN's script."""
    offline_browser.get(f"{docs_server}/ui")
    loaded = offline_browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const s = document.createElement('script');
        s.src = 'https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js';
        s.onload = () => done('loaded'); s.onerror = () => done('failed');
        document.head.appendChild(s);
    """)
    assert loaded == "failed"


def test_docs_pages_and_assets_are_local(docs_server: str) -> None:
    """Without a browser: both pages point at this app's assets only, and the assets are served."""
    for page, assets in (("/docs", ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")),
                         ("/redoc", ("redoc.standalone.js", "favicon.png"))):
        text = httpx.get(docs_server + page).text
        assert "https://" not in text and "http://" not in text, page
        for name in assets:
            assert f'"/static/docs/{name}"' in text, (page, name)
            res = httpx.get(f"{docs_server}/static/docs/{name}")
            assert res.status_code == 200 and len(res.content) > 1000, name
    assert httpx.get(f"{docs_server}/static/docs/../docs.py").status_code == 404
    assert httpx.get(f"{docs_server}/static/docs/nope.js").status_code == 404
