"""``OffsetCommits`` (the at-least-once commit in flight, ``speed_layer.runtime.offset_commits``)
and ``run_bounded`` without a broker: the consumer here is a stand-in that records the
commits; the broker-backed behaviour is in ``test_commit_timeout.py``."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from speed_layer.runtime.bounded_call import run_bounded
from speed_layer.runtime.offset_commits import COMMIT_GRACE_S, InFlightCommit, OffsetCommits


class _Recorder:
    def __init__(self, error: KafkaError | None = None) -> None:
        self.calls: list[tuple[list[TopicPartition], bool]] = []
        self.error = error

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.calls.append((offsets, asynchronous))
        if self.error is not None:
            raise KafkaException(self.error)


def _commit(sent: float | None = None) -> InFlightCommit:
    return InFlightCommit({("in", 0): 5}, frozenset({"0_0"}), frozenset(), {}, time.monotonic() if sent is None else sent)


def test_one_commit_in_flight_its_result_comes_from_the_callback() -> None:
    commits, consumer = OffsetCommits("t-1", 1000), _Recorder()
    assert commits.bound_s == pytest.approx(1 + COMMIT_GRACE_S)
    commits.send(consumer, [TopicPartition("in", 0, 5)], _commit())
    assert consumer.calls[0][1] is True  # asynchronous: nothing blocks the thread
    assert commits.in_flight() and commits.returned() is None
    with pytest.raises(AssertionError):
        commits.send(consumer, [TopicPartition("in", 0, 6)], _commit())  # never two in flight
    commits.on_commit(None, [TopicPartition("in", 0, 5)])
    done = commits.returned()
    assert done is not None and done.error is None and done.offsets == {("in", 0): 5}
    assert commits.pending is None and not commits.in_flight()


def test_a_partition_error_is_the_result() -> None:
    commits = OffsetCommits("t-1", 1000)
    commits.send(_Recorder(), [TopicPartition("in", 0, 5)], _commit())
    # (a TopicPartition's error is read-only: a stand-in with the attributes read)
    tp = SimpleNamespace(topic="in", partition=0, offset=5, error=KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
    commits.on_commit(None, [tp])  # type: ignore[list-item]
    done = commits.returned()
    assert done is not None and done.error is not None and done.error.code() == KafkaError.REBALANCE_IN_PROGRESS


def test_an_error_raised_at_once_is_kept_as_the_result() -> None:
    commits = OffsetCommits("t-1", 1000)
    commits.send(_Recorder(KafkaError(KafkaError._STATE)), [TopicPartition("in", 0, 5)], _commit())
    done = commits.returned()
    assert done is not None and done.error is not None and done.error.code() == KafkaError._STATE


def test_an_overdue_commit_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    commits = OffsetCommits("t-1", 0)
    commits.send(_Recorder(), [TopicPartition("in", 0, 5)], _commit(sent=time.monotonic() - COMMIT_GRACE_S - 0.1))
    assert commits.overdue()
    commits.warn_if_overdue()
    commits.warn_if_overdue()
    warnings = [r.getMessage() for r in caplog.records if "has not returned" in r.getMessage()]
    assert len(warnings) == 1 and "t-1" in warnings[0] and "in-0@5" in warnings[0]


def test_run_bounded_stops_waiting_after_the_bound() -> None:
    release = threading.Event()
    t0 = time.monotonic()
    assert run_bounded("stuck", release.wait, 0.2) == (False, None)
    assert time.monotonic() - t0 < 1.0
    release.set()
    assert run_bounded("quick", lambda: None, 1.0) == (True, None)
    returned, error = run_bounded("failing", lambda: 1 / 0, 1.0)
    assert returned and isinstance(error, ZeroDivisionError)
