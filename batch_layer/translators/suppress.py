"""``KTable.suppress(Suppressed.until_window_closes(...))`` over a windowed aggregation
(KIP-328: final results only) on the relational path, and the ``toStream`` of it.

A suppressed windowed aggregation emits each window's final result once the suppress
processor's observed stream time (the largest timestamp the aggregation forwarded to it)
reaches ``window end + grace`` (session windows: ``end + gap + grace``), in
``(window end, key)`` order. Which windows are emitted, and by which record, depends on
the whole task's sequence (a sub-topology x a partition: every key of it moves stream
time), as the unmatched records of a left / outer stream-stream join do
(``stream_joins``). The translation does the same thing as that one:

* the ``SuppressOp`` node reads the aggregation's INPUT stream (its dependencies are the
  ``AggregateOp``'s parents) and replays each task's records (``groupBy("p")``), in batch
  order, through the speed layer's own aggregate processor
  (``TimeWindowAggregateProcessor`` / ``SessionWindowAggregateProcessor``) and
  ``SuppressProcessor`` over in-memory stores with the general executor's store specs
  (window and session stores without expiry, caches as configured and flushed after every
  record: the general executor commits after every record, as Kafka's
  ``TopologyTestDriver``). Its output is a stream frame of ``Change`` values with
  ``Windowed`` keys; each record keeps the order key of the input record whose processing
  forwarded it, ``seq`` extended by 8 hex digits (its place among that record's outputs),
  which is where the general executor places it;
* a ``ToStreamOp`` over it takes the change's new value and applies its key mapper
  (``ToStreamProcessor``); a ``ToStreamOp`` over anything else is the usual
  ``table.ToStreamTranslator``.

An emitted result keeps the timestamp of its window's latest update, older than the
record that emits it: the stream is out of timestamp order, so only stateless steps,
repartitions and a plain ``count`` may consume it (``stream_joins._check_order_free_downstream``).
The aggregation's own store is still served by the ``AggregateOp`` translation (a fold).

Refused (general executor): ``until_time_limit``; a bounded buffer (``max_records`` /
``max_bytes``: it shuts down when full, and its byte estimate uses record metadata); a
suppress whose parent is not a tumbling / hopping / session ``AggregateOp`` (a plain or
sliding aggregation, a join, a table source), an aggregation emitting on window close
(KIP-825); an aggregation whose input is not a stateless chain over source topics (a
repartition: the task of a record is then the sink partitioner's) or reads a source with
a timestamp extractor; a suppressed table consumed by anything but ``toStream`` (a join
side, a table filter); and any consumer of the ``toStream`` other than the order-free ones.
Errors: an aggregator that raises stops its record at the aggregation (counted as an error
of the aggregation node, as the fold counts it), what its caches hold is still flushed.
"""
from __future__ import annotations

import pickle
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode, StoreSpec
from speed_layer.processor.api import Change, Record
from speed_layer.processor.builtin.aggregate import SessionWindowAggregateProcessor, TimeWindowAggregateProcessor
from speed_layer.processor.builtin.suppress import SuppressProcessor
from speed_layer.state.factories import build_store
from speed_layer.state.keys import decode_key, encode_key
from speed_layer.windows import SessionWindows, TimeWindows

from ..general.topology import FULL_HISTORY_MS
from ._accumulators import flush
from ._chain import Step, StreamEmitter
from ._plan import FrameBase, StreamPipe
from ._records import ORDER, STREAM_SCHEMA, Errors, Rec, _stream_frame, add_error, dumps, group_fn, sorted_rows
from ._replay_context import ReplayContext
from .base import Translator, Unsupported
from .stream_joins import _check_order_free_downstream, _upstream
from .table import ToStreamTranslator

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext

_LATE = ("suppress(until_window_closes) emits a window's final result when stream time passes its close, with the "
         "timestamp of the window's latest update")


def _aggregate(node: GraphNode, topology: "Topology") -> GraphNode:
    """The ``AggregateOp`` node ``node`` (a ``SuppressOp``) suppresses.

    Raises:
        Unsupported: for any suppress but until-window-close with an unbounded buffer over a
            time- or session-windowed aggregation of a stateless chain over source topics,
            whose output only goes to ``toStream`` nodes with order-free consumers.
    """
    op: ops.SuppressOp = node.op
    if op.suppressed.kind != "window_close":
        raise Unsupported("only suppress(until_window_closes) is translated (until_time_limit emits by each key's first "
                          "update time and may emit tombstones)")
    buf = op.suppressed.buffer
    if buf.max_records is not None or buf.max_bytes is not None:
        raise Unsupported("a suppress with a bounded buffer is not translated (it shuts down when full; its byte size "
                          "estimate reads record metadata)")
    parent = topology.nodes[node.parents[0]] if len(node.parents) == 1 else None
    agg = parent.op if parent is not None else None
    if not isinstance(agg, ops.AggregateOp) or not isinstance(agg.windows, (TimeWindows, SessionWindows)):
        kind = type(agg).__name__ if agg is not None else "none"
        raise Unsupported(f"suppress is only translated directly over a tumbling / hopping / session windowed "
                          f"aggregation, not over {kind} node {node.parents[0] if node.parents else None!r}")
    if agg.kind not in ("count", "reduce", "aggregate") or (isinstance(agg.windows, SessionWindows) and agg.kind == "aggregate"
                                                              and agg.merger is None):
        raise Unsupported(f"aggregation kind {agg.kind!r} (or a session aggregate without merger) is not translated")
    strategy = getattr(agg.windows, "emit_strategy", None)
    if strategy is not None and strategy.emits_on_close:
        raise Unsupported("a suppress over an aggregation emitting on window close (KIP-825) is not translated")
    if agg.store not in topology.stores or len(parent.parents) != 1:
        raise Unsupported(f"aggregation {parent.name!r} must read one stream and have a registered store")
    _, internal = _upstream(topology, parent.parents[0], "a suppressed aggregation's input")
    if internal:
        raise Unsupported("a suppressed aggregation read through a repartition topic is not translated (its stream time "
                          "is per task, and the task of a record is then the sink's partitioner's)")
    for child in topology.children(node.name):
        if not isinstance(topology.nodes[child].op, ops.ToStreamOp):
            raise Unsupported(f"a suppressed table is only translated into toStream, not into "
                              f"{type(topology.nodes[child].op).__name__} node {child!r}")
        _check_order_free_downstream(topology, child, _LATE)
    return parent


