"""KGroupedStream aggregations (count / reduce / aggregate): plain, time-windowed
(tumbling / hopping) and session-windowed, folding the SAME Python initializer /
aggregator / merger as the speed layer in batch order, with infinite grace (the batch layer
sees every record).

* Time windows: each record is routed to the block(s) of window starts it contributes to
  (blocks of ``window_block_ms``, a multiple of the advance and at least the window size, so
  a record lands in at most two blocks); ``groupBy(key bytes, block).applyInPandas`` folds
  every window of the block in record order with ``TimeWindows.windows_for``'s arithmetic
  (keys are hashed into ``BatchOptions.key_buckets`` buckets: one call folds many keys).
  A record is not copied once per window (24x for a 24 h / 1 h hopping window), only once
  per block.
* Sessions: ``groupBy(bucket of key bytes).applyInPandas`` replays, per key, ``SessionWindowAggregateProcessor``
  in timestamp order: records closer than or equal to the gap merge; a session is
  ``[first ts, last ts]``. The speed layer aggregates a merged session in ARRIVAL order
  (``merger(init, old)`` then the aggregator) which differs from timestamp order when
  records arrive out of order; for commutative aggregations (the flagship's) the results
  are equal, for order-sensitive ones the batch result is the in-order one.
* Plain: ``groupBy(bucket of key bytes).applyInPandas``, one fold per key.

Records with a null key or value are skipped (the speed layer drops them too). Sliding
windows are not translated yet (compile error).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode
from speed_layer.windows import SessionWindows, TimeWindows

from . import _runtime as rt
from ._plan import ViewRep
from .base import Translator, Unsupported

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
        if op.windows is not None and not isinstance(op.windows, (TimeWindows, SessionWindows)):
            raise Unsupported(f"{type(op.windows).__name__} aggregations are not translated yet "
                              "(tumbling/hopping TimeWindows, SessionWindows and plain aggregations are)")
        if isinstance(op.windows, SessionWindows) and op.kind == "aggregate" and op.merger is None:
            raise Unsupported("a session aggregate needs a merger")
        if op.store not in topology.stores:
            raise Unsupported(f"its store {op.store!r} is not registered in the topology")

    def build(self, node: GraphNode, ctx: "ExecContext") -> ViewRep:
        op: ops.AggregateOp = node.op
        spec = ctx.plan.topology.stores[op.store]
        stream = ctx.stream(node.parents[0])
        w = op.windows
        if isinstance(w, TimeWindows):
            block = block_ms(w, ctx.plan.options.window_block_ms)
            prep = stream.materialize(ctx, rt.AggPrepEmitter(node.name, spec.key_serde, w.size_ms, w.advance_ms, block))
            fn = rt.TimeWindowFold(node.name, op, block, ctx.errors_acc)
            return ViewRep(prep.groupBy(ctx.bucket("gk"), "blk").applyInPandas(rt.group_fn(fn), rt.VIEW_SCHEMA), node.name)
        prep = stream.materialize(ctx, rt.AggPrepEmitter(node.name, spec.key_serde, None, None, None))
        fold = rt.SessionFold(node.name, op, ctx.errors_acc) if isinstance(w, SessionWindows) else rt.PlainFold(node.name, op, ctx.errors_acc)
        return ViewRep(prep.groupBy(ctx.bucket("gk")).applyInPandas(rt.group_fn(fold), rt.VIEW_SCHEMA), node.name)
