"""KGroupedStream aggregations (count / reduce / aggregate): plain, time-windowed
(tumbling / hopping), sliding-windowed and session-windowed, folding the SAME Python initializer /
aggregator / merger as the speed layer in batch order, with infinite grace (the batch layer
sees every record).

* Time windows: each record is routed to the block(s) of window starts it contributes to
  (blocks of ``window_block_ms``, a multiple of the advance and at least the window size, so
  a record lands in at most two blocks); ``groupBy(key bucket, block).applyInArrow`` folds
  every window of the block in record order with ``TimeWindows.windows_for``'s arithmetic
  (keys are hashed into ``BatchOptions.key_buckets`` buckets: one call folds many keys).
  A record is not copied once per window (24x for a 24 h / 1 h hopping window), only once
  per block.
* Sessions: ``groupBy(bucket of key bytes).applyInArrow`` replays, per key, ``SessionWindowAggregateProcessor``
  in timestamp order: records closer than or equal to the gap merge; a session is
  ``[first ts, last ts]``. The speed layer aggregates a merged session in ARRIVAL order
  (``merger(init, old)`` then the aggregator) which differs from timestamp order when
  records arrive out of order; for commutative aggregations (the flagship's) the results
  are equal, for order-sensitive ones the batch result is the in-order one.
* Plain: ``groupBy(bucket of key bytes).applyInArrow``, one fold per key.

* Sliding windows (KIP-450): ``groupBy(bucket of key bytes).applyInArrow`` replays, per
  key, the speed layer's ``SlidingWindowAggregateProcessor`` over an in-memory window store
  (``_sliding_runtime``).

Per key, records come in batch order ``(timestamp, table changes first, partition, offset,
topic)`` (``_records.ranked_rows``: a KTable's ``toStream`` merged with a stream applies
the table change first at one timestamp, as the general executor and the driver do).
Records with a null key are skipped; so are records with a null value for plain and
sliding aggregations, while time and session windows aggregate them (the speed layer's
processors, as Kafka's KStreamWindowAggregate and KStreamSessionWindowAggregate, drop null
keys only).
:func:`fold_view` also serves cogroups (``cogroup``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode, StoreSpec
from speed_layer.windows import SessionWindows, SlidingWindows, TimeWindows

from ._agg_prep import AggPrepEmitter
from ._folds import PlainFold, SessionFold, TimeWindowFold
from ._plan import PendingFold, StreamPipe, ViewRep
from ._sliding_runtime import SlidingFold
from .base import Translator, Unsupported
from .sources import table_src_indexes

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext


def block_ms(windows: TimeWindows, target_ms: int) -> int:
    """Block of window starts: a multiple of the advance, at least the size and ``target_ms``."""
    span = max(windows.size_ms, target_ms)
    return windows.advance_ms * -(-span // windows.advance_ms)


class AggregateTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        op: ops.AggregateOp = node.op
        if op.kind not in ("count", "reduce", "aggregate"):
            raise Unsupported(f"unknown aggregation kind {op.kind!r}")
        if op.windows is not None and not isinstance(op.windows, (TimeWindows, SessionWindows, SlidingWindows)):
            raise Unsupported(f"{type(op.windows).__name__} aggregations are not translated "
                              "(tumbling/hopping TimeWindows, SlidingWindows, SessionWindows and plain aggregations are)")
        if isinstance(op.windows, SessionWindows) and op.kind == "aggregate" and op.merger is None:
            raise Unsupported("a session aggregate needs a merger")
        if op.store not in topology.stores:
            raise Unsupported(f"its store {op.store!r} is not registered in the topology")

    def build(self, node: GraphNode, ctx: "ExecContext") -> ViewRep:
        op: ops.AggregateOp = node.op
        spec = ctx.plan.topology.stores[op.store]
        stream = ctx.stream(node.parents[0])
        return fold_view(ctx, node.name, stream, op, spec)


def fold_view(ctx: "ExecContext", name: str, stream: StreamPipe, op: Any, spec: StoreSpec) -> ViewRep:
    """The store of aggregation ``op`` (an ``AggregateOp``, or a cogroup's equivalent) of
    ``stream`` as a view: the fold of its windows (or none) per key in batch order. The
    view is planned by ``ExecContext.views`` (fused with the other requested views'
    aggregations when ``BatchOptions.fuse_aggregations``)."""
    w, key_serde = op.windows, spec.key_serde
    table_srcs = table_src_indexes(ctx.plan)
    if isinstance(w, TimeWindows):
        block = block_ms(w, ctx.plan.options.window_block_ms)
        fn: Any = TimeWindowFold(name, op, block, ctx.errors_acc)
        fn.table_srcs = table_srcs
        emitter = AggPrepEmitter(name, key_serde, w.size_ms, w.advance_ms, block, keep_null_values=True,
                                    value_free=fn.value_free)
        return ViewRep(None, name, PendingFold(stream, emitter, fn, blocks=True))
    if isinstance(w, SessionWindows):
        fn = SessionFold(name, op, ctx.errors_acc)
    elif isinstance(w, SlidingWindows):
        fn = SlidingFold(name, op, ctx.errors_acc, spec)
    else:
        fn = PlainFold(name, op, ctx.errors_acc)
    fn.table_srcs = table_srcs
    emitter = AggPrepEmitter(name, key_serde, None, None, None, keep_null_values=isinstance(w, SessionWindows),
                                value_free=fn.value_free)
    return ViewRep(None, name, PendingFold(stream, emitter, fn, blocks=False))
