"""KTable-KTable foreign-key joins (KIP-213; inner and left, KIP-962's null foreign keys).

The DSL builds five ``ForeignKeyJoinOp`` nodes around two internal topics (``subscribe``
under the left table -> subscription topic -> ``receive`` -> ``join_foreign`` -> response
topic, ``foreign_table`` under the right table -> response topic, -> ``resolve``) and a
``TableSourceOp`` over the resolver (the result table, keyed by the left table's key). The
relational translation serves the resolver's record stream, so the result table is an
ordinary ``TableChain``: its store, its ``toStream``, a filter / mapValues / ``group_by``
over it are translated as for any KTable source. The resolver reads the two tables
directly (:meth:`ForeignKeyJoinTranslator.dependencies`); the other four nodes and the
internal topics' sinks and sources are not part of the plan:

1. the left table's forwarded changes (as ``toStream`` replays them, with old values), per
   left key in batch order, become subscription events keyed by foreign key
   (``_fk_join_runtime.SubscriptionGroup``: ``SubscriptionSendProcessor``'s logic);
2. unioned with the right table's forwarded changes keyed by their key, grouped by foreign
   key; per foreign key in batch order (``(timestamp, table changes first, partition,
   offset, topic)``) the subscription store, the right value lookup, the answer to every
   subscriber of a right change and the resolver's logic run
   (``_fk_join_runtime.ForeignKeyJoinGroup``), giving the resolver's records with their
   causes' order keys.

The speed layer fed its input in event-time order (the TopologyTestDriver, the general
executor) finishes each record's subscription / response round trip before the next
record, which is what this replay computes: the resolver's output is the same records in
the same order (module docstring of ``_fk_join_runtime``), so downstream consumers, order
sensitive ones included, are translated as usual.

Refused (general executor): a table that is not a KTable source with optional filter /
mapValues stages (a global table, a join or aggregation result: anything but a
``TableSourceOp`` chain), a versioned table on either side (KIP-914: out-of-order updates
are flagged not-latest and dropped by the subscribe and foreign-table processors), a
right table whose source store has caching disabled and has filter / mapValues stages (it
then forwards deletes of absent keys, which ``toStream``'s replay does not reproduce through
stages), both tables reading a common input topic (one record changing both tables is
applied in the processor graph's depth-first order, which the batch order does not carry),
and an FK-join node reached other than through its resolver.

Not modelled: a left or right filter / mapValues stage that raises (the speed layer's
table store took the change and its value getter raises again at lookup; here the change
is dropped), and a foreign key whose type differs from the right table's keys (the
right store's key serde and the subscription store's ``foreign_key_serde`` then compare
it differently); both run exactly on the general executor only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode
from speed_layer.state.keys import ORDERED_KEY, PICKLE

from ._chain import StreamEmitter
from ._fk_join_runtime import FK_SCHEMA, FkJoinSpec, ForeignChangesGroup, ForeignKeyJoinGroup, SubscriptionGroup
from ._plan import FrameBase, StreamPipe, TableChain
from ._records import STREAM_SCHEMA, group_fn
from ._tables import TableToStreamGroup
from .base import Translator, Unsupported, has_versioned_store, table_root
from .sources import table_src_indexes, topic_writers, walk_upstream

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext


class FkJoinNodes(NamedTuple):
    """The nodes of one foreign-key join, found from its resolver."""

    subscribe: str
    foreign_table: str
    left_table: str
    right_table: str


def _single(names: list[str], what: str) -> str:
    if len(names) != 1:
        raise Unsupported(f"a foreign-key join whose {what} is not a single node ({names}) is not translated")
    return names[0]


def _writer_parents(topology: "Topology", source_name: str, what: str) -> tuple[str, ...]:
    source = topology.nodes[source_name]
    if not isinstance(source.op, ops.SourceOp) or len(source.op.topics) != 1:
        raise Unsupported(f"the foreign-key join's {what} source {source_name!r} is not a single-topic source")
    sink = _single(topic_writers(topology, source, source.op.topics[0]), f"{what} topic writer")
    return topology.nodes[sink].parents


def fk_join_nodes(topology: "Topology", resolve: GraphNode) -> FkJoinNodes:
    """The subscribe and foreign-table nodes and both tables of the join whose resolver is
    ``resolve`` (the graph ``speed_layer.dsl.table_joins.foreign_key_join`` builds).

    Raises:
        Unsupported: the graph around ``resolve`` is not that one.
    """
    def role(name: str) -> str | None:
        return getattr(topology.nodes[name].op, "role", None)

    if len(resolve.parents) != 1:
        raise Unsupported("a foreign-key join resolver must read exactly its response topic")
    responders = _writer_parents(topology, resolve.parents[0], "response")
    join_foreign = _single([p for p in responders if role(p) == "join_foreign"], "subscription join")
    foreign_table = _single([p for p in responders if role(p) == "foreign_table"], "foreign-table join")
    receive = _single(list(topology.nodes[join_foreign].parents), "subscription receiver")
    if role(receive) != "receive":
        raise Unsupported(f"the foreign-key join's subscription join reads {receive!r}, not a subscription receiver")
    senders = _writer_parents(topology, _single(list(topology.nodes[receive].parents), "subscription source"),
                              "subscription")
    subscribe = _single([p for p in senders if role(p) == "subscribe"], "subscription sender")
    left = _single(list(topology.nodes[subscribe].parents), "left table")
    right = _single(list(topology.nodes[foreign_table].parents), "right table")
    return FkJoinNodes(subscribe, foreign_table, left, right)


def _table_source(topology: "Topology", name: str, side: str) -> tuple[GraphNode, bool]:
    """``(the TableSourceOp at the root of table ``name``, whether stages lie between)``.

    Raises:
        Unsupported: ``name`` is not a KTable source chain, or its store is versioned.
    """
    node = table_root(topology, name)
    staged = node.name != name
    if not isinstance(node.op, ops.TableSourceOp):
        raise Unsupported(f"a foreign-key join's {side} table is translated when it is a KTable source with optional "
                          f"filter / mapValues stages, but {name!r} is an op of type {type(node.op).__name__}")
    if has_versioned_store(topology, node):
        raise Unsupported(f"a foreign-key join over a versioned {side} table is not translated (its out-of-order updates "
                          "are flagged not-latest and dropped by the join's processors: KIP-914)")
    return node, staged


def _raw_topics(topology: "Topology", name: str) -> set[str]:
    return {t for _node, raw in walk_upstream(topology, name) for t in raw}


class ForeignKeyJoinTranslator(Translator):
    """``ForeignKeyJoinOp``: the ``resolve`` node outputs the resolver's record stream (see
    the module docstring); the other roles are refused (they are only reached through it)."""

    def dependencies(self, node: GraphNode, topology: "Topology") -> tuple[str, ...]:
        if node.op.role != "resolve":
            return node.parents
        parts = fk_join_nodes(topology, node)
        return (parts.left_table, parts.right_table)

    def check(self, node: GraphNode, topology: "Topology") -> None:
        op: ops.ForeignKeyJoinOp = node.op
        if op.role != "resolve":
            raise Unsupported(f"a foreign-key join's {op.role!r} node is only translated as part of the join, through "
                              "its resolver (its subscription / response records are not served)")
        parts = fk_join_nodes(topology, node)
        _table_source(topology, parts.left_table, "left")
        right_source, staged = _table_source(topology, parts.right_table, "right")
        spec = topology.stores.get(right_source.op.store or "")
        if staged and spec is not None and not spec.caching:
            raise Unsupported("a foreign-key join whose right table has filter / mapValues stages over a source store "
                              "without caching is not translated (the source forwards deletes of absent keys)")
        common = _raw_topics(topology, parts.left_table) & _raw_topics(topology, parts.right_table)
        if common:
            raise Unsupported(f"both tables of the foreign-key join read topic(s) {sorted(common)} (one record changing "
                              "both is applied in the processor graph's order, which the batch order does not carry)")

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        op: ops.ForeignKeyJoinOp = node.op
        topology = ctx.plan.topology
        parts = fk_join_nodes(topology, node)
        sub: ops.ForeignKeyJoinOp = topology.nodes[parts.subscribe].op
        fk_serde = sub.foreign_key_serde or ORDERED_KEY
        hash_serde = None
        if sub.hash_store:
            hash_serde = topology.stores[sub.hash_store].value_serde or PICKLE
        spec = FkJoinSpec(parts.subscribe, parts.foreign_table, node.name, sub.foreign_key_extractor,
                          sub.extractor_with_key, op.joiner, op.left, fk_serde, sub.key_serde or ORDERED_KEY,
                          sub.foreign_key_serde or ctx.plan.config.default_key_serde or ORDERED_KEY, hash_serde)
        left: TableChain = ctx.table(parts.left_table)
        right: TableChain = ctx.table(parts.right_table)
        right_source, _ = _table_source(topology, parts.right_table, "right")
        store = topology.stores.get(right_source.op.store or "")
        # a source store without a cache forwards a delete of an absent key (TableSourceProcessor)
        right_skips_empty = right.source_has_store and (store is None or store.caching)
        frames = []
        for chain, name, group, skips in ((left, parts.left_table, SubscriptionGroup, left.source_has_store),
                                          (right, parts.right_table, ForeignChangesGroup, right_skips_empty)):
            df = chain.changelog.materialize(ctx, StreamEmitter())
            replay = TableToStreamGroup(name, chain.table_stages, None, skips, ctx.errors_acc)
            fn = group(spec, replay, ctx.errors_acc)
            frames.append(df.groupBy(ctx.bucket("k")).applyInPandas(group_fn(fn), FK_SCHEMA))
        join = ForeignKeyJoinGroup(spec, ctx.errors_acc)
        join.table_srcs = table_src_indexes(ctx.plan)
        out = frames[0].unionByName(frames[1]).groupBy(ctx.bucket("gjk")).applyInPandas(group_fn(join), STREAM_SCHEMA)
        # the result table (this node's consumer) is read once per consumer of its own (its
        # view, toStream, group_by, ...): compute the join once when there are several
        readers = sum(ctx.plan.consumers.get(c, 0) for c in topology.children(node.name))
        if ctx.plan.options.persist_shared and readers > 1:
            from pyspark import StorageLevel

            out = out.persist(StorageLevel.DISK_ONLY)
            ctx.persisted.append(out)
        return StreamPipe.of(FrameBase(out))
