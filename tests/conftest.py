"""Session-wide test setup: one Kafka broker and one SparkSession for the whole session,
unique names, one headless browser.

Keep this file minimal: each test folder adds its own fixtures in its own conftest.py.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from types import ModuleType

import pytest
from hypothesis import settings

# No per-example deadline: the suite runs in 2 workers beside brokers, Spark and Dagster,
# and an example that pays a first import or loses its core exceeds hypothesis' 200 ms
# without being wrong (speed is bench/'s, not a test's). Tests that set their own keep it.
settings.register_profile("duet", deadline=None)
settings.load_profile("duet")

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ["PYSPARK_PYTHON"] = sys.executable
# The Spark drivers the tests' commands start (duet run, duet batch, Dagster runs) live for one
# small job: C1 alone compiles enough, for about half the CPU of a cold JVM's default tiers
# (docs/cluster.md). The session's own driver (the spark fixture) lives for the whole run and
# keeps C2: the translation tests took 231 s with C1 only, 205 s with both.
os.environ.setdefault("DUET_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
# Each test process (each xdist worker) gets folders of its own, not the user's: a DAGSTER_HOME
# (the commands that write the lake record it in Dagster's catalog, pipelines/dagster/catalog.py)
# and the speed layer's state root (two workers sharing <duet_home>/state saw each other's
# running instances: `duet run`'s reset warned about the other worker's state folders).
# pytest-xdist's controller loads this file too, before it starts the workers, and they inherit
# its environment: a folder made here is this process' own only if ``_OWNER`` names it (a value
# the user set, without ``_OWNER``, is kept).
_OWNER = "DUET_TEST_FOLDERS_PID"
_inherited = os.environ.get(_OWNER) not in (None, str(os.getpid()))
for _name, _prefix in (("DAGSTER_HOME", "duet-test-dagster-"), ("DUET_STATE_DIR", "duet-test-state-")):
    if _name not in os.environ or _inherited:
        os.environ[_name] = tempfile.mkdtemp(prefix=_prefix)
        os.environ[_OWNER] = str(os.getpid())
        atexit.register(shutil.rmtree, os.environ[_name], True)
#: JVM option of the session's driver: full tiered compilation, as HotSpot's default.
SESSION_DRIVER_JIT = "-XX:TieredStopAtLevel=4"

_counter = itertools.count()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers: ``$KAFKA_BOOTSTRAP_SERVERS`` when set, else ONE embedded broker
    started for the whole session (on first use) and stopped at its end."""
    from speed_layer.admin import kafka_cluster

    with kafka_cluster() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """ONE SparkSession with Delta for the whole session (``batch_layer.spark.get_spark``,
    started on first use, ~8 s), shared by every Spark test; stopped at the end."""
    from batch_layer.spark import get_spark, stop_spark

    session = get_spark("duet-tests", conf={"spark.driver.extraJavaOptions": SESSION_DRIVER_JIT})
    yield session
    stop_spark()


@pytest.fixture(scope="session")
def object_store() -> Iterator[object]:
    """ONE local S3-compatible object store (SeaweedFS, ``pipelines.lake.objectstore``) for
    the whole session, started on first use (~5 s) with bucket ``duet``; stopped at its end."""
    from pipelines.lake.objectstore import object_store as start

    with start() as store:
        yield store


@pytest.fixture(scope="session")
def equivalence_kit() -> object:
    """``tests/test_equivalence/equivalence_kit.py`` (the speed-vs-batch helpers) as ONE module
    object, ``equivalence_kit``, the name that folder's tests import it by: other folders
    cannot import it as ``test_equivalence.equivalence_kit``, since ``test_equivalence`` is
    also the name of a test module there."""
    return _kit("test_equivalence", "equivalence_kit")


def _kit(folder: str, name: str) -> ModuleType:
    """``tests/<folder>/<name>.py`` as ONE module object named ``name`` (the name its own
    folder's tests import it by), loaded on first use."""
    import importlib.util
    from pathlib import Path

    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).parent / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
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
    """One headless Chromium for the whole session (``browser_kit.chromium``: Debian's
    ``chromium`` + ``chromium-driver``, installed by ``make setup``, driven by Selenium); 1400x900 px."""
    with _kit("test_serving", "browser_kit").chromium() as driver:
        yield driver


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest test files first (``tests/file_durations.json``, measured seconds per file;
    files not in it after, in collection order), so pytest-xdist's ``--dist loadfile`` hands
    them out first and short files fill both workers at the end. A file's own order is kept."""
    from file_durations import load

    seconds = load()
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-seconds.get(_relative(config, item), 0.0), position[id(item)]))


def _relative(config: pytest.Config, item: pytest.Item) -> str:
    return item.path.relative_to(config.rootpath).as_posix()
