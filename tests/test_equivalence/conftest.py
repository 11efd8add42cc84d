"""Fixtures of the speed-vs-batch equivalence tests: one SparkSession (with Delta) for the
whole test session, shared with the other Spark tests (``batch_layer.spark.get_spark`` keeps
one session per process)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """The process-wide SparkSession (``batch_layer.spark.get_spark``); stopped at the end."""
    from batch_layer.spark import get_spark, stop_spark

    session = get_spark("duet-tests")
    yield session
    stop_spark()
