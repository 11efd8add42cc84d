"""Cogrouped aggregations (KIP-150): each input of a cogroup runs Kafka's ordinary
aggregation processor for its windows (``KStreamAggregate``, ``KStreamWindowAggregate``,
``KStreamSlidingWindowAggregate`` or ``KStreamSessionWindowAggregate``) with its own
aggregator over the store all inputs share, exactly as Kafka's
``CogroupedStreamAggregateBuilder`` wires them. Each input processor keeps its own observed
stream time (grace is judged per input, as in Kafka).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...graph.nodes import GraphNode
from ...graph.ops import AggregateOp


def create_cogroup_processor(node: GraphNode) -> Any:
    """The aggregation processor of one cogroup input (a ``CogroupOp`` node): the
    processor of the equivalent ``AggregateOp("aggregate", ...)``."""
    from ..factory import PROCESSORS

    op = node.op
    agg = AggregateOp("aggregate", op.store, op.initializer, op.aggregator, op.windows, op.merger)
    return PROCESSORS[AggregateOp](replace(node, op=agg))
