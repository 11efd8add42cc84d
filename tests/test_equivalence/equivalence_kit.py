"""Helpers of the speed-vs-batch equivalence tests.

* :func:`raw_tables`: Kafka-like raw records per topic (partition by the Java client's murmur2
  of the key bytes, offsets increasing per partition in produce order), written as the Delta
  tables ``<lake>/raw/<topic>`` of contracts.md.
* :func:`write_raw_batch` / :func:`raw_frames`: the raw records of many topics in ONE Delta
  table (a ``topic`` column added), written once and read back by Spark once, as
  ``input_frames`` of a plan's ``execute`` (a Delta table per topic costs Spark several
  snapshot jobs per table: the differential suite's many small topics).
* :func:`speed_views`: the same records piped into the ``TopologyTestDriver`` in batch order
  ``(timestamp, table records first, partition, offset)``; each view read back from its output
  topic (last record per key, tombstones remove) as ``{(key, window_start, window_end):
  (value JSON text, timestamp)}``.
* :func:`batch_views`: the batch layer's Delta views in the same shape.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa

from batch_layer.delta.io import join_location, write_table
from batch_layer.ingest import RAW_SCHEMA
from batch_layer.run import read_view
from speed_layer import Serdes
from speed_layer.runtime.partitioning import partition_for_key
from speed_layer.testing import TopologyTestDriver
from speed_layer.topology import Topology

ViewMap = dict[tuple[str, int | None, int | None], tuple[str, int]]


@dataclass(frozen=True)
class Raw:
    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int
    partition: int
    offset: int


def produce(topic: str, records: Iterable[tuple[Any, Any, int]], partitions: int, *, key_serde: Any = None,
            value_serde: Any = None) -> list[Raw]:
    """Records ``(key, value, ts)`` serialized (default String key, JSON value; values that are
    already ``bytes`` are kept) and partitioned as a Java producer would."""
    ks = key_serde or Serdes.String()
    vs = value_serde or Serdes.JSON()
    offsets = [0] * partitions
    out = []
    for i, (k, v, ts) in enumerate(records):
        kb = ks.serialize(k) if not isinstance(k, bytes) else k
        vb = v if isinstance(v, bytes) or v is None else vs.serialize(v)
        p = partition_for_key(kb, partitions) if kb is not None else i % partitions
        out.append(Raw(topic, kb, vb, ts, p, offsets[p]))
        offsets[p] += 1
    return out


def write_raw(lake: Path | str, raws: list[Raw], topics: Iterable[str] = ()) -> None:
    """Write ``<lake>/raw/<topic>`` Delta tables (raw schema of contracts.md) with delta-rs,
    one per topic of ``raws`` and of ``topics`` (empty when it has no record). ``lake`` is a
    local path or an ``s3://`` URI (the store's ``AWS_*`` settings in the environment)."""
    topics = sorted({r.topic for r in raws} | set(topics))
    for t in topics:
        rows = [r for r in raws if r.topic == t]
        table = pa.Table.from_pylist(
            [{"key": r.key, "value": r.value, "timestamp": r.timestamp, "partition": r.partition, "offset": r.offset,
              "headers": []} for r in rows],
            schema=RAW_SCHEMA,
        )
        write_table(table, join_location(lake, "raw", t), mode="overwrite")


def write_raw_batch(lake: Path, raws: list[Raw]) -> Path:
    """Write every record of ``raws`` to ONE Delta table ``<lake>/raw_batch`` (delta-rs): the
    raw schema of contracts.md with a leading ``topic string`` column. Returns its path."""
    schema = pa.schema([pa.field("topic", pa.string())] + list(RAW_SCHEMA))
    table = pa.Table.from_pylist(
        [{"topic": r.topic, "key": r.key, "value": r.value, "timestamp": r.timestamp, "partition": r.partition,
          "offset": r.offset, "headers": []} for r in raws],
        schema=schema,
    )
    path = lake / "raw_batch"
    write_table(table, path, mode="overwrite")
    return path


def raw_frames(spark: Any, path: Path, topics: Iterable[str]) -> tuple[dict[str, Any], Any]:
    """``({topic: DataFrame of its raw records}, the cached table)`` over the table
    :func:`write_raw_batch` wrote: Spark reads it once (cached; ``unpersist`` the second
    element when done), each topic a filter of it (empty for a topic without records)."""
    from pyspark.sql import functions as F

    table = spark.read.format("delta").load(str(path)).cache()
    return {t: table.filter(F.col("topic") == t).drop("topic") for t in topics}, table


def batch_order(raws: list[Raw], table_topics: set[str]) -> list[Raw]:
    """The order the batch layer defines: timestamp, table changes before stream records,
    partition, offset (then topic)."""
    return sorted(raws, key=lambda r: (r.timestamp, r.topic not in table_topics, r.partition, r.offset, r.topic))


def speed_views(topology: Topology, raws: list[Raw], table_topics: set[str], views: dict[str, bool],
                config: dict[str, Any] | None = None) -> tuple[dict[str, ViewMap], int]:
    """Run the speed layer's test driver; ``views`` maps output topic -> windowed. Returns the
    views and the driver's dropped-records count."""
    out: dict[str, ViewMap] = {}
    with TopologyTestDriver(topology, config or {}) as driver:
        for r in batch_order(raws, table_topics):
            driver.pipe_raw(r.topic, r.key, r.value, r.timestamp)
        for topic, windowed in views.items():
            ks = Serdes.WindowedJSON(Serdes.String()) if windowed else Serdes.String()
            t = driver.create_output_topic(topic, ks, Serdes.Bytes())
            m: ViewMap = {}
            for rec in t.read_records_to_list():
                ident = (rec.key.key, rec.key.window.start, rec.key.window.end) if windowed else (rec.key, None, None)
                if rec.value is None:
                    m.pop(ident, None)
                else:
                    m[ident] = (rec.value.decode(), rec.timestamp)
            out[topic] = m
        dropped = driver.dropped_records()
    return out, dropped


def batch_views(lake: Path, stores: Iterable[str]) -> dict[str, ViewMap]:
    """The batch layer's views ``<lake>/views/<store>`` as :data:`ViewMap`."""

    def opt(x: Any) -> int | None:
        return None if pd.isna(x) else int(x)

    out = {}
    for s in stores:
        df = read_view(lake, s)
        out[s] = {(row.key, opt(row.window_start), opt(row.window_end)): (row.value, int(row.timestamp))
                  for row in df.itertuples(index=False)}
    return out


def assert_views_equal(batch: dict[str, ViewMap], speed: dict[str, ViewMap]) -> None:
    """Exact equality per view (value JSON text and timestamp), with a readable diff."""
    for name in speed:
        b, s = batch[name], speed[name]
        only_b = sorted(set(b) - set(s), key=str)[:5]
        only_s = sorted(set(s) - set(b), key=str)[:5]
        diff = [(k, b[k], s[k]) for k in sorted(set(b) & set(s), key=str) if b[k] != s[k]][:5]
        assert not only_b and not only_s and not diff, (
            f"view {name}: {len(b)} batch rows vs {len(s)} speed rows; only batch {only_b}; only speed {only_s}; "
            f"different (batch, speed) {diff}"
        )


def json_records(records: Iterable[Any]) -> list[tuple[str, bytes, int]]:
    """``SourceRecord``s of pipelines.examples.flights.data as ``(key, JSON value bytes, ts)``."""
    return [(r.key, json.dumps(r.value).encode(), r.timestamp) for r in records]
