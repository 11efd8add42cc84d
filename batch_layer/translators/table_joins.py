"""KTable-KTable joins on the primary key (inner, left, outer; Kafka's KTableKTable*Join).

The DSL builds three nodes: a join side per table (``role`` ``"this"`` / ``"other"``,
each reading the other table's value getter) and the merger (``"merge"``), which holds the
join's store. The relational translation serves that store as a view:

1. each table's forwarded changes, exactly as ``toStream`` replays them
   (``TableToStreamGroup``: a KTable source, filter and mapValues stages, per key in batch
   order);
2. both change streams unioned and grouped by key; per key, the changes of both sides in
   batch order run through the join processor's logic and the merger's ``put``
   (``_table_join_runtime.TableJoinViewGroup``).

Because the store's final content depends only on each key's changes (the join is
co-partitioned on the key, and both sides of a key meet in one task), the view is the
speed layer's for the input in batch order. Translated when both joined tables are KTable
sources (not versioned) with optional filter / mapValues stages and the join is
materialized; the join's
change stream (``toStream`` of the result, a table op over it) is not reproduced
relationally: such a topology runs on the general executor.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode

from ._chain import StreamEmitter
from ._plan import TableChain, ViewRep
from ._records import STREAM_SCHEMA, VIEW_SCHEMA, group_fn
from ._table_join_runtime import TableJoinViewGroup
from ._tables import TableToStreamGroup
from .base import Translator, Unsupported, has_versioned_store, require_table_parent, table_root

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from speed_layer.topology import Topology

    from ._plan import ExecContext


class TableTableJoinTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        op: ops.TableTableJoinOp = node.op
        if op.kind not in ("inner", "left", "outer"):
            raise Unsupported(f"unknown KTable-KTable join kind {op.kind!r}")
        if op.role in ("this", "other"):
            require_table_parent(node, topology, "a KTable-KTable join side")
            if has_versioned_store(topology, table_root(topology, node.parents[0])):
                raise Unsupported("a KTable-KTable join over a versioned table is not translated (its out-of-order "
                                  "updates are flagged not-latest and dropped by the join: KIP-914)")
            return
        if op.store is None:
            raise Unsupported("a KTable-KTable join without a store is not translated (its change stream is not "
                              "reproduced relationally)")
        sides = [topology.nodes[p].op for p in node.parents]
        if len(node.parents) != 2 or {getattr(s, "role", None) for s in sides} != {"this", "other"}:
            raise Unsupported("a KTable-KTable join merger must read exactly its two join sides")

    def build(self, node: GraphNode, ctx: "ExecContext") -> TableChain | ViewRep:
        op: ops.TableTableJoinOp = node.op
        if op.role in ("this", "other"):
            return ctx.table(node.parents[0])
        topology = ctx.plan.topology
        by_role = {topology.nodes[p].op.role: p for p in node.parents}
        frames: list["DataFrame"] = []
        old_sent = []
        from pyspark.sql import functions as F

        for side, role in enumerate(("this", "other")):
            name = by_role[role]
            chain: TableChain = ctx.outputs[name]
            df = chain.changelog.materialize(ctx, StreamEmitter())
            fn = TableToStreamGroup(name, chain.table_stages, None, chain.source_has_store, ctx.errors_acc)
            changes = df.groupBy(ctx.bucket("k")).applyInPandas(group_fn(fn), STREAM_SCHEMA)
            frames.append(changes.withColumn("side", F.lit(side)))
            old_sent.append(chain.source_has_store)
        both = frames[0].unionByName(frames[1])
        fn = TableJoinViewGroup(node.name, op.kind, op.joiner, (old_sent[0], old_sent[1]), ctx.errors_acc)
        return ViewRep(both.groupBy(ctx.bucket("k")).applyInPandas(group_fn(fn), VIEW_SCHEMA), node.name)
