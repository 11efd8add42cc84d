"""Which days new data falls on: records in Kafka the lake has not archived yet (what the
sensor and the schedule ask a run for), and records a run has just archived (what the run
reports). See :mod:`pipelines.dagster.partitions` for the model.

A record's day is the UTC day of its event time as the pipeline sees it: the record decoded
with the serdes of the source that reads its topic (the Streams config's defaults when the
source names none) and timestamped by the source's extractor, called as the batch layer does
(``extractor(key, value, record_timestamp, -1)``). A record that does not decode, or whose
timestamp is missing or negative, changes no view (the speed layer dead-letters it, the batch
layer drops it) and falls on no day; it is counted as ``undated``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.dagster.partitions import (
    compact_days, day_of, days_in_partitions, parse_days, partition_keys, run_target_days,
)
from pipelines.declaration.pipeline import Pipeline

if TYPE_CHECKING:
    import dagster as dg

__all__ = ["Decoder", "topic_decoders", "record_days", "NewData", "kafka_new_data", "read_kafka_range",
           "archived_days", "RunDays", "days_of_run", "describe", "OFFSETS_ADDED", "TOUCHED_DAYS_TAG"]

#: Metadata key of an ingest materialization: ``{partition: [first, last]}`` offsets it added
OFFSETS_ADDED = "offsets_added"
#: Run tag: the days the run's new records fall on (:func:`pipelines.dagster.partitions.compact_days`)
TOUCHED_DAYS_TAG = "duet/touched_days"

#: ``(key, value, record timestamp or None)`` as Kafka or the raw table holds them
RawRecord = tuple[Any, Any, Any]


@dataclass(frozen=True)
class Decoder:
    """How one source node reads a topic: key and value serdes, timestamp extractor."""

    key_serde: Any
    value_serde: Any
    extractor: Any = None

    def event_time(self, key: bytes | None, value: bytes | None, timestamp: int | None) -> int | None:
        """The record's event time in ms, or ``None`` when it does not decode or its time is
        missing or negative."""
        raw_ts = -1 if timestamp is None else int(timestamp)
        try:
            k = self.key_serde.deserialize(key)
            v = self.value_serde.deserialize(value)
            ts = self.extractor(k, v, raw_ts, -1) if self.extractor is not None else raw_ts
        except Exception:  # noqa: BLE001 - a dead letter: it changes no view
            return None
        return int(ts) if ts is not None and ts >= 0 else None


def topic_decoders(p: Pipeline) -> dict[str, list[Decoder]]:
    """``{input topic: [Decoder per source node reading it]}`` from ``p``'s topology."""
    from speed_layer.config import StreamsConfig
    from speed_layer.graph.ops import SourceOp

    cfg = StreamsConfig.of(p.streams_config)
    out: dict[str, list[Decoder]] = {t: [] for t in p.input_topics}
    for node in p.build_topology().nodes.values():
        op = node.op
        if not isinstance(op, SourceOp) or op.repartition:
            continue
        for topic in op.topics:
            if topic in out:
                out[topic].append(Decoder(op.key_serde or cfg.default_key_serde,
                                          op.value_serde or cfg.default_value_serde, op.timestamp_extractor))
    return out


def record_days(decoders: list[Decoder], records: Iterable[RawRecord]) -> tuple[Counter[str], int]:
    """``({day: records}, undated)``: the days ``records`` fall on through ``decoders`` (a
    record read by two sources with different event times counts on both days) and how many
    fell on none."""
    days: Counter[str] = Counter()
    undated = 0
    for key, value, ts in records:
        seen = {t for t in (d.event_time(key, value, ts) for d in decoders) if t is not None}
        if not seen:
            undated += 1
        for day in {day_of(t) for t in seen}:
            days[day] += 1
    return days, undated


@dataclass
class NewData:
    """Records of the source topics not yet archived in a pipeline's lake folder.

    Attributes:
        records: ``{topic: records}`` (0 for a topic with nothing new or missing).
        ends: ``{topic: {partition: end offset}}`` when they were read.
        days: ``{day: records}`` falling on each UTC day.
        undated: records that fall on no day (see the module docstring).
    """

    records: dict[str, int] = field(default_factory=dict)
    ends: dict[str, dict[int, int]] = field(default_factory=dict)
    days: Counter[str] = field(default_factory=Counter)
    undated: int = 0

    @property
    def total(self) -> int:
        return sum(self.records.values())

    @property
    def run_key(self) -> str:
        """``topic:partition=end,...;...``: one run per set of end offsets."""
        return ";".join(f"{t}:" + ",".join(f"{q}={o}" for q, o in sorted(self.ends[t].items()))
                        for t in sorted(self.ends))


