"""Cogrouped aggregations (KIP-150; ``CogroupOp``): several grouped streams, each with its
own aggregator, folded into ONE store from a shared initializer, plain or windowed
(tumbling / hopping, sliding, session with a merger).

The speed layer runs one aggregation processor per input over the shared store; per key,
the store sees the records of every input in the order they arrive, each through its
input's aggregator. The relational translation is the aggregation fold of
``aggregate.fold_view`` over the union of the inputs, each record tagged with its input's
index (``(index, value)``) and an aggregator that dispatches on the tag: per key the
records of all inputs run in batch order ``(timestamp, table changes first, partition,
offset, topic)``, which is the order the speed layer (and the general executor) applies
them when fed the input in event-time order. Null keys are dropped, null values too for
plain and sliding cogroups (time and session windows aggregate them), as every input's
processor does.

The view is built by the store's writer (the first input's node); the other inputs' nodes
are folded into it. Refused (general executor): inputs that may see the same source
record (they read a common input topic: the order in which one record reaches two inputs
is the processor graph's depth-first order, which the batch order does not carry), and the
cogroup's change stream (the ``COGROUPKSTREAM-MERGE`` node: ``toStream`` of the result, a
table op over it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode
from speed_layer.windows import SessionWindows, SlidingWindows, TimeWindows

from ._chain import Step
from ._plan import StreamPipe, ViewRep
from ._records import Rec
from .aggregate import fold_view
from .base import Translator, Unsupported
from .sources import walk_upstream

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext


class TagStep(Step):
    """Wraps a record's value as ``(index, value)``; records with a null key are dropped,
    and with a null value unless ``keep_null_values`` (time and session windows: their
    processors aggregate null values, see ``aggregate``)."""

    def __init__(self, node: str, index: int, keep_null_values: bool) -> None:
        self.node, self.index, self.keep_null_values = node, index, keep_null_values

    def __call__(self, r: Rec) -> list[Rec] | None:
        if r[0] is None or (r[1] is None and not self.keep_null_values):
            return None
        return [(r[0], (self.index, r[1])) + r[2:]]


class CogroupAggregator:
    """``aggregator(key, (index, value), agg)``: the aggregator of input ``index``."""

    def __init__(self, aggregators: tuple[Any, ...]) -> None:
        self.aggregators = aggregators

    def __call__(self, key: Any, tagged: tuple[int, Any], agg: Any) -> Any:
        return self.aggregators[tagged[0]](key, tagged[1], agg)


def cogroup_inputs(node: GraphNode, topology: "Topology") -> list[GraphNode]:
    """The ``CogroupOp`` nodes sharing ``node``'s store, in creation order."""
    store = node.op.store
    return [n for n in topology.nodes.values() if isinstance(n.op, ops.CogroupOp) and n.op.store == store]


def input_topics(topology: "Topology", name: str) -> set[str]:
    """The raw input topics whose records can reach node ``name`` (through repartition
    and ``through`` topics written by the topology's own sinks)."""
    return {t for _node, raw in walk_upstream(topology, name) for t in raw}


class CogroupTranslator(Translator):
    def _is_writer(self, node: GraphNode, topology: "Topology") -> bool:
        return topology.store_writers.get(node.op.store) == node.name

    def dependencies(self, node: GraphNode, topology: "Topology") -> tuple[str, ...]:
        if not self._is_writer(node, topology):
            return node.parents
        return tuple(p for n in cogroup_inputs(node, topology) for p in n.parents)

    def check(self, node: GraphNode, topology: "Topology") -> None:
        op: ops.CogroupOp = node.op
        if not self._is_writer(node, topology):
            raise Unsupported("a cogroup's change stream (its COGROUPKSTREAM-MERGE node: toStream of the result, a "
                              "table op over it) is not reproduced relationally; its store is (read it as a view)")
        if op.store not in topology.stores:
            raise Unsupported(f"its store {op.store!r} is not registered in the topology")
        w = op.windows
        if w is not None and not isinstance(w, (TimeWindows, SlidingWindows, SessionWindows)):
            raise Unsupported(f"{type(w).__name__} cogroups are not translated")
        if isinstance(w, SessionWindows) and op.merger is None:
            raise Unsupported("a session cogroup needs a merger")
        inputs = cogroup_inputs(node, topology)
        if any(len(n.parents) != 1 for n in inputs):
            raise Unsupported("a cogroup input must read exactly one grouped stream")
        seen: dict[str, str] = {}
        for n in inputs:
            for t in input_topics(topology, n.parents[0]):
                if t in seen:
                    raise Unsupported(f"cogroup inputs {seen[t]!r} and {n.name!r} both read topic {t!r}: the order in "
                                      "which one record reaches two inputs (the processor graph's depth-first order) "
                                      "is not carried by the batch order")
                seen[t] = n.name

    def build(self, node: GraphNode, ctx: "ExecContext") -> ViewRep:
        op: ops.CogroupOp = node.op
        topology = ctx.plan.topology
        inputs = cogroup_inputs(node, topology)
        keep = isinstance(op.windows, (TimeWindows, SessionWindows))
        pipes = [ctx.stream(n.parents[0]).then(TagStep(n.name, i, keep)) for i, n in enumerate(inputs)]
        agg = ops.AggregateOp("aggregate", op.store, op.initializer, CogroupAggregator(tuple(n.op.aggregator for n in inputs)),
                              op.windows, op.merger)
        return fold_view(ctx, node.name, StreamPipe.union(pipes), agg, topology.stores[op.store])
