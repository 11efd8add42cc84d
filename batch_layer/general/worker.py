"""Worker side of the general executor: one Spark ``applyInPandas`` call runs ONE task (a
sub-topology x a partition) with the speed layer's own ``StreamTask``, processors and
stores, over that task's whole input history in order.

Everything here is pickled into Spark's Python workers; it holds no driver state.

Order keys
    Every record carries ``ok``, a byte string whose byte order is the batch order:

    * a record of an input topic (from ``<lake>/raw/<topic>``): ``ts`` (ms, +2^63, 8 bytes),
      ``rank`` (0 for a KTable / GlobalKTable topic, 1 for a stream topic: a table change is
      applied before a stream record of the same timestamp), ``partition`` (4 bytes),
      ``offset`` (8 bytes), the topic's index ``src`` (4 bytes); this is the order
      ``(timestamp, table first, partition, offset, topic)`` of the architecture;
    * a record a task sends (to a repartition topic, an output topic, a topic the
      topology reads back): the ``ok`` of the record being processed when it was sent,
      followed by a 4-byte sequence number of the sends caused by that record.

    A task processes its input sorted by ``ok``: each record takes the place of the input
    record that caused it, as in a speed layer that processes records one at a time in
    event-time order and passes each through repartition topics at once (Kafka's
    ``TopologyTestDriver`` fed in event-time order does exactly this).

Commits
    As Kafka's ``TopologyTestDriver``, the task commits (flushing record caches) after every
    record, so caching never changes what is emitted.

Time
    Stream time is the task's own (Kafka's per-task stream time). The wall clock stands
    still at 0: wall-clock punctuations never fire in batch (history has no wall clock).
"""
from __future__ import annotations

import pickle
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from speed_layer.config import StreamsConfig
from speed_layer.graph.nodes import SubTopology
from speed_layer.processor.api import Record
from speed_layer.runtime.partitioning import partition_for_key
from speed_layer.runtime.task import Headers, Metrics, RawRecord, StreamTask
from speed_layer.state.factories import build_store
from speed_layer.topology import Topology

from .store_rows import store_rows

#: one input row of a task (Spark schema); ``run`` numbers the sub-topologies of one stage
INPUT_SCHEMA = "run int, topic string, p int, o long, k binary, v binary, ts long, ok binary, h binary, rank int, src int"
#: one output row: ``kind`` "r" = a record sent to ``topic`` partition ``p``; "s" = a row of
#: store ``topic`` (view columns); "d" = ``sts`` records dropped at source node ``skey``;
#: "w" = ``sts`` is the largest timestamp extracted from the task's stream input (-1: none)
OUTPUT_SCHEMA = ("kind string, topic string, p int, k binary, v binary, ts long, ok binary, h binary, "
                 "skey string, ws long, we long, sval string, sts long")

_RAW_OK = struct.Struct(">QBIQI")
_SEQ = struct.Struct(">I")
_BIAS = 2**63


def raw_order_key(ts: int, rank: int, partition: int, offset: int, src: int) -> bytes:
    """The order key of an input topic's record (see the module docstring)."""
    return _RAW_OK.pack(ts + _BIAS, rank, partition, offset, src)


@dataclass(frozen=True)
class TaskSpec:
    """What a worker needs to run the tasks of one sub-topology.

    Attributes:
        topology: the topology (its stores in memory: batch state lives for one task run).
        config: the speed layer's config (serdes, handlers, application.id).
        subtopology: the sub-topology to run.
        partitions: full topic name -> partition count (the topics the task sends to).
        default_partitions: partition count of a topic missing from ``partitions``.
        global_groups: ``(source node, global processor node, topics)`` of the global
            stores this sub-topology reads; their topics' records are in every task's input.
        stores: the stores whose content the task emits as view rows at the end.
    """

    topology: Topology
    config: StreamsConfig
    subtopology: SubTopology
    partitions: dict[str, int]
    default_partitions: int
    global_groups: tuple[tuple[str, str, tuple[str, ...]], ...]
    stores: tuple[str, ...]


class _Collector:
    """The task's record collector: every sent record becomes an output row, partitioned
    as Kafka's producer would (the given partition, else murmur2 of the key bytes; a null
    key goes round-robin by send sequence), ordered by the order key of its cause."""

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.rows: list[tuple[Any, ...]] = []
        self.origin = b""
        self.seq = 0

    def start(self, origin: bytes) -> None:
        self.origin, self.seq = origin, 0

    def partitions_for(self, topic: str) -> int:
        return self.spec.partitions.get(topic, self.spec.default_partitions)

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers, partition: int | None) -> None:
        self.seq += 1
        n = self.partitions_for(topic)
        if partition is None:
            partition = partition_for_key(key, n) if key is not None else self.seq % n
        h = pickle.dumps(list(headers), protocol=5) if headers else None
        ok = self.origin + _SEQ.pack(self.seq)
        self.rows.append(("r", topic, int(partition), key, value, int(timestamp), ok, h, None, None, None, None, None))


