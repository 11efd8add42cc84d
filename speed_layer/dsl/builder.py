"""StreamsBuilder: the entry point of the DSL (Kafka's ``StreamsBuilder``)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..graph.nodes import InternalTopic, StoreSpec
from ..graph.ops import FilterOp, SinkOp, SourceOp, TableSourceOp
from ..options import Consumed, Materialized, StreamPartitioner
from ..serde import Serde
from ..topology import Topology

if TYPE_CHECKING:
    from .kstream import KStream
    from .ktable import GlobalKTable, KTable


def kv_store_spec(name: str, materialized: Materialized | None, *, timestamped: bool = True) -> StoreSpec:
    """The key-value store a DSL operation materializes into."""
    m = materialized or Materialized()
    if m.versioned_history_ms is not None:
        return StoreSpec(name, "versioned", m.key_serde, m.value_serde, in_memory=m.store_type == "in_memory", logging=m.logging_enabled, history_ms=m.versioned_history_ms)
    return StoreSpec(name, "timestamped_key_value" if timestamped else "key_value", m.key_serde, m.value_serde, in_memory=m.store_type == "in_memory", caching=m.caching_enabled, logging=m.logging_enabled)


class StreamsBuilder:
    """Builds a :class:`Topology` with the DSL. ``build()`` returns it."""

    def __init__(self) -> None:
        self.topology = Topology()

    # -- internal helpers used by the DSL classes
    def _name(self, given: str | None, prefix: str) -> str:
        return given if given else self.topology.names.new(prefix)

    def _repartition(
        self,
        parent: str,
        base: str,
        *,
        partitions: int | None = None,
        partitioner: StreamPartitioner | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> str:
        """Add ``<base>-repartition-filter`` (drops null keys), ``-sink`` and ``-source``
        nodes through the internal topic ``<application.id>-<base>-repartition``; returns
        the source node name."""
        topic = f"{base}-repartition"
        t = self.topology
        t.add_node(f"{topic}-filter", FilterOp(lambda k, v: k is not None), (parent,))
        t.add_node(f"{topic}-sink", SinkOp(topic, None, key_serde, value_serde, partitioner, repartition=True), (f"{topic}-filter",))
        t.add_internal_topic(InternalTopic(topic, partitions))
        t.add_node(f"{topic}-source", SourceOp((topic,), key_serde, value_serde, repartition=True), ())
        return f"{topic}-source"

    # -- public API
    def stream(self, topics: str | list[str], consumed: Consumed | None = None) -> "KStream":
        """A KStream reading ``topics`` (one or several).

        Raises:
            TopologyException: if a topic is already read by another source.
        """
        from .kstream import KStream

        c = consumed or Consumed()
        tl = [topics] if isinstance(topics, str) else list(topics)
        name = self._name(c.name, "KSTREAM-SOURCE")
        for t in tl:
            if t in self.topology.source_topics():
                from ..errors import TopologyException

                raise TopologyException(f"Topic {t} has already been registered by another source.")
        self.topology.add_node(name, SourceOp(tuple(tl), c.key_serde, c.value_serde, c.timestamp_extractor, c.offset_reset))
        return KStream(self, name, tuple(tl), key_serde=c.key_serde, value_serde=c.value_serde)

    def table(self, topic: str, consumed: Consumed | None = None, materialized: Materialized | None = None) -> "KTable":
        """A KTable of ``topic``: the latest value per key; null values delete. Always
        materialized (store named by ``materialized`` or ``<topic>-STATE-STORE-<n>``);
        the source topic serves as its changelog."""
        from .ktable import KTable

        c = consumed or Consumed()
        src = self._name(c.name, "KSTREAM-SOURCE")
        self.topology.add_node(src, SourceOp((topic,), c.key_serde, c.value_serde, c.timestamp_extractor, c.offset_reset))
        tname = self.topology.names.new("KTABLE-SOURCE")
        m = materialized or Materialized()
        store = m.store_name or self.topology.names.store_name(topic)
        spec = replace(kv_store_spec(store, replace(m, key_serde=m.key_serde or c.key_serde, value_serde=m.value_serde or c.value_serde)), source_topic_changelog=topic)
        self.topology.add_store(spec)
        self.topology.add_node(tname, TableSourceOp(store), (src,), (store,))
        self.topology.store_writers[store] = tname
        return KTable(self, tname, (topic,), store=store, key_serde=c.key_serde, value_serde=c.value_serde)

    def global_table(self, topic: str, consumed: Consumed | None = None, materialized: Materialized | None = None) -> "GlobalKTable":
        """A GlobalKTable: every instance holds all partitions of ``topic`` in a global
        store, for lookups by any key (no co-partitioning needed)."""
        from .ktable import GlobalKTable

        c = consumed or Consumed()
        m = materialized or Materialized()
        src = self._name(c.name, "KSTREAM-SOURCE")
        tname = self.topology.names.new("KTABLE-SOURCE")
        store = m.store_name or self.topology.names.store_name(topic)
        spec = replace(kv_store_spec(store, replace(m, caching_enabled=False, key_serde=m.key_serde or c.key_serde, value_serde=m.value_serde or c.value_serde)), global_topic=topic, logging=False)
        self.topology.add_global_store(spec, src, topic, tname, None, c.key_serde, c.value_serde, c.timestamp_extractor)
        return GlobalKTable(self, tname, topic, store)

    def add_state_store(self, store: StoreSpec) -> "StreamsBuilder":
        """Register a store for processors added with ``KStream.process(..., store_names)``."""
        self.topology.add_store(store)
        return self

    def build(self) -> Topology:
        """The Topology built so far (the same object on each call)."""
        return self.topology
