"""What a pipeline declaration reads off its topology (:mod:`pipelines.declaration.pipeline` validates a
declaration against it): the user topics it reads and writes, and the stores an aggregation
writes (the stores duet can serve as views, with their windows)."""

from __future__ import annotations

from typing import Any

from speed_layer.topology import Topology

__all__ = ["source_topics", "sink_topics", "servable_stores"]


def source_topics(topo: Topology) -> list[str]:
    """The user topics ``topo`` reads (streams, tables, global tables; no repartition topic)."""
    from speed_layer.graph.ops import SourceOp

    out: list[str] = []
    for node in topo.nodes.values():
        op = node.op
        if isinstance(op, SourceOp) and not op.repartition:
            out.extend(t for t in op.topics if t not in out)
    return out


def sink_topics(topo: Topology) -> set[str]:
    """The user topics ``topo`` writes by name (no repartition topic)."""
    from speed_layer.graph.ops import SinkOp

    return {n.op.topic for n in topo.nodes.values()
            if isinstance(n.op, SinkOp) and not n.op.repartition and n.op.topic}


def servable_stores(topo: Topology) -> dict[str, Any]:
    """``{store: windows or None}`` of the stores an aggregation writes (KGroupedStream,
    cogroup or KGroupedTable): the stores duet can serve as views."""
    from speed_layer.graph.ops import AggregateOp, CogroupOp, TableAggregateOp

    out: dict[str, Any] = {}
    for node in topo.nodes.values():
        op = node.op
        if isinstance(op, (AggregateOp, CogroupOp)):
            out[op.store] = op.windows
        elif isinstance(op, TableAggregateOp):
            out[op.store] = None
    return out
