"""KStream-KTable and KStream-GlobalKTable joins as event-time as-of joins.

For each stream record, the table value is the one of the table change with the latest
timestamp <= the record's timestamp, ties resolved by batch order with table changes first
(they precede stream records of the same timestamp in the runtime). That is what the speed
layer's ``StreamTableJoinProcessor`` sees when records are processed in
``(timestamp, partition, offset)`` order. Lookup keys are compared as the table store
compares them: serialized with the store's key serde (default: the order-preserving key
encoding). The null-key / null-value rules, the joiner call and left-join semantics are the
processor's.

Two strategies (``BatchOptions.join_strategy``):

* ``broadcast``: the table's changelog (after its filter/mapValues stages) is collected and
  broadcast as ``{key bytes: (sorted timestamps, pickled values)}``; the join is then one
  more fused step of the stream's ``mapInPandas`` chain (no shuffle of the stream);
* ``shuffle``: stream records and table changes are unioned and grouped by (a hash bucket
  of) the lookup key; ``applyInPandas`` sorts each key's rows by ``(ts, side, partition,
  offset)`` and carries the last table value.

``auto`` (default) broadcasts when the table has at most ``broadcast_max_rows`` changes.

Stream-stream joins, table-table joins and foreign-key joins are not translated yet: they
raise :class:`~batch_layer.compiler.BatchCompileError` at compile time (no translator).
"""
from __future__ import annotations

from bisect import insort
from typing import TYPE_CHECKING, Any

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode
from speed_layer.state.keys import ORDERED_KEY

from ..model import TABLE_OPS
from ._asof_join import AsOfJoinGroup, BroadcastJoinStep, JoinPrepEmitter, TableRowsEmitter
from ._plan import FrameBase, StreamPipe
from ._records import STREAM_SCHEMA, group_fn
from .base import Translator, Unsupported

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext


def table_node_of(node: GraphNode, topology: "Topology") -> str:
    """The KTable / global store node a stream-table join reads.

    Raises:
        Unsupported: if no node of the topology writes the joined store.
    """
    op: ops.StreamTableJoinOp = node.op
    if op.table_node and op.table_node in topology.nodes:
        return op.table_node
    writer = topology.store_writers.get(op.table_store)
    if writer:
        return writer
    for n in topology.nodes.values():
        if isinstance(n.op, ops.GlobalStoreOp) and n.op.store == op.table_store:
            return n.name
    raise Unsupported(f"no node of the topology writes the joined store {op.table_store!r}")


class StreamTableJoinTranslator(Translator):
    def dependencies(self, node: GraphNode, topology: "Topology") -> tuple[str, ...]:
        return node.parents + (table_node_of(node, topology),)

    def check(self, node: GraphNode, topology: "Topology") -> None:
        table = topology.nodes[table_node_of(node, topology)]
        if not isinstance(table.op, TABLE_OPS):
            raise Unsupported(f"the joined table {table.name!r} is a {type(table.op).__name__}; only KTable "
                              "sources (with filter/mapValues) and GlobalKTables are translated")

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        op: ops.StreamTableJoinOp = node.op
        topology = ctx.plan.topology
        stream = ctx.stream(node.parents[0])
        chain = ctx.table(table_node_of(node, topology))
        spec = topology.stores.get(op.table_store)
        key_serde = (spec.key_serde if spec is not None else None) or ORDERED_KEY
        stages = chain.table_stages
        opts = ctx.plan.options
        if opts.join_strategy in ("auto", "broadcast"):
            rows_df = chain.changelog.materialize(ctx, TableRowsEmitter(chain.source_node, key_serde, stages, for_shuffle=False))
            limit = opts.broadcast_max_rows
            rows = rows_df.collect() if opts.join_strategy == "broadcast" else rows_df.limit(limit + 1).collect()
            if opts.join_strategy == "broadcast" or len(rows) <= limit:
                bc = ctx.spark.sparkContext.broadcast(_index(rows))
                ctx.broadcasts.append(bc)
                ctx.join_strategies[node.name] = "broadcast"
                return stream.then(BroadcastJoinStep(node.name, op, key_serde, bc))
        ctx.join_strategies[node.name] = "shuffle"
        table_df = chain.changelog.materialize(ctx, TableRowsEmitter(chain.source_node, key_serde, stages, for_shuffle=True))
        stream_df = stream.materialize(ctx, JoinPrepEmitter(node.name, op, key_serde))
        fn = AsOfJoinGroup(node.name, op, key_serde, ctx.errors_acc)
        from pyspark.sql import functions as F

        n = opts.key_buckets
        bk = F.when(F.col("gjk").isNull(), F.col("nb") + F.lit(n)).otherwise(F.pmod(F.xxhash64("gjk"), F.lit(n))).alias("bk")
        joined = stream_df.unionByName(table_df).groupBy(bk).applyInPandas(group_fn(fn), STREAM_SCHEMA)
        return StreamPipe.of(FrameBase(joined))


def _index(rows: list[Any]) -> dict[bytes, tuple[list[int], list[bytes | None]]]:
    """``{key bytes: (timestamps, pickled values)}`` sorted by batch order per key."""
    per_key: dict[bytes, list[tuple[Any, ...]]] = {}
    for r in rows:
        insort(per_key.setdefault(r["gjk"], []), (r["ts"], r["p"], r["o"], r["src"], r["seq"], r["v"]),
               key=lambda t: t[:5])
    return {k: ([t[0] for t in v], [None if t[5] is None else bytes(t[5]) for t in v]) for k, v in per_key.items()}
