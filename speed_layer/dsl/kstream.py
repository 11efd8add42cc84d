"""KStream: an insert-only record stream (Kafka's ``KStream``).

Every method adds nodes to the builder's Topology and returns a new value; nothing runs
until the Topology is executed. Key-changing operations (``map``, ``select_key``,
``flat_map``) mark the stream so that a following ``group_by_key`` or join repartitions
it through an internal topic first, as Kafka does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..errors import TopologyException
from ..graph.ops import (
    BranchOp, FilterOp, FlatMapOp, FlatMapValuesOp, MapOp, MapValuesOp, MergeOp, PeekOp,
    ProcessOp, SinkOp, StreamTableJoinOp, TableSourceOp,
)
from ..options import Grouped, Joined, Materialized, Named, Produced, Repartitioned, StreamJoined
from ..serde import Serde
from ..windows import JoinWindows

if TYPE_CHECKING:
    from .builder import StreamsBuilder
    from .grouped import KGroupedStream
    from .ktable import GlobalKTable, KTable


def _n(named: Named | str | None) -> str | None:
    return named.name if isinstance(named, Named) else named


class KStream:
    """A record stream. ``source_topics`` are the topics its records come from (used for
    co-partitioning checks); ``repartition_required`` is set after a key change."""

    def __init__(
        self,
        builder: "StreamsBuilder",
        node: str,
        source_topics: tuple[str, ...],
        *,
        repartition_required: bool = False,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> None:
        self.builder = builder
        self.node = node
        self.source_topics = source_topics
        self.repartition_required = repartition_required
        self.key_serde = key_serde
        self.value_serde = value_serde

    def _add(self, prefix: str, op: Any, named: Named | str | None = None, *, key_changed: bool = False, stores: tuple[str, ...] = ()) -> "KStream":
        name = self.builder._name(_n(named), prefix)
        self.builder.topology.add_node(name, op, (self.node,), stores)
        return KStream(
            self.builder, name, self.source_topics,
            repartition_required=self.repartition_required or key_changed,
            key_serde=None if key_changed else self.key_serde,
            value_serde=self.value_serde,
        )

    # ------------------------------------------------------------------ stateless
    def filter(self, predicate: Callable[[Any, Any], bool], named: Named | str | None = None) -> "KStream":
        """Keep records where ``predicate(key, value)`` is true. Stateless."""
        return self._add("KSTREAM-FILTER", FilterOp(predicate), named)

    def filter_not(self, predicate: Callable[[Any, Any], bool], named: Named | str | None = None) -> "KStream":
        """Drop records where ``predicate(key, value)`` is true. Stateless."""
        return self._add("KSTREAM-FILTER", FilterOp(predicate, negate=True), named)

    def map(self, mapper: Callable[[Any, Any], tuple[Any, Any]], named: Named | str | None = None) -> "KStream":
        """``mapper(key, value) -> (new_key, new_value)``. Marks the stream for repartitioning."""
        return self._add("KSTREAM-MAP", MapOp(mapper), named, key_changed=True)

    def map_values(self, mapper: Callable[..., Any], named: Named | str | None = None, *, with_key: bool = False) -> "KStream":
        """``mapper(value)`` (or ``mapper(key, value)`` with ``with_key``). Keeps the key."""
        return self._add("KSTREAM-MAPVALUES", MapValuesOp(mapper, with_key), named)

    def flat_map(self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]], named: Named | str | None = None) -> "KStream":
        """``mapper(key, value) -> [(k, v), ...]``: zero or more records per input."""
        return self._add("KSTREAM-FLATMAP", FlatMapOp(mapper), named, key_changed=True)

    def flat_map_values(self, mapper: Callable[..., Iterable[Any]], named: Named | str | None = None, *, with_key: bool = False) -> "KStream":
        """``mapper(value) -> [v, ...]``: zero or more records with the same key."""
        return self._add("KSTREAM-FLATMAPVALUES", FlatMapValuesOp(mapper, with_key), named)

    def select_key(self, mapper: Callable[[Any, Any], Any], named: Named | str | None = None) -> "KStream":
        """New key ``mapper(key, value)``, same value. Marks the stream for repartitioning."""
        return self._add("KSTREAM-KEY-SELECT", MapOp(mapper, key_only=True), named, key_changed=True)

    def peek(self, action: Callable[[Any, Any], None], named: Named | str | None = None) -> "KStream":
        """Call ``action(key, value)`` for each record and forward it unchanged."""
        return self._add("KSTREAM-PEEK", PeekOp(action), named)

    def foreach(self, action: Callable[[Any, Any], None], named: Named | str | None = None) -> None:
        """Call ``action(key, value)`` for each record (terminal)."""
        self._add("KSTREAM-FOREACH", PeekOp(action, terminal=True), named)

    def merge(self, other: "KStream", named: Named | str | None = None) -> "KStream":
        """Records of both streams (no ordering guarantee between them)."""
        name = self.builder._name(_n(named), "KSTREAM-MERGE")
        self.builder.topology.add_node(name, MergeOp(), (self.node, other.node))
        return KStream(self.builder, name, self.source_topics + other.source_topics,
                       repartition_required=self.repartition_required or other.repartition_required)

    def split(self, named: Named | str | None = None) -> "BranchedKStream":
        """Start a split: add branches with ``.branch(predicate, name)``, finish with
        ``.default_branch()`` or ``.no_default_branch()``; returns ``{name: KStream}``. A
        record goes to the first branch whose predicate matches (Kafka's BranchedKStream)."""
        return BranchedKStream(self, _n(named))

    def branch(self, *predicates: Callable[[Any, Any], bool], named: Named | str | None = None) -> list["KStream"]:
        """Deprecated Kafka API (``KStream#branch``): one stream per predicate; a record goes
        to the first match, records matching none are dropped. Names as Kafka:
        ``KSTREAM-BRANCH-<n>`` (or ``named``) and one ``KSTREAM-BRANCHCHILD-<n>`` per
        predicate (or ``<named>-predicate-<i>``)."""
        topo = self.builder.topology
        name = _n(named)
        branch_name = name or topo.names.new("KSTREAM-BRANCH")
        children = [f"{name}-predicate-{i}" if name else topo.names.new("KSTREAM-BRANCHCHILD") for i in range(len(predicates))]
        topo.add_node(branch_name, BranchOp(tuple(predicates), tuple(children)), (self.node,))
        out = []
        for child in children:
            topo.add_node(child, MergeOp(), (branch_name,))
            out.append(KStream(self.builder, child, self.source_topics, repartition_required=self.repartition_required,
                               key_serde=self.key_serde, value_serde=self.value_serde))
        return out

    # ------------------------------------------------------------------ sinks
    def to(self, topic: str | Callable[[Any, Any, Any], str], produced: Produced | None = None) -> None:
        """Write to ``topic`` (or to ``topic(key, value, record_context)``) with the
        ``produced`` serdes and partitioner (defaults: the config's serdes, murmur2)."""
        p = produced or Produced()
        name = self.builder._name(p.name, "KSTREAM-SINK")
        if callable(topic):
            op = SinkOp(None, topic, p.key_serde or self.key_serde, p.value_serde or self.value_serde, p.partitioner)
        else:
            op = SinkOp(topic, None, p.key_serde or self.key_serde, p.value_serde or self.value_serde, p.partitioner)
        self.builder.topology.add_node(name, op, (self.node,))

    def repartition(self, repartitioned: Repartitioned | None = None) -> "KStream":
        """Write to and read back from the internal topic
        ``<application.id>-<name>-repartition`` (partition count from ``repartitioned``,
        else decided at start-up: the co-partitioned topics' count, or the upstream
        maximum). Records with a null key are dropped."""
        r = repartitioned or Repartitioned()
        base = r.name or self.builder.topology.names.new("KSTREAM-REPARTITION")
        src = self.builder._repartition(self.node, base, partitions=r.number_of_partitions, partitioner=r.partitioner,
                                        key_serde=r.key_serde, value_serde=r.value_serde)
        return KStream(self.builder, src, (f"{base}-repartition",), key_serde=r.key_serde, value_serde=r.value_serde)

    def through(self, topic: str, produced: Produced | None = None) -> "KStream":
        """Write to a user topic and read it back (deprecated in Kafka; ``repartition`` is
        preferred). The topic must exist with the wanted partition count."""
        self.to(topic, produced)
        p = produced or Produced()
        return self.builder.stream(topic, _consumed(p.key_serde, p.value_serde))

    def _maybe_repartition(self, base: str, grouped: Grouped | None = None) -> "KStream":
        if not self.repartition_required:
            return self
        g = grouped or Grouped()
        src = self.builder._repartition(self.node, g.name or base, key_serde=g.key_serde, value_serde=g.value_serde)
        topic = f"{g.name or base}-repartition"
        return KStream(self.builder, src, (topic,), key_serde=g.key_serde, value_serde=g.value_serde)

    # ------------------------------------------------------------------ processor API
    def process(self, supplier: Callable[[], Any], *store_names: str, named: Named | str | None = None) -> "KStream":
        """Run a Processor-API processor (``supplier()`` makes one per task) with access to
        ``store_names``. The output may change keys (marks repartitioning)."""
        return self._add("KSTREAM-PROCESSOR", ProcessOp(supplier), named, key_changed=True, stores=tuple(store_names))

    def process_values(self, supplier: Callable[[], Any], *store_names: str, named: Named | str | None = None) -> "KStream":
        """As ``process`` but the processor must not change keys (no repartitioning)."""
        return self._add("KSTREAM-PROCESSVALUES", ProcessOp(supplier, values_only=True), named, stores=tuple(store_names))

    # ------------------------------------------------------------------ grouping
    def group_by_key(self, grouped: Grouped | None = None) -> "KGroupedStream":
        """Group by the current key (repartitions first if the key was changed)."""
        from .grouped import KGroupedStream

        g = grouped or Grouped()
        return KGroupedStream(self, g)

    def group_by(self, selector: Callable[[Any, Any], Any], grouped: Grouped | None = None) -> "KGroupedStream":
        """Group by ``selector(key, value)``: a key change, so the aggregation repartitions."""
        return self.select_key(selector).group_by_key(grouped)

    def to_table(self, named: Named | str | None = None, materialized: Materialized | None = None) -> "KTable":
        """Interpret the stream as a changelog (Kafka's ``KStream#toTable``): the latest
        value per key; None deletes; null keys are dropped. Repartitions first when the key
        was changed (topic ``<name>-repartition``). Names as Kafka: the processor
        ``KSTREAM-TOTABLE-<n>`` first, then the store ``KSTREAM-TOTABLE-STATE-STORE-<n>``;
        materialized at once when ``materialized`` names a store, else when needed."""
        from .builder import kv_store_spec
        from .ktable import KTable

        topo = self.builder.topology
        m = materialized or Materialized()
        name = self.builder._name(_n(named), "KSTREAM-TOTABLE")
        store = m.store_name or topo.names.store_name("KSTREAM-TOTABLE")
        s = self._maybe_repartition(name)
        topo.add_node(name, TableSourceOp(None), (s.node,))
        table = KTable(self.builder, name, s.source_topics, kind="source", pending_store=kv_store_spec(store, m),
                       queryable=m.store_name is not None)
        if m.store_name is not None:
            table._ensure_materialized()
        return table

    # ------------------------------------------------------------------ joins
    def join(self, other: Any, *args: Any, **kwargs: Any) -> "KStream":
        """Inner join, as Kafka's three overloads:

        * ``join(table: KTable, joiner(value, table_value), joined=None)``: for each
          stream record, look the table up by key; no output when absent.
        * ``join(gtable: GlobalKTable, key_selector(key, value), joiner(value, table_value))``:
          a record whose key selector returns None, or whose value is None, is dropped
          (``dropped-records``).
        * ``join(stream: KStream, joiner(v1, v2), windows: JoinWindows, stream_joined=None)``:
          windowed; output timestamp is the larger of both.
        """
        return self._join(other, "inner", *args, **kwargs)

    def left_join(self, other: Any, *args: Any, **kwargs: Any) -> "KStream":
        """Left join (same overloads as ``join``): unmatched records are joined with None;
        for a KStream-KStream join they are emitted when the window closes (Kafka >= 3.1).

        Nulls (KIP-962): a record with a null value is dropped (``dropped-records``); one
        with a null join key is joined with None -- for a KTable a null record key, for a
        GlobalKTable a ``key_selector`` returning None (Kafka >= 4.1, KAFKA-19208; Kafka
        3.7-4.0 dropped the latter when the stream key was not null). A GlobalKTable join
        looks a null-keyed record up by ``key_selector(key, value)``."""
        return self._join(other, "left", *args, **kwargs)

    def outer_join(self, other: "KStream", joiner: Callable[[Any, Any], Any], windows: JoinWindows, stream_joined: StreamJoined | None = None) -> "KStream":
        """KStream-KStream outer join; unmatched records of either side are emitted when the
        window closes."""
        return self._join(other, "outer", joiner, windows, stream_joined)

    def _join(self, other: Any, kind: str, *args: Any, **kwargs: Any) -> "KStream":
        from .ktable import GlobalKTable, KTable

        if isinstance(other, KTable):
            return self._join_table(other, kind, *args, **kwargs)
        if isinstance(other, GlobalKTable):
            return self._join_global(other, kind, *args, **kwargs)
        if isinstance(other, KStream):
            from .stream_joins import stream_stream_join

            return stream_stream_join(self, other, kind, *args, **kwargs)
        raise TypeError(f"cannot join a KStream with {type(other).__name__}")

    def _join_table(self, table: "KTable", kind: str, joiner: Callable[..., Any], joined: Joined | None = None, *, with_key: bool = False) -> "KStream":
        if kind == "outer":
            raise TopologyException("KStream-KTable outer join does not exist (Kafka: only join and leftJoin)")
        from .table_joins import value_getter

        # Kafka's KStreamImpl#doStreamTableJoin reads ``table.valueGetterSupplier()``: the
        # table's store, or (a suppressed table, an unmaterialized filter/mapValues) a view
        # over its parent's store; the processor rebuilds that view from the graph
        stores = (table.store,) if table.store is not None else value_getter(table).store_names()
        j = joined or Joined()
        s = self._maybe_repartition(j.name or self.builder.topology.names.new("KSTREAM-JOIN"))
        topo = self.builder.topology
        name = self.builder._name(j.name, "KSTREAM-JOIN" if kind == "inner" else "KSTREAM-LEFTJOIN")
        topo.add_node(name, StreamTableJoinOp(stores[0], joiner, kind == "left", table_node=table.node, joiner_with_key=with_key, grace_ms=j.grace_ms), (s.node,), stores)
        topo.copartition_groups.append(frozenset(s.source_topics + table.source_topics))
        return KStream(self.builder, name, s.source_topics)

    def _join_global(self, gtable: "GlobalKTable", kind: str, key_selector: Callable[[Any, Any], Any], joiner: Callable[..., Any], named: Named | str | None = None, *, with_key: bool = False) -> "KStream":
        if kind == "outer":
            raise TopologyException("KStream-GlobalKTable outer join does not exist")
        name = self.builder._name(_n(named), "KSTREAM-JOIN" if kind == "inner" else "KSTREAM-LEFTJOIN")
        self.builder.topology.add_node(
            name, StreamTableJoinOp(gtable.store, joiner, kind == "left", key_selector, True, gtable.node, with_key), (self.node,), (gtable.store,)
        )
        return KStream(self.builder, name, self.source_topics, repartition_required=self.repartition_required)


def _consumed(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Any:
    from ..options import Consumed

    return Consumed(key_serde=key_serde, value_serde=value_serde)


class BranchedKStream:
    """Result of ``KStream.split()`` (Kafka's ``BranchedKStream``, KIP-418): add branches,
    then finish with ``default_branch()`` or ``no_default_branch()``, which return
    ``{branch name: KStream}``. A record goes to the first branch whose predicate matches.

    Names as Kafka's ``BranchedKStreamImpl``: the split node is ``split(named)`` or
    ``KSTREAM-BRANCH-<n>`` (allocated when ``split`` is called); a branch is
    ``<split name><branch name>``, or ``<split name><i>`` for the i-th unnamed branch
    (from 1; the default branch is ``<split name>0``); each branch also allocates one
    ``KSTREAM-BRANCHCHILD`` index. ``chain(stream)`` runs when the branch is added; its
    result is what the map holds (a branch whose chain returns None is left out).
    """

    def __init__(self, stream: KStream, name: str | None) -> None:
        self.stream = stream
        topo = stream.builder.topology
        self.prefix = name or topo.names.new("KSTREAM-BRANCH")
        self._predicates: list[Callable[[Any, Any], bool] | None] = []
        self._children: list[str] = []
        self._out: dict[str, KStream] = {}
        self._index = 0
        topo.add_node(self.prefix, BranchOp((), ()), (stream.node,))

    def _add(self, predicate: Callable[[Any, Any], bool] | None, name: str | None, index: int,
             chain: Callable[[KStream], KStream | None] | None) -> None:
        from dataclasses import replace

        b = self.stream.builder
        topo = b.topology
        child = f"{self.prefix}{name if name is not None else index}"
        self._predicates.append(predicate)
        self._children.append(child)
        node = topo.nodes[self.prefix]
        topo.nodes[self.prefix] = replace(node, op=BranchOp(tuple(self._predicates), tuple(self._children)))
        topo.names.new("KSTREAM-BRANCHCHILD")
        topo.add_node(child, MergeOp(), (self.prefix,))
        ks = KStream(b, child, self.stream.source_topics, repartition_required=self.stream.repartition_required,
                     key_serde=self.stream.key_serde, value_serde=self.stream.value_serde)
        result = chain(ks) if chain else ks
        if result is not None:
            self._out[child] = result
        self._index += 1

    def branch(self, predicate: Callable[[Any, Any], bool], name: str | None = None, chain: Callable[[KStream], KStream | None] | None = None) -> "BranchedKStream":
        """Records matching ``predicate(key, value)`` (and no earlier branch) go here;
        ``chain`` may transform the branch stream (Kafka's ``Branched.withFunction``)."""
        self._add(predicate, name, self._index + 1, chain)
        return self

    def default_branch(self, name: str | None = None, chain: Callable[[KStream], KStream | None] | None = None) -> dict[str, KStream]:
        """Records matching no branch go to the default branch (``<split name>0`` unless named)."""
        self._add(None, name, 0, chain)
        return dict(self._out)

    def no_default_branch(self) -> dict[str, KStream]:
        """Finish: records matching no branch are dropped."""
        return dict(self._out)
