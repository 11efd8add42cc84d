"""Archive Kafka topics into Delta tables ``<lake>/raw/<topic>``, idempotently by offset range.

One row per Kafka record (docs/contracts.md)::

    key binary, value binary, timestamp long (ms since epoch, UTC), partition int, offset long,
    headers array<struct<key: string, value: binary>>

A run reads the largest archived offset of every partition from the table (delta-rs, no JVM),
takes each partition's high watermark once at the start, and consumes ``[max archived + 1,
high watermark)`` with explicit assignments (no consumer-group commits). The new records are
appended in one Delta commit per ~256 MiB, each commit extending every partition by a
contiguous range, so a run that fails half-way is simply resumed by the next one. A run with
nothing new commits nothing. Runs on the same table are serialised by an ``flock`` on the
table folder (one machine).

The lake may be a URI (``file:///data/lake``, ``s3a://bucket/lake``): the tables are then
written by delta-rs (credentials from the environment) or Spark at that URI. On a URI other
than ``file:`` there is no folder to lock: run one ingest per table at a time.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pyarrow as pa

from batch_layer.delta.io import local_path, read_arrow, table_exists
from batch_layer.delta.layout import LakeLayout
from batch_layer.delta.storage import delta_uri, spark_uri, storage_options
from batch_layer.errors import BatchLayerError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RAW_SCHEMA", "IngestResult", "archived_offsets", "ingest_topic", "ingest_topics", "raw_table_path"]

log = logging.getLogger(__name__)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
RAW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", pa.int64()),  # ms since epoch; null if the record has none
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("headers", pa.list_(HEADER_TYPE)),  # [] when the record has no headers
    ]
)

_BATCH = 10_000  # messages per consume() call
_POLL_S = 0.1  # consume() waits this long unless _BATCH messages arrive first
_FLUSH_BYTES = 256 << 20  # commit when the buffered keys+values reach this size


@dataclass(frozen=True)
class IngestResult:
    """What one run added: ``offset_ranges[partition] = (first, last)`` offsets, inclusive,
    only for partitions that got records."""

    topic: str
    records_added: int
    offset_ranges: dict[int, tuple[int, int]] = field(default_factory=dict)


def raw_table_path(lake: str | Path, topic: str) -> Path | str:
    """``<lake>/raw/<topic>``: a ``Path`` for a local lake, a ``str`` for a lake URI."""
    return LakeLayout(lake).raw_table(topic)


def ingest_topic(
    spark: SparkSession | None,
    bootstrap: str,
    topic: str,
    lake: str | Path,
    *,
    max_records: int | None = None,
    writer: Literal["deltalake", "spark"] = "deltalake",
    idle_timeout_s: float = 30.0,
    commit_bytes: int = _FLUSH_BYTES,
) -> IngestResult:
    """Append the records of ``topic`` not yet archived to ``<lake>/raw/<topic>``.

    ``max_records`` caps the records added by this run (each partition still gets a contiguous
    range, so the next run continues where this one stopped). ``writer="deltalake"`` (default)
    writes with delta-rs and does not need ``spark``; ``writer="spark"`` appends through
    ``spark``. Raises `BatchLayerError` if the topic does not exist or the broker stops
    answering for ``idle_timeout_s`` seconds (nothing of the run is committed then, except
    earlier chunks). ``commit_bytes`` (default 256 MiB): a Delta commit each time the buffered
    keys and values reach this size; a run killed between two commits keeps the earlier ones
    and the next run continues after them.
    """
    from confluent_kafka import Consumer

    from speed_layer.admin import reader_config

    if max_records is not None and max_records < 0:
        raise ValueError("max_records must be >= 0")
    if commit_bytes <= 0:
        raise ValueError(f"commit_bytes must be > 0, got {commit_bytes}")
    if writer == "spark" and spark is None:
        raise ValueError("writer='spark' needs a SparkSession")
    path = raw_table_path(lake, topic)
    t0 = time.monotonic()
    consumer = Consumer(
        reader_config(bootstrap, {
            "group.id": f"duet-ingest-{topic}",  # required by the client; never joined nor committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 128 << 10,
        })
    )
    try:
        partitions = _partitions(consumer, topic, idle_timeout_s)
        with _table_lock(path):
            archived = _max_offsets(path)
            ranges = _plan(consumer, topic, partitions, archived)
            result = _consume_and_write(
                consumer, spark, topic, path, ranges, max_records, writer, idle_timeout_s, commit_bytes
            )
    finally:
        consumer.close()
    log.info(
        "ingested %d records of %s into %s in %.1f s", result.records_added, topic, path, time.monotonic() - t0
    )
    return result


def ingest_topics(
    spark: SparkSession | None,
    bootstrap: str,
    topics: Iterable[str],
    lake: str | Path,
    *,
    max_records: int | None = None,
    writer: Literal["deltalake", "spark"] = "deltalake",
) -> list[IngestResult]:
    """`ingest_topic` for each topic, one after the other."""
    return [
        ingest_topic(spark, bootstrap, t, lake, max_records=max_records, writer=writer) for t in topics
    ]


# --------------------------------------------------------------------------------------- internals


def _partitions(consumer, topic: str, timeout_s: float) -> list[int]:  # noqa: ANN001 - confluent_kafka.Consumer
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
    except Exception as e:  # KafkaException: broker unreachable
        raise BatchLayerError(f"cannot read the metadata of topic {topic!r}: {e}") from e
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        why = tmd.error if tmd is not None and tmd.error is not None else "no partitions"
        raise BatchLayerError(f"topic {topic!r} is not available on the broker ({why})")
    return sorted(tmd.partitions)


@contextmanager
def _table_lock(path: str | Path) -> Iterator[None]:
    """Serialise ingest runs of one table on this machine (flock on the table folder); no
    lock for a table on a remote file system (object storage, HDFS)."""
    local = local_path(path)
    if local is None:
        yield
        return
    local.mkdir(parents=True, exist_ok=True)
    fd = os.open(local, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def archived_offsets(lake: str | Path, topic: str) -> dict[int, int]:
    """``{partition: largest archived offset}`` of ``<lake>/raw/<topic>`` (``{}`` when the
    table does not exist yet). Read with delta-rs, no JVM."""
    return _max_offsets(raw_table_path(lake, topic))


def _max_offsets(path: str | Path) -> dict[int, int]:
    """Largest archived offset per partition (only the two int columns are read)."""
    if not table_exists(path):
        return {}
    t = read_arrow(path, columns=["partition", "offset"])
    if t.num_rows == 0:
        return {}
    agg = t.group_by("partition").aggregate([("offset", "max")])
    return dict(zip(agg["partition"].to_pylist(), agg["offset_max"].to_pylist(), strict=True))


def _plan(consumer, topic: str, partitions: list[int], archived: dict[int, int]) -> dict[int, tuple[int, int]]:  # noqa: ANN001
    """``{partition: (start, end)}``: offsets to read, end exclusive (high watermark now)."""
    from confluent_kafka import TopicPartition

    plan: dict[int, tuple[int, int]] = {}
    for p in partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
        start = max(archived.get(p, -1) + 1, low)
        if start < high:
            plan[p] = (start, high)
    return plan


def _consume_and_write(
    consumer,  # noqa: ANN001
    spark: SparkSession | None,
    topic: str,
    path: str | Path,
    plan: dict[int, tuple[int, int]],
    max_records: int | None,
    writer: str,
    idle_timeout_s: float,
    commit_bytes: int = _FLUSH_BYTES,
) -> IngestResult:
    from confluent_kafka import KafkaError, TopicPartition

    eof_code = KafkaError._PARTITION_EOF
    budget = max_records if max_records is not None else float("inf")
    ranges: dict[int, tuple[int, int]] = {}
    added = 0
    if plan and budget > 0:
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in plan.items()])
    pending = {p for p in plan} if budget > 0 else set()
    ends = {p: end for p, (_, end) in plan.items()}

    cols: dict[str, list] = {n: [] for n in RAW_SCHEMA.names}
    keys, values, tss, parts, offs, hdrs = (cols[n] for n in RAW_SCHEMA.names)
    buffered_bytes = 0
    last_progress = time.monotonic()

    def flush() -> None:
        nonlocal buffered_bytes, added
        n = len(offs)
        if n == 0:
            return
        table = pa.Table.from_pydict(cols, schema=RAW_SCHEMA)
        table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
        _append(spark, path, table, writer)
        for p, lo, hi in _ranges_of(table):
            prev = ranges.get(p)
            ranges[p] = (prev[0] if prev else lo, hi)
        added += n
        for v in cols.values():
            v.clear()
        buffered_bytes = 0

    while pending and budget > 0:
        msgs = consumer.consume(num_messages=_BATCH, timeout=_POLL_S)
        if not msgs:
            if time.monotonic() - last_progress > idle_timeout_s:
                raise BatchLayerError(
                    f"ingest of {topic!r}: no record for {idle_timeout_s:.0f} s while partitions "
                    f"{sorted(pending)} are still below their high watermarks {ends}"
                )
            continue
        last_progress = time.monotonic()
        done: list[int] = []
        for m in msgs:
            p = m.partition()
            if p not in pending:
                continue
            err = m.error()
            if err is not None:
                if err.code() == eof_code:  # end of what is readable now (>= start high, or the LSO)
                    pending.discard(p)
                    done.append(p)
                    continue
                raise BatchLayerError(f"ingest of {topic!r} partition {p}: {err}")
            off = m.offset()
            if off >= ends[p]:
                pending.discard(p)
                done.append(p)
                continue
            k, v = m.key(), m.value()
            keys.append(k)
            values.append(v)
            ts_type, ts = m.timestamp()
            tss.append(ts if ts_type else None)  # TIMESTAMP_NOT_AVAILABLE == 0
            parts.append(p)
            offs.append(off)
            h = m.headers()
            hdrs.append([{"key": hk, "value": hv} for hk, hv in h] if h else [])
            buffered_bytes += (len(k) if k else 0) + (len(v) if v else 0)
            budget -= 1
            if off >= ends[p] - 1:
                pending.discard(p)
                done.append(p)
            if budget <= 0:
                break
        if done:
            consumer.pause([TopicPartition(topic, p) for p in done])
        if buffered_bytes >= commit_bytes:
            flush()
    flush()
    if added == 0 and not table_exists(path):
        _append(spark, path, RAW_SCHEMA.empty_table(), writer)  # readers find an (empty) table
    return IngestResult(topic=topic, records_added=added, offset_ranges=dict(sorted(ranges.items())))


def _ranges_of(table: pa.Table) -> list[tuple[int, int, int]]:
    agg = table.group_by("partition").aggregate([("offset", "min"), ("offset", "max")])
    return sorted(
        zip(agg["partition"].to_pylist(), agg["offset_min"].to_pylist(), agg["offset_max"].to_pylist(), strict=True)
    )


def _append(spark: SparkSession | None, path: str | Path, table: pa.Table, writer: str) -> None:
    """Append ``table`` (RAW_SCHEMA) to the Delta table at ``path``, creating it if needed."""
    if writer == "spark":
        assert spark is not None
        df = spark.createDataFrame(table)
        df.write.format("delta").mode("append").save(spark_uri(path))
        return
    from deltalake import write_deltalake

    write_deltalake(delta_uri(path), table, mode="append", storage_options=storage_options(path))

