"""Fixtures of the speed layer's tests. Runtime fixtures are prefixed ``runtime_``."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass
class RuntimeKit:
    """Helpers for tests running :class:`speed_layer.KafkaStreams` on the session broker.

    Every client it creates is closed at the end of the test; every KafkaStreams made with
    :meth:`streams` too.
    """

    bootstrap: str
    prefix: str
    tmp: Path
    _streams: list[Any] = field(default_factory=list)

    def name(self, suffix: str) -> str:
        """A topic name / application id unique to this test."""
        return f"{self.prefix}-{suffix}"

    def topics(self, **partitions: int) -> dict[str, str]:
        """Create topics ``{short: partitions}`` (``retention.ms=-1``); returns short -> name."""
        from speed_layer.admin import TopicSpec, ensure_topics

        names = {k.replace("_", "-"): self.name(k.replace("_", "-")) for k in partitions}
        ensure_topics(self.bootstrap, [TopicSpec(names[k.replace("_", "-")], n, {"retention.ms": "-1"}) for k, n in partitions.items()])
        return names

    def produce(self, topic: str, records: list[tuple[Any, Any, int]], *, raw: bool = False) -> None:
        """Produce ``(key, value, timestamp_ms)`` (key/value as str and JSON unless ``raw``
        bytes) with the Java-compatible murmur2 partitioner, and wait for the acks."""
        import json

        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
        for k, v, ts in records:
            kb = k if raw or k is None else str(k).encode()
            vb = v if raw or v is None else json.dumps(v).encode()
            p.produce(topic, key=kb, value=vb, timestamp=ts)
        assert p.flush(30) == 0
        p.close()  # its threads and connections end now, not when the collector frees it

    def read(self, topic: str, *, read_committed: bool = False, timeout_s: float = 30) -> list[Any]:
        """Every record of ``topic`` up to its end offsets (messages, partition order)."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        from speed_layer.admin import end_offsets

        ends = end_offsets(self.bootstrap, topic, committed_only=read_committed)
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"reader-{uuid.uuid4().hex}", "enable.auto.commit": False,
                      "enable.partition.eof": True, "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
        try:
            c.assign([TopicPartition(topic, p, 0) for p in ends])
            done = {p for p, e in ends.items() if e == 0}
            out: list[Any] = []
            deadline = time.monotonic() + timeout_s
            while len(done) < len(ends):
                assert time.monotonic() < deadline, f"timed out reading {topic}"
                for m in c.consume(1000, 0.2):
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                            done.add(m.partition())
                        continue
                    out.append(m)
                    if m.offset() + 1 >= ends[m.partition()]:
                        done.add(m.partition())
            return out
        finally:
            c.close()

    def config(self, app: str, state: str = "state", **extra: Any) -> dict[str, Any]:
        """A fast test config: commit every 100 ms, short session timeout, own state dir."""
        cfg: dict[str, Any] = {
            "application.id": self.name(app),
            "bootstrap.servers": self.bootstrap,
            "commit.interval.ms": 100,
            "session.timeout.ms": 6000,
            "poll.ms": 50,
            "state.dir": str(self.tmp / state),
        }
        cfg.update(extra)
        return cfg

    def streams(self, topology: Any, config: dict[str, Any]) -> Any:
        """A KafkaStreams closed at teardown."""
        from speed_layer import KafkaStreams

        s = KafkaStreams(topology, config)
        self._streams.append(s)
        return s

    def run(self, topology: Any, config: dict[str, Any], timeout_s: float = 60) -> Any:
        """Start a KafkaStreams and wait until it consumed all input; returns it running."""
        s = self.streams(topology, config)
        s.start()
        assert s.wait_until_caught_up(timeout_s), f"not caught up: state={s.state} errors={s.errors} metrics={s.metrics()}"
        self.wait_state(s, "RUNNING", timeout_s)
        return s

    @staticmethod
    def wait_state(streams: Any, state: str, timeout_s: float = 30) -> None:
        """Wait until ``streams.state == state`` (e.g. RUNNING after a rebalance)."""
        deadline = time.monotonic() + timeout_s
        while streams.state != state:
            assert time.monotonic() < deadline, f"state {streams.state}, expected {state}; errors={streams.errors}"
            time.sleep(0.05)

    def close_all(self) -> None:
        for s in self._streams:
            s.close(30)


@pytest.fixture
def runtime_kit(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Iterator[RuntimeKit]:
    """A :class:`RuntimeKit` bound to the session broker and this test's names."""
    kit = RuntimeKit(kafka_bootstrap, unique_name, tmp_path)
    try:
        yield kit
    finally:
        kit.close_all()