class _BatchTask(StreamTask):
    """A ``StreamTask`` that remembers the timestamp it extracted from the last record, if
    it called the extractor (the batch watermark is the largest extracted timestamp of
    the stream input) and
    counts the records it dropped because they failed: deserialization, timestamp
    extraction (an invalid timestamp) or processing (the relational path's "dropped"),
    and, per caching node, the records a cache flush forwarded that failed downstream."""

    last_timestamp: int | None = None
    failed: int = 0
    #: caching node -> flushed records that failed downstream of it (since last taken)
    flush_failed: dict[str, int] | None = None

    def _extract_timestamp(self, node: Any, raw: RawRecord, key: Any, value: Any) -> int | None:
        self.last_timestamp = ts = super()._extract_timestamp(node, raw, key, value)
        if ts is None:
            self.failed += 1
        return ts

    def _handle_error(self, kind: str, handler: str, raw: RawRecord, exc: Exception) -> None:
        self.failed += 1
        super()._handle_error(kind, handler, raw, exc)

    def handle_flush_error(self, node: str, record: Record[Any, Any], exc: Exception) -> None:
        super().handle_flush_error(node, record, exc)
        if self.flush_failed is None:
            self.flush_failed = {}
        self.flush_failed[node] = self.flush_failed.get(node, 0) + 1


def _input_rows(pdf: pd.DataFrame) -> list[tuple[bytes, str, bool, RawRecord]]:
    """``(order key, topic, stream input, record)`` of one task's input, sorted by order
    key then topic; ``stream input``: a record of a stream topic read from the lake."""
    cols = [pdf[c].tolist() for c in ("topic", "p", "o", "k", "v", "ts", "ok", "h", "rank", "src")]
    out = []
    for topic, p, o, k, v, ts, ok, h, rank, src in zip(*cols):
        p, ts = int(p), int(ts)
        o = 0 if o is None or pd.isna(o) else int(o)
        stream_input = ok is None and int(rank) == 1
        if ok is None:
            ok = raw_order_key(ts, int(rank), p, o, int(src))
        headers = pickle.loads(h) if h is not None else []
        out.append((bytes(ok), topic, stream_input, RawRecord(topic, p, o, k, v, ts, headers)))
    out.sort(key=lambda r: (r[0], r[1]))
    return out


def run_task(spec: TaskSpec, pdf: pd.DataFrame) -> pd.DataFrame:
    """Run the task of ``spec.subtopology`` for the partition of ``pdf``'s rows
    (:data:`INPUT_SCHEMA`) and return its output rows (:data:`OUTPUT_SCHEMA`).

    Raises:
        StreamsException: a record failed under the ``log_and_fail`` handlers (the Spark
            job fails with the record's topic, partition and offset in the message).
    """
    partition = int(pdf["p"].iloc[0]) if len(pdf) else 0
    topology, config = spec.topology, spec.config
    collector = _Collector(spec)
    metrics = Metrics()
    tmp = Path(tempfile.mkdtemp(prefix="duet-batch-task-"))
    global_stores: dict[str, Any] = {}
    global_tasks: dict[str, StreamTask] = {}
    tasks: list[StreamTask] = []
    try:
        for src, proc, topics in spec.global_groups:
            store = topology.nodes[proc].op.store
            global_stores[store] = build_store(topology.stores[store], tmp / "global", None)
            sub = SubTopology(-1, (src, proc), topics, (), ())
            gt = _BatchTask(f"global-{store}", topology, sub, partition, config, collector, global_stores=global_stores, metrics=metrics)
            tasks.append(gt)
            for t in topics:
                global_tasks[t] = gt
        sub = spec.subtopology
        task = _BatchTask(f"{sub.id}_{partition}", topology, sub, partition, config, collector,
                          state_dir=tmp / "task", global_stores=global_stores, metrics=metrics)
        tasks.append(task)
        for t in tasks:
            t.initialize()
        dropped: dict[str, int] = {}
        watermark = -1
        for ok, topic, stream_input, raw in _input_rows(pdf):
            collector.start(ok)
            target = global_tasks.get(topic, task)
            task.last_timestamp, target.failed = None, 0
            target.process(raw)
            if target.failed:
                node = target.sources[topic].name
                dropped[node] = dropped.get(node, 0) + 1
            elif stream_input:
                # the runtime may skip the extractor when the record's own timestamp is
                # the event time (no extractor configured): then that is the timestamp
                ts = task.last_timestamp if task.last_timestamp is not None else raw.timestamp
                watermark = max(watermark, ts)
            task.commit()
            if task.flush_failed:
                for node, n in task.flush_failed.items():
                    dropped[node] = dropped.get(node, 0) + n
                task.flush_failed = None
        rows = collector.rows
        for name in spec.stores:
            if name in task.stores:
                for key, ws, we, val, ts in store_rows(task.stores[name]):
                    rows.append(("s", name, partition, None, None, None, None, None, key, ws, we, val, ts))
        for node, n in dropped.items():
            rows.append(("d", "", partition, None, None, None, None, None, node, None, None, None, n))
        rows.append(("w", "", partition, None, None, None, None, None, None, None, None, None, watermark))
        return _frame(rows)
    finally:
        for t in tasks:
            t.close()
        for s in global_stores.values():
            s.close()
        shutil.rmtree(tmp, ignore_errors=True)


_COLUMNS = [c.split()[0] for c in OUTPUT_SCHEMA.split(", ")]
_INT_COLUMNS = {"p": "int32", "ts": "Int64", "ws": "Int64", "we": "Int64", "sts": "Int64"}


def _frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    cols = list(zip(*rows)) if rows else [[] for _ in _COLUMNS]
    data = {}
    for name, values in zip(_COLUMNS, cols):
        dtype = _INT_COLUMNS.get(name, object)
        data[name] = pd.Series(list(values), dtype=dtype)
    return pd.DataFrame(data)


def task_function(specs: dict[int, TaskSpec]) -> Any:
    """The ``applyInPandas`` function of the tasks of several sub-topologies run in one
    Spark stage (grouped by ``run, p``; ``run`` picks the spec)."""

    def fn(pdf: pd.DataFrame) -> pd.DataFrame:
        return run_task(specs[int(pdf["run"].iloc[0])], pdf)

    return fn

