"""``CatchUpWaiter.end_offsets`` (``KafkaStreams.wait_until_caught_up``) across a broker
restart: a partition the probe's metadata lost (librdkafka's ``_UNKNOWN_PARTITION``, which
it answers from its cache) is read again after a metadata refresh until the caller's
deadline; past it the wait reports a timeout (None, then False) instead of raising; an
error Kafka does not retry is raised at once. The probe is a stand-in for the consumer:
the broker-level scenario is ``test_broker_outage.py``."""
from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from speed_layer.runtime.catch_up import CatchUpWaiter


class _Probe:
    """Answers ``get_watermark_offsets`` with ``error`` until ``list_topics`` was called
    ``refreshes_needed`` times."""

    def __init__(self, error: int, refreshes_needed: int) -> None:
        self.error, self.refreshes_needed = error, refreshes_needed
        self.refreshed: list[str] = []
        self.calls = 0

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        self.calls += 1
        assert 0 < timeout <= 10
        if len(self.refreshed) < self.refreshes_needed:
            raise KafkaException(KafkaError(self.error))
        return 0, 100 + tp.partition

    def list_topics(self, topic: str, timeout: float) -> None:
        self.refreshed.append(topic)


def _waiter() -> CatchUpWaiter:
    plan = SimpleNamespace(partitions={"in": 2})
    return CatchUpWaiter(SimpleNamespace(), plan, lambda: "RUNNING", lambda: [], lambda: None, lambda: None,  # type: ignore[arg-type]
                         logging.getLogger("test"))


def test_an_unknown_partition_is_read_again_after_a_metadata_refresh() -> None:
    probe = _Probe(KafkaError._UNKNOWN_PARTITION, refreshes_needed=3)
    ends = _waiter().end_offsets(probe, ["in"], time.monotonic() + 30)  # type: ignore[arg-type]
    assert ends == {("in", 0): 100, ("in", 1): 101}
    assert probe.refreshed == ["in"] * 3


def test_past_the_deadline_the_wait_times_out_instead_of_raising() -> None:
    probe = _Probe(KafkaError.LEADER_NOT_AVAILABLE, refreshes_needed=10**9)
    started = time.monotonic()
    assert _waiter().end_offsets(probe, ["in"], started + 0.5) is None  # type: ignore[arg-type]
    assert 0.5 <= time.monotonic() - started < 5
    assert probe.calls >= 2


def test_an_error_kafka_does_not_retry_is_raised() -> None:
    probe = _Probe(KafkaError.TOPIC_AUTHORIZATION_FAILED, refreshes_needed=1)
    with pytest.raises(KafkaException):
        _waiter().end_offsets(probe, ["in"], time.monotonic() + 30)  # type: ignore[arg-type]
    assert probe.calls == 1
