"""KStream-KStream windowed joins (inner, left, outer; Kafka's KStreamKStreamJoin since
3.1, asymmetric ``JoinWindows`` before / after, grace) on the relational path.

The DSL builds (``speed_layer/dsl/stream_joins.py``) a ``JoinWindowStoreOp`` per side
(forward, then buffer the record in the side's window store), a ``StreamStreamJoinOp`` per
side (join with the other side's store) and a ``MergeOp`` of both join nodes: the join's
output stream. The translation:

* the ``JoinWindowStoreOp`` nodes pass their input stream through;
* the left ``StreamStreamJoinOp`` builds the WHOLE join output (the right one an empty
  stream; the merge unions them): both sides' streams, tagged with their side, are
  shuffled and replayed in batch order through the speed layer's own join processors over
  in-memory stores (``_stream_join_runtime``), each output record keeping the order key of
  the record whose processing forwarded it;
* inner join: grouped by key (buckets of keys): an inner result depends only on its key's
  records, and is emitted when the later of its two records arrives, with that record's
  timestamp (``max`` of both) and order key, several results of one record in the other
  store's order (timestamp, then arrival), so the output stream is in batch order and any
  translated consumer downstream (an aggregation, another stateless step, a repartition)
  sees the records as the general executor feeds them;
* left / outer join: grouped by task (the input partition ``p``): an unmatched record is
  emitted by the first record of its task (both sides, any key) that takes stream time
  past its window's close (``window end + grace``), from the shared outer-join store in
  ``(timestamp, right before left, key)`` order, and only then; the task is replayed as
  a whole, in batch order, so which records are emitted and by which record is the
  speed layer's. Such a record keeps its own timestamp, older than the record that emits
  it: the output is no longer in timestamp order, which only an order-insensitive consumer
  may ignore (the relational folds sort a key's records by timestamp; a windowed
  aggregation would also drop it as late).

Refused (general executor): a self-join or sides that share an input topic (one record
reaching both sides is applied in the processor graph's depth-first order); a side that is
not a stateless chain over source / repartition topics, or reads a source with a timestamp
extractor (the batch order is the raw timestamps'); for left / outer joins, a side read
through a repartition or ``through`` topic (the task of a record is then the sink
partitioner's, and a null key's partition the collector's round robin) and a consumer
downstream other than stateless steps, repartitions and plain ``count`` (whose store does
not depend on the order of its records).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode

from ..model import STATELESS_OPS
from ._chain import StreamEmitter
from ._plan import FrameBase, StreamPipe
from ._records import STREAM_SCHEMA, group_fn
from ._stream_join_runtime import JoinSpec, StreamJoinGroup
from .base import Translator, Unsupported
from .sources import walk_upstream

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext

def join_nodes(node: GraphNode, topology: "Topology") -> tuple[GraphNode, GraphNode]:
    """``(left, right)`` ``StreamStreamJoinOp`` nodes of the join ``node`` belongs to.

    Raises:
        Unsupported: when the other side is not found.
    """
    op: ops.StreamStreamJoinOp = node.op
    for n in topology.nodes.values():
        if (isinstance(n.op, ops.StreamStreamJoinOp) and n.name != node.name and n.op.this_store == op.other_store
                and n.op.other_store == op.this_store):
            return (node, n) if op.this_is_left else (n, node)
    raise Unsupported(f"the other side of KStream-KStream join node {node.name!r} is not in the topology")


def _upstream(topology: "Topology", name: str, what: str = "a KStream-KStream join side") -> tuple[set[str], bool]:
    """``(raw input topics, read through a topology-written topic)`` of the stream ``name``.

    Raises:
        Unsupported: for a node that is not a source, a sink into a topic read back, or a
            stateless stream op, and for a source with a timestamp extractor.
    """
    topics: set[str] = set()
    internal = False
    for node, raw in walk_upstream(topology, name):
        if isinstance(node.op, ops.SourceOp):
            if node.op.timestamp_extractor is not None:
                raise Unsupported(f"{what} reads source {node.name!r} with a timestamp extractor (the "
                                  "batch order is the raw timestamps', the join's stream time the extracted ones)")
            topics.update(raw)
            internal = internal or len(raw) < len(node.op.topics)
        elif not isinstance(node.op, (ops.SinkOp, *STATELESS_OPS)):
            raise Unsupported(f"{what} is only translated over stateless stream ops on source or "
                              f"repartition topics, not over {type(node.op).__name__} node {node.name!r}")
    return topics, internal


_LATE_JOIN = "a left / outer KStream-KStream join emits an unmatched record when stream time passes its window's close"


def _check_order_free_downstream(topology: "Topology", merge: str, why: str = _LATE_JOIN) -> None:
    """Raise :class:`Unsupported` unless every consumer downstream of ``merge`` (the
    output of a left / outer join, or of a suppressed aggregation's ``toStream``) is a
    stateless step, a repartition or a plain count; ``why`` starts the reason."""
    children = topology.child_map()
    readers: dict[str, list[str]] = {}
    for n in topology.nodes.values():
        if isinstance(n.op, ops.SourceOp):
            for t in n.op.topics:
                readers.setdefault(t, []).append(n.name)
    seen: set[str] = set()
    stack = list(children.get(merge, ()))
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        op = topology.nodes[n].op
        if isinstance(op, ops.AggregateOp) and op.windows is None and op.kind == "count":
            continue
        if isinstance(op, ops.SinkOp):
            stack.extend(r for r in readers.get(op.topic or "", ()) if topology.nodes[r].op.repartition == op.repartition)
            continue
        if isinstance(op, STATELESS_OPS + (ops.SourceOp,)):
            stack.extend(children.get(n, ()))
            continue
        raise Unsupported(f"{why}, after younger records: only stateless steps, repartitions and a plain count "
                          f"downstream are translated (their result does not depend on that order), not "
                          f"{type(op).__name__} node {n!r}")


class JoinWindowTranslator(Translator):
    """``JoinWindowStoreOp``: forwards its input (the buffering is replayed by the join)."""

    def check(self, node: GraphNode, topology: "Topology") -> None:
        kids = topology.children(node.name)
        if len(node.parents) != 1 or len(kids) != 1 or not isinstance(topology.nodes[kids[0]].op, ops.StreamStreamJoinOp):
            raise Unsupported("a join window node must read one stream and feed one KStream-KStream join node")

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        return ctx.stream(node.parents[0])


class StreamStreamJoinTranslator(Translator):
    """``StreamStreamJoinOp`` (see the module docstring)."""

    def dependencies(self, node: GraphNode, topology: "Topology") -> tuple[str, ...]:
        if not node.op.this_is_left:
            return ()
        left, right = join_nodes(node, topology)
        return left.parents + right.parents

    def check(self, node: GraphNode, topology: "Topology") -> None:
        left, right = join_nodes(node, topology)
        windowed = []
        for j in (left, right):
            if len(j.parents) != 1 or not isinstance(topology.nodes[j.parents[0]].op, ops.JoinWindowStoreOp):
                raise Unsupported(f"KStream-KStream join node {j.name!r} must read its join window node")
            windowed.append(topology.nodes[j.parents[0]])
        merges = {tuple(topology.children(j.name)) for j in (left, right)}
        if len(merges) != 1 or len(next(iter(merges))) != 1:
            raise Unsupported("both sides of a KStream-KStream join must feed one merge node only")
        merge = next(iter(merges))[0]
        if not isinstance(topology.nodes[merge].op, ops.MergeOp) or set(topology.nodes[merge].parents) != {left.name, right.name}:
            raise Unsupported("both sides of a KStream-KStream join must feed one merge node only")
        (left_topics, li), (right_topics, ri) = (_upstream(topology, w.parents[0]) for w in windowed)
        common = left_topics & right_topics
        if common:
            raise Unsupported(f"both sides of KStream-KStream join {left.name!r} read topic(s) {sorted(common)} (a self-join: "
                              "one record reaches both sides in the processor graph's depth-first order, which the batch "
                              "order does not carry)")
        op: ops.StreamStreamJoinOp = left.op
        if op.left_outer or op.right_outer:
            if li or ri:
                raise Unsupported("a left / outer KStream-KStream join with a side read through a repartition topic is not "
                                  "translated (its stream time is per task, and the task of a record is then the sink's "
                                  "partitioner's, a null key's the producer's round robin)")
            _check_order_free_downstream(topology, merge)

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        from pyspark.sql import functions as F

        if not node.op.this_is_left:
            return StreamPipe.of(FrameBase(ctx.spark.createDataFrame([], STREAM_SCHEMA)))
        topology = ctx.plan.topology
        left, right = join_nodes(node, topology)
        windowed = (topology.nodes[left.parents[0]], topology.nodes[right.parents[0]])
        op: ops.StreamStreamJoinOp = left.op
        by_task = op.left_outer or op.right_outer
        frames = []
        for side, w in enumerate(windowed):
            df = ctx.stream(w.name).materialize(ctx, StreamEmitter())
            if not by_task:  # an inner join drops null keys and values (they only move stream time)
                df = df.where(F.col("k").isNotNull() & F.col("v").isNotNull())
            frames.append(df.withColumn("side", F.lit(side)))
        both = frames[0].unionByName(frames[1])
        stores = tuple(topology.stores[s] for s in (op.this_store, op.other_store, op.outer_store) if s is not None)
        fn = StreamJoinGroup(JoinSpec(windowed, (left, right), stores), by_task, ctx.errors_acc)
        grouped = both.groupBy("p") if by_task else both.groupBy(ctx.bucket("k"))
        return StreamPipe.of(FrameBase(grouped.applyInPandas(group_fn(fn), STREAM_SCHEMA)))