def kafka_new_data(p: Pipeline, bootstrap: str, lake: str | Path, *, read_days: bool = True) -> NewData:
    """The records of ``p``'s source topics beyond what ``lake`` (the pipeline's folder) has
    archived; with ``read_days`` they are read (keys, values and timestamps) to find their
    days, and counted as read (else the offsets are counted, transaction markers included).
    A missing topic counts as empty.

    Raises:
        confluent_kafka.KafkaException, RuntimeError: the cluster cannot be reached, or stops
            answering while the records are read.
    """
    from batch_layer.ingest import archived_offsets
    from speed_layer.admin import TopicError, end_offsets

    out = NewData()
    decoders = topic_decoders(p) if read_days else {}
    for topic in p.input_topics:
        try:
            ends = end_offsets(bootstrap, topic)
        except TopicError:
            ends = {}
        archived = archived_offsets(lake, topic)
        plan = {q: (archived.get(q, -1) + 1, end) for q, end in ends.items() if archived.get(q, -1) + 1 < end}
        out.ends[topic] = ends
        out.records[topic] = sum(end - start for start, end in plan.values())
        if read_days and plan:
            read = [0]

            def counted(records: Iterator[RawRecord]) -> Iterator[RawRecord]:
                for rec in records:
                    read[0] += 1
                    yield rec

            days, undated = record_days(decoders[topic], counted(read_kafka_range(bootstrap, topic, plan)))
            out.days.update(days)
            out.undated += undated
            out.records[topic] = read[0]  # offsets that hold no record (transaction markers) are not counted
    return out


def read_kafka_range(bootstrap: str, topic: str, plan: Mapping[int, tuple[int, int]],
                     idle_timeout_s: float = 20.0) -> Iterator[RawRecord]:
    """The committed records of ``topic`` at offsets ``[start, end)`` of each partition of
    ``plan`` (``{partition: (start, end)}``), as ``(key, value, timestamp)``.

    Raises:
        RuntimeError: nothing arrives for ``idle_timeout_s`` seconds while records remain.
    """
    import time

    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from speed_layer.admin import reader_config

    consumer = Consumer(reader_config(bootstrap, {
        "group.id": f"duet-new-data-{topic}",  # required by the client; never joined nor committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
    }))
    try:
        consumer.assign([TopicPartition(topic, q, start) for q, (start, _) in plan.items()])
        pending = dict(plan)
        last_progress = time.monotonic()
        while pending:
            msgs = consumer.consume(num_messages=10_000, timeout=0.2)
            if not msgs:
                if time.monotonic() - last_progress > idle_timeout_s:
                    raise RuntimeError(f"{topic}: no record for {idle_timeout_s:.0f} s below the end offsets "
                                       f"{ {q: e for q, (_, e) in pending.items()} }")
                continue
            last_progress = time.monotonic()
            for m in msgs:
                q = m.partition()
                if q not in pending:
                    continue
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:  # all that is readable (the last stable offset)
                        del pending[q]
                        continue
                    raise RuntimeError(f"{topic} partition {q}: {err}")
                if m.offset() >= pending[q][1]:
                    del pending[q]
                    continue
                ts_type, ts = m.timestamp()
                yield m.key(), m.value(), (ts if ts_type else None)
                if m.offset() >= pending[q][1] - 1:
                    del pending[q]
    finally:
        consumer.close()


