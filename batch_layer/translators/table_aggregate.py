"""``KTable.group_by`` + ``KGroupedTable`` count / reduce / aggregate (adder and
subtractor; Kafka's KTableRepartitionMap and KTableAggregate / KTableReduce).

The DSL builds ``TableSelectOp`` -> repartition sink -> repartition source ->
``TableAggregateOp``. The relational translation:

1. ``TableSelectOp``: the upstream table's changes with their old values, replayed per
   upstream key in batch order (a KTable source with filter / mapValues stages), mapped by
   the selector into subtraction / addition records (``Change``) keyed by the new key
   (``_table_agg_runtime.TableSelectGroup``). Each keeps the order key of the table record
   that caused it plus its place among that record's sends.
2. The repartition sink and source pass them on (the sources translator replays a
   non-internal key serde of ``Grouped``).
3. ``TableAggregateOp``: grouped by the new key; per key, in that order, the subtractor on
   the old value and the adder on the new one (``TableAggFold``), into the store's view.

Why this is the speed layer's store: the speed layer fed the input in event-time order
sends each table record's subtraction and addition through the repartition topic at once,
so the records reaching one new key (from any upstream key, any partition) come in the
order of the table records that caused them, which is the order the fold sorts by; a
new key's aggregate depends only on that sequence.

Translated when the grouped table is a KTable source (not versioned: KIP-914's
out-of-order updates are skipped by the select) with optional filter / mapValues stages;
the aggregation's change stream (``toStream`` of the result, a table op over it) is not
reproduced relationally (read its store as a view).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode

from ._agg_prep import AggPrepEmitter
from ._chain import StreamEmitter
from ._plan import FrameBase, StreamPipe, TableChain, ViewRep
from ._records import STREAM_SCHEMA, VIEW_SCHEMA, group_fn
from ._table_agg_runtime import TableAggFold, TableSelectGroup
from ._tables import TableToStreamGroup
from .base import Translator, Unsupported, has_versioned_store, require_table_parent, table_root
from .sources import table_src_indexes, topic_writers

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext


class TableSelectTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        require_table_parent(node, topology, "KTable.group_by")
        table = table_root(topology, node.parents[0])
        if isinstance(table.op, ops.GlobalStoreOp):
            raise Unsupported("KTable.group_by over a global store is not translated")
        if has_versioned_store(topology, table):
            raise Unsupported("KTable.group_by over a versioned table is not translated (its out-of-order updates "
                              "are flagged not-latest and skipped by the select: KIP-914)")

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        chain: TableChain = ctx.table(node.parents[0])
        df = chain.changelog.materialize(ctx, StreamEmitter())
        replay = TableToStreamGroup(node.name, chain.table_stages, None, chain.source_has_store, ctx.errors_acc)
        fn = TableSelectGroup(node.name, node.op.selector, replay, ctx.errors_acc)
        return StreamPipe.of(FrameBase(df.groupBy(ctx.bucket("k")).applyInPandas(group_fn(fn), STREAM_SCHEMA)))


class TableAggregateTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        op: ops.TableAggregateOp = node.op
        if op.kind not in ("count", "reduce", "aggregate"):
            raise Unsupported(f"unknown KGroupedTable aggregation kind {op.kind!r}")
        if op.store not in topology.stores:
            raise Unsupported(f"its store {op.store!r} is not registered in the topology")
        source = topology.nodes[node.parents[0]] if len(node.parents) == 1 else None
        if source is None or not isinstance(source.op, ops.SourceOp) or not source.op.repartition:
            raise Unsupported("a KGroupedTable aggregation is translated when it reads its repartition topic")
        for topic in source.op.topics:
            for w in topic_writers(topology, source, topic):
                parents = topology.nodes[w].parents
                if len(parents) != 1 or not isinstance(topology.nodes[parents[0]].op, ops.TableSelectOp):
                    raise Unsupported(f"its repartition topic {topic!r} is written by {w!r}, which does not read "
                                      "a KTable.group_by select")

    def build(self, node: GraphNode, ctx: "ExecContext") -> ViewRep:
        op: ops.TableAggregateOp = node.op
        spec = ctx.plan.topology.stores[op.store]
        prep = ctx.stream(node.parents[0]).materialize(ctx, AggPrepEmitter(node.name, spec.key_serde, None, None, None))
        fold = TableAggFold(node.name, op, ctx.errors_acc)
        fold.table_srcs = table_src_indexes(ctx.plan)
        return ViewRep(prep.groupBy(ctx.bucket("gk")).applyInPandas(group_fn(fold), VIEW_SCHEMA), node.name)
