"""KTable filter / mapValues / toStream.

A KTable is kept as its source changelog plus per-value stages (``TableChain``); filter and
mapValues add a stage, applied to each new value (``None`` stays ``None``; a value failing
the filter becomes ``None``, a tombstone). ``toStream`` replays each key's changes in batch
order with their old values, forwarding exactly the changes the speed layer forwards
(``TableSourceProcessor``: not when new and old are both None; ``TableFilterProcessor``:
idem after filtering with ``send_old_values``), then applies the optional key mapper.

A materialized filter / mapValues store is served as a view: the last change of each key
through the stages (no row when that is None), as the processors ``put`` it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from speed_layer.graph.nodes import GraphNode

from ._chain import StreamEmitter
from ._plan import FrameBase, StreamPipe, TableChain
from ._records import STREAM_SCHEMA, group_fn
from ._tables import TableToStreamGroup
from .base import Translator, require_table_parent

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext


class TableFilterTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        require_table_parent(node, topology, "KTable.filter")

    def build(self, node: GraphNode, ctx: "ExecContext") -> TableChain:
        return ctx.table(node.parents[0]).with_stage(("filter", node.name, node.op.predicate, node.op.negate,
                                                            getattr(node.op, "send_old_values", True), node.op.store is not None))


class TableMapValuesTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        require_table_parent(node, topology, "KTable.mapValues")

    def build(self, node: GraphNode, ctx: "ExecContext") -> TableChain:
        return ctx.table(node.parents[0]).with_stage(("map", node.name, node.op.mapper, node.op.with_key, None,
                                                            node.op.store is not None))


class ToStreamTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        require_table_parent(node, topology, "KTable.toStream")

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        chain = ctx.table(node.parents[0])
        df = chain.changelog.materialize(ctx, StreamEmitter())
        fn = TableToStreamGroup(node.name, chain.table_stages, node.op.mapper, chain.source_has_store, ctx.errors_acc)
        return StreamPipe.of(FrameBase(df.groupBy(ctx.bucket("k")).applyInPandas(group_fn(fn), STREAM_SCHEMA)))
