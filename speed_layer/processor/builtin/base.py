"""Base of the built-in processors."""
from __future__ import annotations

import logging
from typing import Any, Callable

from ...graph.nodes import GraphNode
from ..api import Processor, Record
from ..internals import InternalProcessorContext

log = logging.getLogger("speed_layer.processor")


class OpProcessor(Processor[Any, Any]):
    """A built-in processor for one graph node; ``self.op`` is the node's op."""

    def __init__(self, node: GraphNode) -> None:
        self.node = node
        self.op: Any = node.op

    context: InternalProcessorContext

    def init(self, context: InternalProcessorContext) -> None:  # type: ignore[override]
        self.context = context
        # the context's own forward as an instance attribute: one frame less per record
        # and node than the method below (the hot path)
        self.forward = context.forward  # type: ignore[method-assign]

    def link_only_child(self, process: Callable[[Record[Any, Any]], None]) -> None:
        """Called by the task once every processor's ``init`` ran, when this node has
        exactly one child: ``process`` is that child's. A processor forwarding only with
        ``self.forward(record)`` (never naming a child; :class:`BranchProcessor` names
        them and does not link) calls it directly: one frame less per record and node."""
        self.forward = process  # type: ignore[method-assign]

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        """``context.forward``: to every child, or to ``child`` only (replaced by the
        context's own ``forward`` once :meth:`init` ran)."""
        self.context.forward(record, child)

    def dropped(self, reason: str, record: Record[Any, Any], window: tuple[str, Any, int] | None = None) -> None:
        """Count and log a dropped record (Kafka's ``dropped-records`` task metric);
        ``window`` = ``(store, key, window_start)`` names the window a late record missed
        (the runtime's ``late_windows()`` and ``late_records()`` report them)."""
        self.context.record_dropped(self.node.name, reason, window=window, timestamp=record.timestamp)
        log.debug("%s dropped record key=%r ts=%d: %s", self.node.name, record.key, record.timestamp, reason)


def versioned_upstream(context: InternalProcessorContext, node: GraphNode) -> bool:
    """Whether the table records ``node`` receives come from a versioned table (Kafka's
    ``InternalStreamsBuilder#isVersionedUpstream``, KIP-914): every parent's output is
    versioned. A node that materializes its output (a table source, a materialized filter or
    mapValues, a materialized join, an aggregation) is versioned iff its store is; any
    other node inherits from its parents; a node without parents is not versioned."""
    topology = context.topology
    return False if topology is None else graph_versioned_upstream(topology, node.name)


def graph_versioned_upstream(topology: Any, name: str, *, output: bool = False) -> bool:
    """:func:`versioned_upstream` for the node ``name`` of ``topology`` (with ``output``:
    whether the node's own output is versioned, Kafka's ``isVersionedOrVersionedUpstream``)."""
    memo: dict[str, bool] = {}

    def output_versioned(name: str) -> bool:
        if name not in memo:
            memo[name] = False  # guards against cycles
            n = topology.nodes[name]
            store = getattr(n.op, "store", None) if type(n.op).__name__ != "SuppressOp" else None
            if isinstance(store, str):
                spec = topology.stores.get(store)
                memo[name] = spec is not None and spec.kind == "versioned"
            else:
                memo[name] = inputs_versioned(name)
        return memo[name]

    def inputs_versioned(name: str) -> bool:
        parents = topology.nodes[name].parents
        return bool(parents) and all(output_versioned(p) for p in parents)

    return output_versioned(name) if output else inputs_versioned(name)
