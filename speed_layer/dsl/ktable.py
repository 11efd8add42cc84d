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
    """A table. Records between KTable nodes carry ``Change(new, old)``. ``store`` is the
    queryable store holding this table's current values (None if not materialized).
    ``windowed`` tables come from windowed aggregations (keys are ``Windowed``)."""

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
    ) -> None:
        self.builder = builder
        self.node = node
        self.source_topics = source_topics
        self.store = store
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.windowed = windowed
        self.grace_ms = grace_ms

    def queryable_store_name(self) -> str | None:
        return self.store

    def _add(self, prefix: str, op: Any, named: Named | str | None, materialized: Materialized | None) -> "KTable":
        from .builder import kv_store_spec

        topo = self.builder.topology
        name = self.builder._name(_n(named), prefix)
        store = None
        stores: tuple[str, ...] = ()
        if materialized is not None:
            store = materialized.store_name or topo.names.store_name(prefix)
            topo.add_store(kv_store_spec(store, materialized))
            stores = (store,)
            op = type(op)(**{**op.__dict__, "store": store})
        topo.add_node(name, op, (self.node,), stores)
        if store:
            topo.store_writers[store] = name
        return KTable(self.builder, name, self.source_topics, store=store or None, windowed=self.windowed, grace_ms=self.grace_ms)

    def filter(self, predicate: Callable[[Any, Any], bool], named: Named | str | None = None, materialized: Materialized | None = None) -> "KTable":
        """Keep rows where ``predicate(key, value)``; a row that stops matching is deleted
        downstream (a tombstone), as Kafka's KTable#filter."""
        return self._add("KTABLE-FILTER", TableFilterOp(predicate), named, materialized)

    def filter_not(self, predicate: Callable[[Any, Any], bool], named: Named | str | None = None, materialized: Materialized | None = None) -> "KTable":
        """Drop rows where ``predicate(key, value)`` (as a tombstone downstream)."""
        return self._add("KTABLE-FILTER", TableFilterOp(predicate, negate=True), named, materialized)

    def map_values(self, mapper: Callable[..., Any], named: Named | str | None = None, materialized: Materialized | None = None, *, with_key: bool = False) -> "KTable":
        """``mapper(value)`` (or ``mapper(key, value)``) on every row; deletes stay deletes."""
        return self._add("KTABLE-MAPVALUES", TableMapValuesOp(mapper, with_key), named, materialized)

    def to_stream(self, mapper: Callable[[Any, Any], Any] | None = None, named: Named | str | None = None) -> KStream:
        """The table's update stream: each update's new value (None for a delete), keyed by
        the table key (or ``mapper(key, value)``)."""
        name = self.builder._name(_n(named), "KTABLE-TOSTREAM")
        self.builder.topology.add_node(name, ToStreamOp(mapper), (self.node,))
        return KStream(self.builder, name, self.source_topics, repartition_required=mapper is not None)

    def suppress(self, suppressed: Suppressed) -> "KTable":
        """Hold back updates: ``until_window_closes`` emits exactly one final result per
        window once stream time passes window end + grace; ``until_time_limit`` emits the
        latest value of a key at most once per time limit."""
        topo = self.builder.topology
        name = self.builder._name(suppressed.name, "KTABLE-SUPPRESS")
        from ..graph.nodes import StoreSpec

        store = f"{name}-store"
        topo.add_store(StoreSpec(store, "key_value", in_memory=True, logging=True))
        topo.add_node(name, SuppressOp(suppressed, store, self.grace_ms, self.windowed), (self.node,), (store,))
        return KTable(self.builder, name, self.source_topics, windowed=self.windowed, grace_ms=self.grace_ms)

    def group_by(self, selector: Callable[[Any, Any], tuple[Any, Any]], grouped: Grouped | None = None) -> "KGroupedTable":
        """Re-group rows by ``selector(key, value) -> (new_key, new_value)``; always
        repartitions. Aggregations then subtract a row's old value and add its new one."""
        from .grouped import KGroupedTable

        g = grouped or Grouped()
        topo = self.builder.topology
        name = topo.names.new("KTABLE-SELECT")
        topo.add_node(name, TableSelectOp(selector), (self.node,))
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