def archived_days(p: Pipeline, lake: str | Path,
                  ranges: Mapping[str, Mapping[int, tuple[int, int]]]) -> tuple[Counter[str], int]:
    """``({day: records}, undated)`` of the records of ``<lake>/raw/<topic>`` at the offsets
    ``ranges`` (``{topic: {partition: (first, last)}}``, inclusive): what a run archived.
    Topics that are not sources of ``p`` (the dead-letter topic) are left out."""
    import pyarrow.compute as pc

    from batch_layer.delta.io import read_arrow
    from batch_layer.ingest import raw_table_path

    decoders = topic_decoders(p)
    days: Counter[str] = Counter()
    undated = 0
    for topic, by_partition in ranges.items():
        if topic not in decoders or not by_partition:
            continue
        cond = None
        for q, (first, last) in by_partition.items():
            one = (pc.field("partition") == int(q)) & (pc.field("offset") >= int(first)) & \
                (pc.field("offset") <= int(last))
            cond = one if cond is None else cond | one
        table = read_arrow(raw_table_path(lake, topic), columns=["key", "value", "timestamp"], filter=cond)
        rows = zip(table.column("key").to_pylist(), table.column("value").to_pylist(),
                   table.column("timestamp").to_pylist())
        d, u = record_days(decoders[topic], rows)
        days.update(d)
        undated += u
    return days, undated


@dataclass(frozen=True)
class RunDays:
    """The days a run of the batch views materializes (see :mod:`pipelines.dagster.partitions`).

    Attributes:
        target: the days the run targets (its partition or range), in order.
        new: ``{day: records}`` of the records this run archived, on days of the partitions.
        tagged: the days of the run's ``duet/touched_days`` tag (on days of the partitions).
        outside: days this run's records fall on that are no partition.
        undated: records this run archived that fall on no day.
    """

    target: list[str]
    new: Counter[str]
    tagged: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    undated: int = 0

    @property
    def extra(self) -> list[str]:
        """The days materialized beyond the target: new data falls on them."""
        return sorted((set(self.new) | set(self.tagged)) - set(self.target))

    @property
    def label(self) -> str:
        """The target as ``first..last`` (or one day; ``"none"``)."""
        if not self.target:
            return "none"
        return self.target[0] if len(self.target) == 1 else f"{self.target[0]}..{self.target[-1]}"

    def reason(self, day: str) -> str:
        """Why ``day`` is materialized."""
        why = []
        if day in self.target:
            why.append("the run targets it")
        if day in self.new:
            n = self.new[day]
            why.append(f"{n} new record{'' if n == 1 else 's'} of this run fall{'s' if n == 1 else ''} on it")
        elif day in self.tagged:
            why.append("the run's new records fall on it (ingested before a re-execution)")
        return "; ".join(why)


def days_of_run(p: Pipeline, context: "dg.AssetExecutionContext", lake: str | Path) -> RunDays:
    """The :class:`RunDays` of a run of ``p``'s batch views: its target, the days of the
    records its ingest steps archived (their ``offsets_added``, read back from ``lake``, the
    pipeline's folder) and of its ``duet/touched_days`` tag."""
    import dagster as dg

    from pipelines.dagster.keys import raw_key

    topic_of = {raw_key(p, t): t for t in p.input_topics}
    ranges: dict[str, dict[int, tuple[int, int]]] = {}
    events = dg.DagsterEventType.ASSET_MATERIALIZATION
    for rec in context.instance.get_records_for_run(context.run.run_id, of_type=events).records:
        mat = rec.event_log_entry.asset_materialization
        if mat is None or mat.asset_key not in topic_of or OFFSETS_ADDED not in mat.metadata:
            continue
        added = mat.metadata[OFFSETS_ADDED].value
        if isinstance(added, dict) and added:
            ranges[topic_of[mat.asset_key]] = {int(q): (int(r[0]), int(r[1])) for q, r in added.items()}
    keys = partition_keys(p)
    days, undated = archived_days(p, lake, ranges) if ranges else (Counter(), 0)
    inside, outside = days_in_partitions(days, keys)
    tagged: list[str] = []
    tag = context.run.tags.get(TOUCHED_DAYS_TAG, "")
    try:
        tagged = days_in_partitions(parse_days(tag), keys)[0]
    except ValueError:
        context.log.warning(f"run tag {TOUCHED_DAYS_TAG}={tag!r} is no list of days: ignored")
    return RunDays(target=run_target_days(context), new=Counter({d: days[d] for d in inside}), tagged=tagged,
                   outside=outside, undated=undated)


def describe(days: RunDays) -> str:
    """One line for the run's log: target, new days, days beyond the target."""
    return (f"target {days.label}; new records on {compact_days(days.new) or 'no day'}"
            + (f"; also materialized: {compact_days(days.extra)}" if days.extra else "")
            + (f"; {len(days.outside)} days outside the partitions" if days.outside else "")
            + (f"; {days.undated} records on no day" if days.undated else ""))
