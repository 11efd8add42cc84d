"""Hypothesis strategies for random, valid topologies and their inputs (the differential
tests of speed vs batch). Part of duet's test kit.

An :class:`Example` is plain data: a chain of stateless ops on stream ``s1``, a terminal
(an aggregation over any window kind with optional suppress, a stream-stream, stream-table,
stream-GlobalKTable, table-table or foreign-key join, a KGroupedTable aggregation, cogroup,
or a Processor-API node with a store and stream-time punctuation) and records for the
input topics ``s1``, ``s2`` (streams), ``t1``, ``t2`` (tables) and ``g1`` (a global table).
:func:`build` adds it to a ``StreamsBuilder`` with every topic and store name prefixed, so
many examples can share one topology (one Spark run) and each can also run alone in a
``TopologyTestDriver``.

Inputs: keys from a small alphabet and None (null keys), int values and None
(tombstones), timestamps 0..60 ms with duplicates and equal timestamps. Every topic has one
partition: Kafka's ``TopologyTestDriver`` models one partition and one stream time.

The driver shares ONE stream time over all sub-topologies, the runtime and batch keep one
per task; so ops whose output depends on stream time (suppress, left/outer stream-stream
joins, punctuation) are generated only where they stay in the sub-topology of the sources
(no re-keying before them): there, both agree by construction of Kafka's semantics.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

from speed_layer import (
    BufferConfig, JoinWindows, Materialized, Serdes, SessionWindows, SlidingWindows, StreamsBuilder, Suppressed,
    TimeWindows,
)
from speed_layer.processor.api import Processor, PunctuationType, Record
from speed_layer.state.factories import Stores

MS = timedelta(milliseconds=1)
KEYS = ["a", "b", "c"]
STREAMS = ("s1", "s2")
TABLES = ("t1", "t2", "g1")
TOPICS = STREAMS + TABLES

#: terminals whose results depend on when stream time passes a window's close
TIME_SENSITIVE = {"suppress", "ss_join_left", "ss_join_outer", "process"}


@dataclass(frozen=True)
class Example:
    """One random topology and its input: ``ops`` on ``s1`` (``(name, m)``), the
    ``terminal`` (``(kind, *params)``), and ``records`` ``{topic: [(key, value, ts)]}``."""

    ops: tuple[tuple[str, int], ...]
    terminal: tuple[Any, ...]
    records: dict[str, list[tuple[Any, Any, int]]] = field(hash=False, compare=False)

    def describe(self) -> str:
        return f"ops={list(self.ops)} terminal={self.terminal}"


class RunningTotal(Processor):
    """Processor-API node: a running total per key in a key-value store; each update
    forwards the new total; every 7 ms of stream time forwards ``("#keys", n)``."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)
        context.schedule(7, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            return
        total = (self.store.get(record.key) or 0) + record.value
        self.store.put(record.key, total)
        self.context.forward(record.with_value(total))

    def punctuate(self, timestamp: int) -> None:
        self.context.forward(Record("#keys", sum(1 for _ in self.store.all()), timestamp))


def _stateless(stream: Any, op: str, m: int, b: StreamsBuilder, p: str) -> Any:
    if op == "filter":
        return stream.filter(lambda k, v: v is None or v % m != 0)
    if op == "filter_not":
        return stream.filter_not(lambda k, v: v is not None and v % m == 1)
    if op == "map_values":
        return stream.map_values(lambda v: None if v is None else v * m % 10)
    if op == "flat_map_values":
        return stream.flat_map_values(lambda v: [] if v is None else [v, (v + m) % 10][: 1 + v % 2])
    if op == "peek":
        return stream.peek(lambda k, v: None)
    if op == "merge":
        return stream.merge(b.stream(p + "s2"))
    if op == "select_key":
        return stream.select_key(lambda k, v: None if v is None else KEYS[v % m % 3])
    if op == "map":
        return stream.map(lambda k, v: (k, v) if v is None else (KEYS[(v + m) % 3], v))
    raise AssertionError(op)


def _windowed_out(table: Any) -> Any:
    return table.to_stream().map(lambda wk, v: (f"{wk.key}@{wk.window.start}/{wk.window.end}", v))


WINDOWS = {
    "tumbling": lambda: TimeWindows.of_size_and_grace(10 * MS, 5 * MS),
    "hopping": lambda: TimeWindows.of_size_and_grace(10 * MS, 5 * MS).advance_by(4 * MS),
    "sliding": lambda: SlidingWindows.of_time_difference_and_grace(5 * MS, 5 * MS),
    "session": lambda: SessionWindows.of_inactivity_gap_and_grace(4 * MS, 5 * MS),
}


def _aggregate(grouped: Any, window: str, agg: str, store: str) -> Any:
    m = Materialized.as_(store)
    g = grouped if window == "none" else grouped.windowed_by(WINDOWS[window]())
    if agg == "count":
        return g.count(m)
    if agg == "reduce":
        return g.reduce(lambda a, c: a + c, m)
    if window == "session":
        return g.aggregate(lambda: 0, lambda k, v, a: a + v, lambda k, a, c: a + c, m)
    return g.aggregate(lambda: 0, lambda k, v, a: (a * 3 + v) % 1000, m)


def build(b: StreamsBuilder, ex: Example, p: str) -> None:
    """Add ``ex`` to ``b`` with every topic and store name prefixed by ``p``."""
    s = b.stream(p + "s1")
    for op, m in ex.ops:
        s = _stateless(s, op, m, b, p)
    kind = ex.terminal[0]
    out = p + "out"
    if kind == "agg":
        _, window, agg, suppress = ex.terminal
        table = _aggregate(s.group_by_key(), window, agg, p + "agg")
        if window == "none":
            table.to_stream().to(out)
        else:
            if suppress:
                table = table.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
            _windowed_out(table).to(out)
    elif kind.startswith("ss_join"):
        _, before, after, grace = ex.terminal
        windows = JoinWindows.of_time_difference_and_grace(before * MS, grace * MS).after(after * MS)
        joiner = lambda a, c: [a, c]  # noqa: E731
        other = b.stream(p + "s2")
        how = kind.split("_")[-1]
        joined = {"inner": s.join, "left": s.left_join, "outer": s.outer_join}[how](other, joiner, windows)
        joined.to(out)
    elif kind.startswith("st_join"):
        table = b.table(p + "t1", materialized=Materialized.as_(p + "t1-store"))
        joiner = lambda a, c: [a, c]  # noqa: E731
        (s.join(table, joiner) if kind.endswith("inner") else s.left_join(table, joiner)).to(out)
    elif kind.startswith("sg_join"):
        g = b.global_table(p + "g1", materialized=Materialized.as_(p + "g1-store"))
        sel = lambda k, v: None if v is None else KEYS[v % 3]  # noqa: E731
        joiner = lambda a, c: [a, c]  # noqa: E731
        (s.join(g, sel, joiner) if kind.endswith("inner") else s.left_join(g, sel, joiner)).to(out)
    elif kind.startswith("tt_join"):
        left = b.table(p + "t1", materialized=Materialized.as_(p + "t1-store"))
        right = s.to_table(materialized=Materialized.as_(p + "s1-table"))
        how = kind.split("_")[-1]
        joined = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[how](
            right, lambda a, c: [a, c], materialized=Materialized.as_(p + "joined"))
        joined.to_stream().to(out)
    elif kind.startswith("fk_join"):
        left = b.table(p + "t1", materialized=Materialized.as_(p + "t1-store"))
        right = b.table(p + "t2", materialized=Materialized.as_(p + "t2-store"))
        fk = lambda v: KEYS[v % 3]  # noqa: E731
        joined = (left.left_join if kind.endswith("left") else left.join)(
            right, fk, lambda a, c: [a, c], materialized=Materialized.as_(p + "joined"))
        joined.to_stream().to(out)
    elif kind == "table_group":
        _, agg = ex.terminal
        table = b.table(p + "t1", materialized=Materialized.as_(p + "t1-store"))
        grouped = table.group_by(lambda k, v: (KEYS[v % 2], v))
        m = Materialized.as_(p + "agg")
        if agg == "count":
            result = grouped.count(m)
        elif agg == "reduce":
            result = grouped.reduce(lambda a, c: a + c, lambda a, c: a - c, m)
        else:
            result = grouped.aggregate(lambda: 0, lambda k, v, a: a + 2 * v, lambda k, v, a: a - 2 * v, m)
        result.to_stream().to(out)
    elif kind == "cogroup":
        g1 = s.group_by_key()
        g2 = b.stream(p + "s2").group_by_key()
        table = g1.cogroup(lambda k, v, a: a + v).cogroup(g2, lambda k, v, a: a - v).aggregate(lambda: 0, Materialized.as_(p + "agg"))
        table.to_stream().to(out)
    elif kind == "process":
        store = p + "proc"
        b.add_state_store(Stores.key_value_store(store, Serdes.String(), Serdes.JSON()))
        s.process(lambda: RunningTotal(store), store).to(out)
    else:
        raise AssertionError(kind)


def input_topics(ex: Example) -> set[str]:
    """The input topics ``ex``'s topology reads (unprefixed)."""
    used = {"s1"}
    kind = ex.terminal[0]
    if any(op == "merge" for op, _ in ex.ops) or kind.startswith("ss_join") or kind == "cogroup":
        used.add("s2")
    if kind.startswith(("st_join", "tt_join", "fk_join")) or kind == "table_group":
        used.add("t1")
    if kind.startswith("fk_join"):
        used.add("t2")
    if kind.startswith("sg_join"):
        used.add("g1")
    return used


_OPS = st.tuples(st.sampled_from(["filter", "filter_not", "map_values", "flat_map_values", "peek", "merge", "select_key", "map"]),
                 st.integers(2, 4))
_TERMINALS = st.one_of(
    st.tuples(st.just("agg"), st.sampled_from(["none", "tumbling", "hopping", "sliding", "session"]),
              st.sampled_from(["count", "reduce", "aggregate"]), st.booleans()),
    st.tuples(st.sampled_from(["ss_join_inner", "ss_join_left", "ss_join_outer"]), st.integers(0, 6), st.integers(0, 6), st.integers(0, 4)),
    st.tuples(st.sampled_from(["st_join_inner", "st_join_left", "sg_join_inner", "sg_join_left"])),
    st.tuples(st.sampled_from(["tt_join_inner", "tt_join_left", "tt_join_outer", "fk_join_inner", "fk_join_left"])),
    st.tuples(st.just("table_group"), st.sampled_from(["count", "reduce", "aggregate"])),
    st.tuples(st.just("cogroup")),
    st.tuples(st.just("process")),
)


def _records(topic: str) -> st.SearchStrategy[list[tuple[Any, Any, int]]]:
    keys = st.sampled_from(KEYS + [None]) if topic in STREAMS else st.sampled_from(KEYS + KEYS + [None])
    values = st.one_of(st.integers(0, 9), st.integers(0, 9), st.none())
    return st.lists(st.tuples(keys, values, st.integers(0, 60)), max_size=12)


def _time_sensitive(terminal: tuple[Any, ...]) -> bool:
    kind = terminal[0]
    return (kind == "agg" and terminal[3] and terminal[1] != "none") or kind in TIME_SENSITIVE


@st.composite
def examples(draw: Any) -> Example:
    """A random :class:`Example` (see the module docstring)."""
    terminal = draw(_TERMINALS)
    ops = draw(st.lists(_OPS, max_size=3))
    kind = terminal[0]
    if _time_sensitive(terminal) or kind.startswith(("st_join", "tt_join", "ss_join")) or kind == "cogroup":
        # no re-keying: stream-time semantics (see the module docstring), and joins of
        # co-partitioned inputs without a repartition keep the example in one sub-topology
        ops = [o for o in ops if o[0] not in ("select_key", "map")]
    records = {t: draw(_records(t)) for t in TOPICS}
    return Example(tuple(ops), terminal, records)


# user functions and Processors travel to Spark's workers by value (a test module is not
# importable there)
def register_by_value() -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
