"""Session-wide test setup: one Kafka broker for the whole session, unique names.

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


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A prefix unique to this test, usable in topic names and application ids
    (``[a-z0-9-]``), e.g. ``f"{unique_name}-input"``."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return f"t-{base}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
