"""Maps each graph op type to the processor that implements it in the speed layer.

``PROCESSORS`` is the registry; a new op registers its processor here (the batch layer
keeps its own registry of translations).
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import TopologyException
from ..graph import ops
from ..graph.nodes import GraphNode
from .builtin import aggregate, stateless, table
from .builtin import fk_join, joins
from .builtin.base import OpProcessor
from .builtin.sink import SinkProcessor


def _aggregate(node: GraphNode) -> OpProcessor:
    from ..windows import SessionWindows, SlidingWindows, TimeWindows

    w = node.op.windows
    if w is None:
        return aggregate.StreamAggregateProcessor(node)
    if isinstance(w, TimeWindows):
        return aggregate.TimeWindowAggregateProcessor(node)
    if isinstance(w, SessionWindows):
        return aggregate.SessionWindowAggregateProcessor(node)
    if isinstance(w, SlidingWindows):
        from .builtin.sliding import SlidingWindowAggregateProcessor

        return SlidingWindowAggregateProcessor(node)
    raise TopologyException(f"{node.name}: unsupported windows {w!r}")


def _lazy(module: str, name: str) -> Callable[[GraphNode], Any]:
    """A factory importing ``speed_layer.processor.builtin.<module>.<name>`` on first use."""

    def make(node: GraphNode) -> Any:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.builtin.{module}"), name)(node)

    return make


PROCESSORS: dict[type, Callable[[GraphNode], Any]] = {
    ops.SourceOp: stateless.SourceProcessor,
    ops.SinkOp: SinkProcessor,
    ops.FilterOp: stateless.FilterProcessor,
    ops.MapOp: stateless.MapProcessor,
    ops.MapValuesOp: stateless.MapValuesProcessor,
    ops.FlatMapOp: stateless.FlatMapProcessor,
    ops.FlatMapValuesOp: stateless.FlatMapValuesProcessor,
    ops.PeekOp: stateless.PeekProcessor,
    ops.BranchOp: stateless.BranchProcessor,
    ops.MergeOp: stateless.PassThroughProcessor,
    ops.ProcessOp: stateless.UserProcessor,
    ops.ToStreamOp: stateless.ToStreamProcessor,
    ops.TableFilterOp: stateless.TableFilterProcessor,
    ops.TableMapValuesOp: stateless.TableMapValuesProcessor,
    ops.TableSourceOp: table.TableSourceProcessor,
    ops.StreamTableJoinOp: table.StreamTableJoinProcessor,
    ops.GlobalStoreOp: table.GlobalStoreProcessor,
    ops.AggregateOp: _aggregate,
    ops.TableSelectOp: _lazy("table_aggregate", "TableSelectProcessor"),
    ops.TableAggregateOp: _lazy("table_aggregate", "TableAggregateProcessor"),
    ops.SuppressOp: _lazy("suppress", "SuppressProcessor"),
    ops.CogroupOp: _lazy("cogroup", "create_cogroup_processor"),
    ops.JoinWindowStoreOp: joins.JoinWindowProcessor,
    ops.StreamStreamJoinOp: joins.StreamStreamJoinProcessor,
    ops.TableTableJoinOp: joins.table_table_processor,
    ops.ForeignKeyJoinOp: fk_join.fk_processor,
}


def create_processor(node: GraphNode) -> Any:
    """A new processor instance for ``node`` (one per task).

    Raises:
        TopologyException: if no processor implements the node's op.
    """
    factory = PROCESSORS.get(type(node.op))
    if factory is None:
        raise TopologyException(f"{node.name}: the speed layer has no processor for {type(node.op).__name__}")
    return factory(node)
