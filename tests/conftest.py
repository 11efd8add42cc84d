"""Session-wide test setup: one Kafka broker and one SparkSession for the whole session,
unique names, one headless browser.

Keep this file minimal: each test folder adds its own fixtures in its own conftest.py.
"""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from collections.abc import Iterator

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ["PYSPARK_PYTHON"] = sys.executable

_counter = itertools.count()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers: ``$KAFKA_BOOTSTRAP_SERVERS`` when set, else ONE embedded broker
    started for the whole session (on first use) and stopped at its end."""
    from speed_layer.runtime.broker import kafka_cluster

    with kafka_cluster() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """ONE SparkSession with Delta for the whole session (``batch_layer.spark.get_spark``,
    started on first use, ~8 s), shared by every Spark test; stopped at the end."""
    from batch_layer.spark import get_spark, stop_spark

    session = get_spark("duet-tests")
    yield session
    stop_spark()


@pytest.fixture(scope="session")
def equivalence_kit() -> object:
    """``tests/test_equivalence/equivalence_kit.py`` (the speed-vs-batch helpers) as ONE module
    object, ``equivalence_kit``, the name that folder's tests import it by: other folders
    cannot import it as ``test_equivalence.equivalence_kit``, since ``test_equivalence`` is
    also the name of a test module there."""
    import importlib.util
    from pathlib import Path

    if "equivalence_kit" in sys.modules:
        return sys.modules["equivalence_kit"]
    path = Path(__file__).parent / "test_equivalence" / "equivalence_kit.py"
    spec = importlib.util.spec_from_file_location("equivalence_kit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["equivalence_kit"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A prefix unique to this test, usable in topic names and application ids
    (``[a-z0-9-]``), e.g. ``f"{unique_name}-input"``."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return f"t-{base}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """One headless Chromium (Debian's ``chromium`` + ``chromium-driver``, installed by
    ``make setup``) driven by Selenium for the whole session; 1400x900 px."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.fail("the browser tests need Debian's chromium and chromium-driver: run `make setup`")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,900", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
