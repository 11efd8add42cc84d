"""What a retried broker call and librdkafka's notices of a transient broker state log
(issue 44, a quiet happy path): retries that succeed within a few seconds are DEBUG; a call
still failing after ``WARN_AFTER_MS`` logs one WARNING naming what it awaits and the last
error (Kafka's clients, too, log a retriable error at DEBUG and retry). librdkafka's own
``... Coordinator load in progress: retrying`` notices (logged at WARNING by librdkafka) are
DEBUG on the ``speed_layer.kafka`` logger while they last less than that, then one WARNING.
"""
from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from speed_layer.runtime import task_timeout
from speed_layer.runtime.client_log import CLIENT_LOGGER, TransientNotices
from speed_layer.runtime.task_timeout import TaskTimeout, retry_broker_call

GETPID = ("GETPID [rdkafka#producer-7] [thrd:main]: Failed to acquire idempotence PID from broker "
          "127.0.0.1:56533/1: Broker: Coordinator load in progress: retrying")


def _failing(times: int) -> Any:
    calls = {"n": 0}

    def attempt(_request_s: float) -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
        return "ok"

    return attempt


def _records(caplog: pytest.LogCaptureFixture, name: str) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == name]


def test_retries_that_succeed_are_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="speed_layer.timeouts"):
        assert retry_broker_call("creating topics ['t']", _failing(3), TaskTimeout(10_000, 10, 1000)) == "ok"
    logged = _records(caplog, "speed_layer.timeouts")
    assert [level for level, _ in logged] == [logging.DEBUG] * 3, logged


def test_a_call_still_failing_after_warn_after_ms_warns_once_naming_what(caplog: pytest.LogCaptureFixture,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_timeout, "WARN_AFTER_MS", 100)
    with caplog.at_level(logging.DEBUG, logger="speed_layer.timeouts"):
        assert retry_broker_call("creating topics ['t']", _failing(30), TaskTimeout(10_000, 10, 1000)) == "ok"
    warnings = [m for level, m in _records(caplog, "speed_layer.timeouts") if level == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("creating topics ['t']: still not done after ")
    assert "LEADER_NOT_AVAILABLE" in warnings[0] and "task.timeout.ms left" in warnings[0]


@pytest.fixture
def client_level() -> Any:
    """Sets the ``speed_layer.kafka`` logger's level (``setLevel``: the loggers' caches are
    cleared), restored after the test."""
    before = CLIENT_LOGGER.level
    yield CLIENT_LOGGER.setLevel
    CLIENT_LOGGER.setLevel(before)


def _notice(message: str, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord(CLIENT_LOGGER.name, level, __file__, 1, "%s", (message,), None)


def test_librdkafkas_transient_notice_is_debug_then_one_warning(monkeypatch: pytest.MonkeyPatch,
                                                                 client_level: Any) -> None:
    clock = [100.0]
    monkeypatch.setattr("speed_layer.runtime.client_log.time.monotonic", lambda: clock[0])
    notices = TransientNotices()
    client_level(logging.DEBUG)
    first = _notice(GETPID)
    assert notices.filter(first) and first.levelno == logging.DEBUG
    clock[0] += task_timeout.WARN_AFTER_MS / 1000 + 0.5
    late = _notice(GETPID)
    assert notices.filter(late) and late.levelno == logging.WARNING
    assert late.getMessage() == GETPID + " (still failing after 5.5 s)"
    clock[0] += 1
    again = _notice(GETPID)
    assert notices.filter(again) and again.levelno == logging.DEBUG  # warned once
    clock[0] += 60  # quiet for a minute: a new episode starts as DEBUG
    fresh = _notice(GETPID)
    assert notices.filter(fresh) and fresh.levelno == logging.DEBUG


def test_the_notice_is_dropped_when_debug_is_off_and_other_warnings_pass(client_level: Any) -> None:
    notices = TransientNotices()
    client_level(logging.WARNING)
    assert not notices.filter(_notice(GETPID))
    other = _notice("FAIL [rdkafka#producer-1] [thrd:x]: 127.0.0.1:9/1: Connect to ipv4#127.0.0.1:9 failed: "
                    "Connection refused")
    assert notices.filter(other) and other.levelno == logging.WARNING
    error = _notice(GETPID, logging.ERROR)
    assert notices.filter(error) and error.levelno == logging.ERROR


def test_the_filter_is_on_the_client_logger() -> None:
    assert any(isinstance(f, TransientNotices) for f in CLIENT_LOGGER.filters)
