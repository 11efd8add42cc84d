"""Load a pipeline's sample data into Kafka: its tables first, then its events in arrival order.

Topics are created as the pipeline declares them (:func:`pipelines.steps.source_topic_specs`).
Every record is produced with the Java client's default partitioner (``murmur2_random``), its
key as UTF-8, its value as compact JSON (``bytes`` values as they are) and its timestamp (UTC
ms) as the record's CreateTime.

Loading is not deduplicated: running it twice produces every record twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, Message, Producer

from pipelines.pipeline import Pipeline, SourceRecord
from speed_layer.runtime.admin import ensure_topics

__all__ = ["load", "produce_records", "encode_value", "LoadError", "PRODUCER_CONFIG"]

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


def encode_value(value: object) -> bytes | None:
    """A record value as produced: ``bytes`` as they are, ``None`` (a tombstone) as null,
    anything else as compact JSON (UTF-8)."""
    if value is None or isinstance(value, bytes):
        return value
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
        key = rec.key.encode() if rec.key is not None else None
        value = encode_value(rec.value)
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
    pipeline: Pipeline,
    bootstrap: str,
    limit: int | None = None,
    progress: Progress | None = None,
    *,
    prefix: str = "",
) -> dict[str, int]:
    """Create the pipeline's topics if needed and produce its sample data into them.

    Tables first (in the order declared by the sample), then the first ``limit`` events (all
    when ``None``) in arrival order, each topic's records in one pass. ``progress`` is called
    as ``progress(topic, done, total)`` now and then and once at the end of each topic.
    ``prefix`` is put before every topic name (tests use it to isolate runs). Returns
    ``{topic: records produced}`` (keys without the prefix).

    Raises:
        PipelineError: the pipeline declares no sample data.
        LoadError: a record was not delivered.
    """
    from pipelines.steps import source_topic_specs

    sample = pipeline.sample_data(limit)
    ensure_topics(bootstrap, source_topic_specs(pipeline, prefix))
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    counts: dict[str, int] = {}
    for table, records in sample.tables.items():
        counts[table] = produce_records(producer, prefix + table, records, len(records), progress)
    by_topic: dict[str, list[SourceRecord]] = {}
    for topic, rec in sample.events:
        by_topic.setdefault(topic, []).append(rec)
    for topic, records in by_topic.items():
        counts[topic] = counts.get(topic, 0) + produce_records(producer, prefix + topic, records, len(records),
                                                               progress)
    return counts
