"""Load a pipeline's sample data into Kafka: its tables first, then its events in arrival order
(in one pass over them, whatever their topics: a lazy sample, such as N copies of the flights,
is produced as it is generated, never held in memory).

Topics are created as the pipeline declares them (:func:`pipelines.produce.topics.source_topic_specs`).
Every record is produced with the Java client's default partitioner (``murmur2_random``), its
key as UTF-8, its value as compact JSON (``bytes`` values as they are) and its timestamp (UTC
ms) as the record's CreateTime.

Loading is not deduplicated: running it twice produces every record twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from confluent_kafka import KafkaError, Message, Producer

from pipelines.declaration.pipeline import Pipeline, Sample, SourceRecord
from speed_layer.admin import client_config, ensure_topics

__all__ = ["load", "produce_tables", "produce_records", "produce_events", "encode_value", "source_producer", "LoadError", "PRODUCER_CONFIG"]

#: Callback ``progress(topic, records_done, records_total)`` (``None``: the total is unknown).
Progress = Callable[[str, int, int | None], None]

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


@contextmanager
def source_producer(bootstrap: str, overrides: Mapping[str, str | int | bool] | None = None) -> Iterator[Producer]:
    """A producer of source data (:data:`PRODUCER_CONFIG` updated with ``overrides``),
    closed on exit, as the Java client's ``Producer#close``: its librdkafka threads and
    broker connections end with the block, not when the garbage collector frees it (later,
    when a caller's frame is in a reference cycle, e.g. held by a caught exception's
    traceback). On an exception the records still queued are purged first, so that
    ``close()`` (which flushes) does not wait for a broker that failed."""
    producer = Producer(client_config(bootstrap, {**PRODUCER_CONFIG, **(overrides or {})}))
    try:
        yield producer
    except BaseException:
        producer.purge()
        raise
    finally:
        producer.close()


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
    total: int | None,
    progress: Progress | None = None,
) -> int:
    """Produce ``records`` to ``topic``, flush, and raise :class:`LoadError` on any delivery
    error; returns the number of records delivered. ``progress(topic, done, total)`` now
    and then, and once at the end."""
    counts = produce_events(producer, ((topic, r) for r in records), progress, totals={topic: total})
    return counts.get(topic, 0)


def produce_events(
    producer: Producer,
    events: Iterable[tuple[str, SourceRecord]],
    progress: Progress | None = None,
    *,
    totals: Mapping[str, int | None] | None = None,
    prefix: str = "",
) -> dict[str, int]:
    """Produce ``events`` (``(topic, record)``, in order; ``prefix`` before every topic name)
    in one pass, read once (a generator is never held in memory), flush, and raise
    :class:`LoadError` on any delivery error. Returns ``{topic: records delivered}`` in the
    order the topics first came (keys without the prefix). ``progress(topic, done, total)``
    (the topic as produced, prefixed) is called every 20,000 records with that topic's count
    and its total in ``totals`` (``None``: unknown), and once per topic at the end (``total``
    = ``done``; every topic of ``totals`` is reported, with 0 if it had no record).
    """
    errors: list[KafkaError] = []
    delivered = 0
    sent: dict[str, int] = dict.fromkeys(totals or (), 0)
    names: dict[str, str] = {}

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1

    produce = producer.produce
    n = 0
    for topic, rec in events:
        name = names.get(topic)
        if name is None:
            name = names[topic] = prefix + topic
            sent.setdefault(topic, 0)
        key = rec.key.encode() if rec.key is not None else None
        value = encode_value(rec.value)
        while True:
            try:
                produce(name, value=value, key=key, timestamp=rec.timestamp, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.05)
        sent[topic] += 1
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
            if errors:
                break
            if progress is not None and n % _PROGRESS_EVERY == 0:
                progress(name, sent[topic], (totals or {}).get(topic))
    remaining = producer.flush(120)
    where = ", ".join(prefix + t for t in sent) or "no topic"
    if errors:
        raise LoadError(f"{len(errors)} records to {where} failed, first: {errors[0]}")
    if remaining:
        raise LoadError(f"{remaining} records to {where} still undelivered after flush")
    if delivered != n:
        raise LoadError(f"{where}: {n} records sent but {delivered} delivered")
    if progress is not None:
        for topic, count in sent.items():
            progress(names.get(topic, prefix + topic), count, count)
    return sent


def load(
    pipeline: Pipeline,
    bootstrap: str,
    limit: int | None = None,
    progress: Progress | None = None,
    *,
    prefix: str = "",
    scale: int = 1,
) -> dict[str, int]:
    """Create the pipeline's topics if needed and produce its sample data into them.

    Tables first (in the order declared by the sample), then the first ``limit`` events (all
    when ``None``) in arrival order, in one pass (:func:`produce_events`: a lazy sample is
    never held in memory). ``scale`` > 1: ``scale`` copies of the sample, each cut to
    ``limit`` events (:meth:`Pipeline.sample_data`). ``progress`` is called as
    ``progress(topic, done, total)`` now and then and once at the end of each topic
    (``total`` ``None``: unknown yet). ``prefix`` is put before every topic name (tests use it
    to isolate runs). Returns ``{topic: records produced}`` (keys without the prefix).

    Raises:
        PipelineError: the pipeline declares no sample data (or no ``sample_copy`` and
            ``scale`` > 1).
        LoadError: a record was not delivered.
    """
    sample = pipeline.sample_data(limit, scale)
    counts = produce_tables(pipeline, bootstrap, sample, progress, prefix=prefix)
    with source_producer(bootstrap) as producer:
        totals = _event_totals(sample)
        for topic, n in produce_events(producer, sample.events, progress, totals=totals, prefix=prefix).items():
            counts[topic] = counts.get(topic, 0) + n
    return counts


def produce_tables(
    pipeline: Pipeline,
    bootstrap: str,
    sample: Sample,
    progress: Progress | None = None,
    *,
    prefix: str = "",
) -> dict[str, int]:
    """Create the pipeline's topics if needed (all of them: the events' too) and produce
    ``sample``'s tables into them, in the order the sample declares them, each flushed before
    the next. ``progress`` and ``prefix`` as in :func:`load`. Returns ``{table: records}``
    (keys without the prefix). A live replay (:mod:`pipelines.produce.replay`) produces the tables
    this way before the speed layer starts, then feeds the events at its pace.

    Raises:
        LoadError: a record was not delivered.
    """
    from pipelines.produce.topics import source_topic_specs

    ensure_topics(bootstrap, source_topic_specs(pipeline, prefix))
    with source_producer(bootstrap) as producer:
        return {table: produce_records(producer, prefix + table, records, len(records), progress)
                for table, records in sample.tables.items()}


def _event_totals(sample: Sample) -> dict[str, int | None] | None:
    """``{topic: events}`` of a sample whose events are a sequence; ``None`` (unknown) for
    lazy events (counting them would read them)."""
    if isinstance(sample.events, Sequence):
        totals: dict[str, int | None] = {}
        for topic, _ in sample.events:
            totals[topic] = (totals.get(topic) or 0) + 1
        return totals
    return None
