"""The at-least-once offset commit never blocks the stream thread (Kafka Streams'
``TaskManager#commit``: ``commitSync`` waits at most ``default.api.timeout.ms``, then the
offsets are committed at a later commit).

The broker is the test's own (the session broker is left alone) and is paused (SIGSTOP:
it keeps its sockets and answers nothing) while the thread commits. librdkafka's
synchronous commit then waits until the broker answers again (or forever: librdkafka issue
#3740), and confluent-kafka blocks every other call of the consumer meanwhile; duet's
commit is sent asynchronously and picked up later (``speed_layer.runtime.offset_commits``).
Checked: the thread keeps looping while the commit is in flight, reports it past
``default.api.timeout.ms`` + ``COMMIT_GRACE_S`` (WARNING naming the thread and the
partitions), does not count the offsets as committed until it returns, defers a later
commit while it is in flight, commits the offsets once the broker is back, loses no record; and ``close()`` with the broker paused and a commit
in flight returns within the bound instead of hanging.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from speed_layer import KafkaStreams, StreamsBuilder
from speed_layer.admin import TopicSpec, ensure_topics
from speed_layer.admin import EmbeddedKafka
from speed_layer.runtime.offset_commits import COMMIT_GRACE_S
from tests.test_infra.kafka_util import read_topic

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

API_TIMEOUT_MS = 1500
BOUND_S = API_TIMEOUT_MS / 1000 + COMMIT_GRACE_S


def _produce(bootstrap: str, topic: str, keys: range) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    for k in keys:
        p.produce(topic, key=str(k).encode(), value=json.dumps(k).encode())
    assert p.flush(30) == 0


def _read_values(bootstrap: str, topic: str) -> list[int]:
    return [json.loads(m.value()) for m in read_topic(bootstrap, topic)]


def _group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        c.close()


def _wait(cond, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_commit_the_broker_does_not_answer_never_blocks_the_thread_nor_close(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="speed_layer.thread")
    with EmbeddedKafka(tmp_path / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        app, src, out = "commit-timeout", "commit-timeout-in", "commit-timeout-out"
        ensure_topics(bootstrap, [TopicSpec(src, 2, {"retention.ms": "-1"}), TopicSpec(out, 2, {"retention.ms": "-1"})])
        builder = StreamsBuilder()
        builder.stream(src).map_values(lambda v: v).to(out)
        streams = KafkaStreams(builder.build(), {
            "application.id": app, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path / "state"),
            # no interval commit during the test: the commit is asked for explicitly
            "commit.interval.ms": 600_000, "default.api.timeout.ms": API_TIMEOUT_MS,
            "session.timeout.ms": 30_000, "poll.ms": 50,
        })
        streams.start()
        try:
            _produce(bootstrap, src, range(100))
            assert streams.wait_until_caught_up(60), streams.errors
            time.sleep(0.5)  # a commit the waiter asked for last is made now, caught up
            _produce(bootstrap, src, range(100, 200))
            _wait(lambda: len(_read_values(bootstrap, out)) >= 200, 30, "the outputs of the second batch")
            (thread,) = streams._threads
            committed_before = dict(thread.committed)
            assert sum(committed_before.values()) == 100

            # 1. the broker paused while the thread commits the second batch
            broker.pause()
            paused_at = time.monotonic()
            try:
                thread.request_commit_when_caught_up()
                time.sleep(0.5)
                polls = thread.poll_total
                time.sleep(BOUND_S + 0.5)
                polls_while_paused = thread.poll_total - polls
                warned = [r for r in caplog.records if r.levelno == logging.WARNING and "has not returned" in r.getMessage()]
                thread.request_commit_when_caught_up()  # a later commit waits for the one in flight
                time.sleep(0.5)
                deferred = [r for r in caplog.records if "deferred: the commit of" in r.getMessage()]
                committed_while_paused = dict(thread.committed)
            finally:
                broker.resume()
            print(f"polls in the {BOUND_S + 0.5:.1f} s of the pause: {polls_while_paused}")
            assert polls_while_paused > 10, "the stream thread stopped looping while its commit waited for the broker"
            assert committed_while_paused == committed_before, "offsets counted as committed without an answer"
            assert warned and thread.name in warned[0].getMessage() and f"{src}-0@" in warned[0].getMessage(), \
                [r.getMessage() for r in caplog.records]
            assert deferred, [r.getMessage() for r in caplog.records]

            # 2. the broker back: the offsets get committed, nothing lost
            _wait(lambda: sum(thread.committed.values()) == 200, 30, "the deferred commit")
            print(f"committed {time.monotonic() - paused_at:.1f} s after the pause began")
            assert sum(_group_offsets(bootstrap, app, src, 2).values()) == 200
            values = _read_values(bootstrap, out)
            assert set(values) == set(range(200)), "records lost"
            print(f"outputs: {len(values)} for 200 inputs")

            # 3. close() with the broker paused and a commit in flight returns within the bound
            _produce(bootstrap, src, range(200, 250))
            _wait(lambda: len(_read_values(bootstrap, out)) >= len(values) + 50, 30, "the outputs of the third batch")
            broker.pause()
            try:
                thread.request_commit_when_caught_up()
                _wait(lambda: thread._commits.in_flight(), 5, "a commit in flight")
                closed: list[float] = []
                t0 = time.monotonic()
                closer = threading.Thread(target=lambda: (streams.close(), closed.append(time.monotonic() - t0)), daemon=True)
                closer.start()
                closer.join(BOUND_S + 12)
            finally:
                broker.resume()
            print(f"close() with the broker paused took {closed[0] if closed else None} s (bound {BOUND_S:.1f} s per wait)")
            assert closed, "close() hung while the broker did not answer"
            assert closed[0] < 2 * BOUND_S + 2  # the commit in flight, then the consumer's close()
            assert any("did not close within" in r.getMessage() for r in caplog.records)
            assert streams.state == "NOT_RUNNING"
        finally:
            streams.close(30)