def _replay_spec(spec: StoreSpec) -> StoreSpec:
    """``spec`` as the general executor builds it, in memory and without a changelog."""
    return replace(spec, in_memory=True, logging=False,
                   retention_ms=FULL_HISTORY_MS if spec.kind in ("window", "session") else spec.retention_ms)


class SuppressTranslator(Translator):
    """``SuppressOp`` (see the module docstring): a stream frame of ``Change`` values."""

    def dependencies(self, node: GraphNode, topology: "Topology") -> tuple[str, ...]:
        parent = topology.nodes[node.parents[0]]
        return parent.parents if isinstance(parent.op, ops.AggregateOp) else node.parents

    def check(self, node: GraphNode, topology: "Topology") -> None:
        _aggregate(node, topology)

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        topology = ctx.plan.topology
        agg = _aggregate(node, topology)
        stores = tuple(_replay_spec(topology.stores[s]) for s in (agg.op.store, node.op.store))
        df = ctx.stream(agg.parents[0]).materialize(ctx, StreamEmitter())
        fn = SuppressGroup(agg, node, stores, ctx.errors_acc)
        return StreamPipe.of(FrameBase(df.groupBy("p").applyInPandas(group_fn(fn), STREAM_SCHEMA)))


class SuppressGroup:
    """``applyInPandas`` over one task's input records of the aggregation (stream frame in,
    stream frame of what the suppress forwards out), see the module docstring."""

    def __init__(self, agg: GraphNode, suppress: GraphNode, stores: tuple[StoreSpec, ...], errors_acc: Any) -> None:
        self.agg, self.suppress, self.stores, self.errors_acc = agg, suppress, stores, errors_acc

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        out: list[tuple[Any, ...]] = []
        stores = {s.name: build_store(s, None, None) for s in self.stores}
        emitted: list[Record[Any, Any]] = []
        sup = SuppressProcessor(self.suppress)
        sup.init(ReplayContext(stores, emitted.append))
        cls = SessionWindowAggregateProcessor if isinstance(self.agg.op.windows, SessionWindows) else TimeWindowAggregateProcessor
        agg = cls(self.agg)
        agg.init(ReplayContext(stores, sup.process))
        agg_store = stores[self.agg.op.store]
        for _, ts, p, o, src, seq, kb, vb in sorted_rows(pdf, "p", ORDER, ["k", "v"]):
            emitted.clear()
            try:
                agg.process(Record(None if kb is None else decode_key(kb), None if vb is None else pickle.loads(vb), ts))
            except Exception:  # noqa: BLE001 - the processing-exception handler stops the record here
                add_error(errs, self.agg.name, (src, p, o))
            agg_store.flush()  # the commit after every record: the cache, then the buffer's writes
            sup.write_pending()
            for i, rec in enumerate(emitted):
                out.append((encode_key(rec.key), None if rec.value is None else dumps(rec.value), rec.timestamp, p, o, src,
                            f"{seq}{i:08x}"))
        flush(self.errors_acc, errs)
        return _stream_frame(out)


class SuppressedToStreamStep(Step):
    """``ToStreamProcessor`` over a suppressed table: the change's new value, the key
    through the optional ``mapper(key, new value)``."""

    def __init__(self, node: str, mapper: Any) -> None:
        self.node, self.mapper = node, mapper

    def __call__(self, r: Rec) -> list[Rec]:
        change: Change[Any] = r[1]
        key = self.mapper(r[0], change.new) if self.mapper else r[0]
        return [(key, change.new) + tuple(r[2:])]


class ToStreamOrSuppressedTranslator(Translator):
    """``ToStreamOp``: over a ``SuppressOp`` a :class:`SuppressedToStreamStep` on the
    suppress's stream, otherwise :class:`table.ToStreamTranslator`."""

    def __init__(self) -> None:
        self.table = ToStreamTranslator()

    @staticmethod
    def _suppressed(node: GraphNode, topology: "Topology") -> bool:
        return len(node.parents) == 1 and isinstance(topology.nodes[node.parents[0]].op, ops.SuppressOp)

    def check(self, node: GraphNode, topology: "Topology") -> None:
        if not self._suppressed(node, topology):
            self.table.check(node, topology)

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        if not self._suppressed(node, ctx.plan.topology):
            return self.table.build(node, ctx)
        return ctx.stream(node.parents[0]).then(SuppressedToStreamStep(node.name, node.op.mapper))


__all__ = ["SuppressGroup", "SuppressTranslator", "SuppressedToStreamStep", "ToStreamOrSuppressedTranslator"]
