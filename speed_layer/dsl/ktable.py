"""KTable (a changelog stream: latest value per key) and GlobalKTable (Kafka's)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..graph.ops import SuppressOp, TableFilterOp, TableMapValuesOp, TableSelectOp, ToStreamOp
from ..options import Grouped, Materialized, Named, Suppressed
from ..serde import Serde
from .kstream import KStream, _n

if TYPE_CHECKING:
    from .builder import StreamsBuilder
    from .grouped import KGroupedTable


class KTable:
    """A table (Kafka's ``KTable``). Records between KTable nodes carry ``Change(new, old)``.

    ``store`` is the store holding this table's current values, or None when the table is
    not materialized. As in Kafka, a source table (``StreamsBuilder.table``,
    ``KStream.to_table``) without a store name in its ``Materialized`` is materialized only
    when an operation needs its values: ``group_by``, ``suppress`` or a join (reading
    ``store`` materializes it). ``windowed`` tables come from windowed aggregations (keys
    are ``Windowed``).

    Old values ("sendOldValues" in Kafka) matter for ``filter``: a filter whose upstream
    does not send old values forwards a tombstone for every update that fails the
    predicate (even if the key was never in the table); once old values are sent
    (materialized upstream, or forced by ``group_by``/``suppress``), it only forwards a
    tombstone when a row stops matching.
    """

    def __init__(
        self,
        builder: "StreamsBuilder",
        node: str,
        source_topics: tuple[str, ...],
        *,
        store: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        windowed: bool = False,
        grace_ms: int = 0,
        parent: "KTable | None" = None,
        kind: str = "other",
        pending_store: Any = None,
        queryable: bool | None = None,
    ) -> None:
        self.builder = builder
        self.node = node
        self.source_topics = source_topics
        self._store = store
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.windowed = windowed
        self.grace_ms = grace_ms
        #: the upstream KTable (filter, map_values, suppress) for old-value propagation
        self._parent = parent
        #: "source", "filter", "map_values", "suppress", "aggregate" (KGroupedStream
        #: aggregations: old values only on request) or "other" (joins, table aggregations)
        self._kind = kind
        #: the StoreSpec a lazily materialized source table adds when forced
        self._pending_store = pending_store
        self._queryable = store is not None if queryable is None else queryable
        if kind == "filter":
            self._sends_old = store is not None or bool(parent and parent._enable_sending_old_values(False))
        elif kind in ("map_values",):
            self._sends_old = False
        elif kind == "source":
            self._sends_old = store is not None
        elif kind == "aggregate":
            self._sends_old = bool(getattr(builder.topology.nodes[node].op, "send_old_values", False))
        else:
            self._sends_old = True

    @property
    def store(self) -> str | None:
        """The store name; reading it materializes a lazily materialized source table (a
        join or an interactive query needs its values, as Kafka's value getter)."""
        if self._store is None and self._pending_store is not None:
            self._ensure_materialized()
        return self._store

    @store.setter
    def store(self, name: str | None) -> None:
        self._store = name

    def queryable_store_name(self) -> str | None:
        """The store name to query (Kafka returns null when no store name was given; here
        the generated name of a materialized table is returned too)."""
        return self.store

    def _ensure_materialized(self) -> None:
        """Add the pending store of a source table and connect it to the table's node."""
        from dataclasses import replace

        if self._store is not None or self._pending_store is None:
            return
        topo = self.builder.topology
        spec = self._pending_store
        topo.add_store(spec)
        node = topo.nodes[self.node]
        topo.nodes[self.node] = replace(node, op=replace(node.op, store=spec.name), stores=node.stores + (spec.name,))
        topo.store_writers[spec.name] = self.node
        self._store = spec.name
        self._pending_store = None
        self._sends_old = True

    def _enable_sending_old_values(self, force_materialization: bool) -> bool:
        """Kafka's ``KTableProcessorSupplier#enableSendingOldValues``: whether this table's
        updates carry old values, materializing upstream source tables when forced."""
        if self._kind == "source":
            if force_materialization:
                self._ensure_materialized()
            self._sends_old = self._store is not None
            return self._sends_old
        if self._kind in ("filter", "map_values"):
            if self._store is not None:
                self._set_sends_old()
                return True
            if self._parent is not None and self._parent._enable_sending_old_values(force_materialization):
                self._set_sends_old()
            return self._sends_old
        if self._kind == "suppress":
            return self._parent._enable_sending_old_values(force_materialization) if self._parent else True
        if self._kind == "aggregate" and not self._sends_old:
            # Kafka's KStreamAggProcessorSupplier#enableSendingOldValues
            from dataclasses import replace

            topo = self.builder.topology
            node = topo.nodes[self.node]
            topo.nodes[self.node] = replace(node, op=replace(node.op, send_old_values=True))
            self._sends_old = True
        return True

    def _set_sends_old(self) -> None:
        from dataclasses import replace

        if self._sends_old:
            return
        self._sends_old = True
        topo = self.builder.topology
        node = topo.nodes[self.node]
        if isinstance(node.op, TableFilterOp):
            topo.nodes[self.node] = replace(node, op=replace(node.op, send_old_values=True))

    def _add(self, prefix: str, op: Any, named: Named | str | None, materialized: Materialized | None, kind: str) -> "KTable":
        """Add a KTable filter or mapValues node, with Kafka's name allocation: an unnamed
        ``Materialized`` burns a store index (and is not materialized), then the processor
        name; only a named ``Materialized`` creates a (queryable) store."""
        from dataclasses import replace

        from .builder import kv_store_spec

        topo = self.builder.topology
        store = None
        stores: tuple[str, ...] = ()
        if materialized is not None and materialized.store_name is None:
            topo.names.store_name(prefix)
        name = self.builder._name(_n(named), prefix)
        if materialized is not None and materialized.store_name is not None:
            store = materialized.store_name
            topo.add_store(kv_store_spec(store, materialized))
            stores = (store,)
            op = replace(op, store=store)
        if kind == "filter":
            sends_old = store is not None or self._enable_sending_old_values(False)
            op = replace(op, send_old_values=sends_old)
        topo.add_node(name, op, (self.node,), stores)
        if store:
            topo.store_writers[store] = name
        return KTable(self.builder, name, self.source_topics, store=store, windowed=self.windowed, grace_ms=self.grace_ms,
                      parent=self, kind=kind)

    def filter(self, predicate: Callable[[Any, Any], bool], named: Named | str | None = None, materialized: Materialized | None = None) -> "KTable":
        """Keep rows where ``predicate(key, value)`` (stateless unless ``materialized`` names
        a store; Kafka's ``KTable#filter``). An update failing the predicate is forwarded as
        a tombstone; see the class docstring for when those tombstones are suppressed.
        Named ``KTABLE-FILTER-<n>``."""
        return self._add("KTABLE-FILTER", TableFilterOp(predicate), named, materialized, "filter")

    def filter_not(self, predicate: Callable[[Any, Any], bool], named: Named | str | None = None, materialized: Materialized | None = None) -> "KTable":
        """Drop rows where ``predicate(key, value)`` (as a tombstone downstream), as ``filter``."""
        return self._add("KTABLE-FILTER", TableFilterOp(predicate, negate=True), named, materialized, "filter")

    def map_values(self, mapper: Callable[..., Any], named: Named | str | None = None, materialized: Materialized | None = None, *, with_key: bool = False) -> "KTable":
        """``mapper(value)`` (or ``mapper(key, value)``) on every row's new and old value;
        deletes stay deletes. Named ``KTABLE-MAPVALUES-<n>``; materialized only when
        ``materialized`` names a store."""
        return self._add("KTABLE-MAPVALUES", TableMapValuesOp(mapper, with_key), named, materialized, "map_values")

    def to_stream(self, mapper: Callable[[Any, Any], Any] | None = None, named: Named | str | None = None) -> KStream:
        """The table's update stream: each update's new value (None for a delete), keyed by
        the table key (or ``mapper(key, value)``)."""
        name = self.builder._name(_n(named), "KTABLE-TOSTREAM")
        self.builder.topology.add_node(name, ToStreamOp(mapper), (self.node,))
        return KStream(self.builder, name, self.source_topics, repartition_required=mapper is not None)

    def suppress(self, suppressed: Suppressed) -> "KTable":
        """Hold back updates of this table (stateful, KIP-328; Kafka's ``KTable#suppress``).

        * ``Suppressed.until_window_closes(buffer)``: exactly one final result per window,
          emitted once the suppress processor's observed stream time (the largest record
          timestamp it has seen) reaches window end + grace of the upstream windowed
          aggregation (session windows: end + gap + grace). Tombstones are not emitted.
        * ``Suppressed.until_time_limit(ms, buffer)``: the latest value of a key is emitted
          ``ms`` after the first buffered update of that key (tombstones included).

        The buffer is an in-memory store with a changelog, named ``<name>-store`` when the
        suppression is named, else ``KTABLE-SUPPRESS-STATE-STORE-<n>`` (Kafka's names).

        Raises:
            TopologyException: ``until_window_closes`` on a table that does not come from a
            windowed aggregation; on a versioned table or one derived from a versioned table
            without a non-versioned materialization in between (Kafka: "suppress() is only
            supported for non-versioned KTables").
        """
        topo = self.builder.topology
        from ..errors import TopologyException
        from ..processor.builtin.base import graph_versioned_upstream

        # Kafka's InternalStreamsBuilder#enableVersionedSemantics (KIP-914)
        if graph_versioned_upstream(topo, self.node, output=True):
            raise TopologyException("suppress() is only supported for non-versioned KTables "
                                    "(note that version semantics might be inherited from upstream)")
        name = self.builder._name(suppressed.name, "KTABLE-SUPPRESS")
        from ..graph.nodes import StoreSpec

        grace = _find_window_grace(topo, self.node) if suppressed.kind == "window_close" else 0
        self._enable_sending_old_values(True)
        store = f"{suppressed.name}-store" if suppressed.name else topo.names.store_name("KTABLE-SUPPRESS")
        topo.add_store(StoreSpec(store, "key_value", in_memory=True, logging=True))
        topo.add_node(name, SuppressOp(suppressed, store, grace, self.windowed), (self.node,), (store,))
        return KTable(self.builder, name, self.source_topics, windowed=self.windowed, grace_ms=self.grace_ms, parent=self, kind="suppress")

    def group_by(self, selector: Callable[[Any, Any], tuple[Any, Any]], grouped: Grouped | None = None) -> "KGroupedTable":
        """Re-group rows by ``selector(key, value) -> (new_key, new_value)`` (Kafka's
        ``KTable#groupBy``); always repartitions (through ``<store or grouped name>-repartition``).

        Each table update is mapped twice, its old and its new value: the aggregation then
        subtracts the old row and adds the new one. When both map to the same new key, one
        record carries both (KIP-904, Kafka >= 3.5); otherwise the subtraction is sent first.
        Pairs with a None key or value are skipped. The select node is named by
        ``grouped.name`` if given, else ``KTABLE-SELECT-<n>``.
        """
        from .grouped import KGroupedTable

        g = grouped or Grouped()
        topo = self.builder.topology
        name = g.name or topo.names.new("KTABLE-SELECT")
        topo.add_node(name, TableSelectOp(selector), (self.node,))
        self._enable_sending_old_values(True)
        return KGroupedTable(self.builder, name, g)

    def join(self, other: "KTable", *args: Any, **kwargs: Any) -> "KTable":
        """Table-table inner join, or the foreign-key join
        ``join(other, foreign_key_extractor, joiner)`` (KIP-213)."""
        from .table_joins import table_join

        return table_join(self, other, "inner", *args, **kwargs)

    def left_join(self, other: "KTable", *args: Any, **kwargs: Any) -> "KTable":
        """Table-table left join (or foreign-key left join)."""
        from .table_joins import table_join

        return table_join(self, other, "left", *args, **kwargs)

    def outer_join(self, other: "KTable", *args: Any, **kwargs: Any) -> "KTable":
        """Table-table outer join."""
        from .table_joins import table_join

        return table_join(self, other, "outer", *args, **kwargs)


class GlobalKTable:
    """A table replicated in full on every instance; joined by a key selector."""

    def __init__(self, builder: "StreamsBuilder", node: str, topic: str, store: str) -> None:
        self.builder = builder
        self.node = node
        self.topic = topic
        self.store = store

    def queryable_store_name(self) -> str:
        return self.store


def _find_window_grace(topology: Any, node: str, chain: str = "") -> int:
    """The suppress duration of ``until_window_closes``: walk up from ``node`` to the windowed
    aggregation (Kafka's ``GraphGraceSearchUtil.findAndVerifyWindowGrace``): its grace, or
    gap + grace for session windows.

    Raises:
        TopologyException: if a source is reached before any windowed aggregation.
    """
    from ..errors import TopologyException
    from ..graph.ops import AggregateOp, CogroupOp
    from ..windows import SessionWindows

    n = topology.nodes[node]
    new_chain = node if not chain else f"{node}->{chain}"
    if isinstance(n.op, (AggregateOp, CogroupOp)) and n.op.windows is not None:
        w = n.op.windows
        return w.gap_ms + w.grace_ms if isinstance(w, SessionWindows) else w.grace_ms
    if not n.parents:
        raise TopologyException(f"Window close time is only defined for windowed computations. Got [{new_chain}].")
    graces = {_find_window_grace(topology, p, new_chain) for p in n.parents}
    if len(graces) > 1:
        raise TopologyException(f"Window grace periods of all parents of {node} must be equal, got {sorted(graces)}")
    return graces.pop()
