"""Fixtures of the batch-layer tests: Kafka topic helpers (``spark``, the session's one SparkSession, is in
``tests/conftest.py``).

``kafka_bootstrap`` (a real broker, started once per session) comes from ``tests/conftest.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Produced:
    """One record as the broker acknowledged it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # ms
    headers: list[tuple[str, bytes | None]]


@pytest.fixture()
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Create a fresh topic (unique name) and return its name: ``new_topic(partitions=3)``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created: list[str] = []

    def make(partitions: int = 3, prefix: str = "ingest") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config={"retention.ms": "-1"})],
            operation_timeout=30,
        )
        for f in futures.values():
            f.result(timeout=30)
        created.append(name)
        return name

    yield make
    if created:
        for f in admin.delete_topics(created, operation_timeout=30).values():
            try:
                f.result(timeout=30)
            except Exception:  # best effort clean-up
                pass


@pytest.fixture()
def produce(kafka_bootstrap: str) -> Callable[..., list[Produced]]:
    """``produce(topic, records)`` with records ``(partition|None, key, value, ts_ms, headers)``;
    returns what the broker acknowledged, in send order."""
    from confluent_kafka import Producer

    def send(topic: str, records: Sequence[tuple]) -> list[Produced]:
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
        acked: list[Produced | None] = [None] * len(records)
        errors: list[str] = []

        def on_delivery(i: int, headers: list) -> Callable:
            def cb(err, msg) -> None:  # noqa: ANN001
                if err is not None:
                    errors.append(str(err))
                    return
                _, ts = msg.timestamp()
                acked[i] = Produced(msg.partition(), msg.offset(), msg.key(), msg.value(), ts, headers)

            return cb

        for i, (partition, key, value, ts, headers) in enumerate(records):
            kwargs = {"partition": partition} if partition is not None else {}
            producer.produce(
                topic, key=key, value=value, timestamp=ts, headers=headers or None,
                on_delivery=on_delivery(i, list(headers or [])), **kwargs,
            )
        assert producer.flush(30) == 0
        producer.close()
        assert not errors, errors
        return [a for a in acked if a is not None]

    return send
