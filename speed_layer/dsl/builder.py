"""StreamsBuilder: the entry point of the DSL (Kafka's ``StreamsBuilder``)."""
from __future__ import annotations

import re
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


def _not_null_key(key: Any, value: Any) -> bool:
    """The repartition filter: records with a null key cannot be partitioned and are dropped."""
    return key is not None


def _any_key(key: Any, value: Any) -> bool:
    """The repartition filter of a repartition followed by a null-key-relaxed join
    (KIP-962): every record passes, null keys included."""
    return True


def relax_null_key_repartitions(topology: Topology) -> None:
    """Kafka's ``InternalStreamsBuilder#rewriteRepartitionNodes`` (KIP-962, Kafka >= 3.7):
    a repartition keeps null-key records when a join that accepts them -- a stream-stream
    left or outer join, a stream-table or stream-GlobalKTable left join (Kafka's
    ``NULL_KEY_RELAXED_JOIN`` label) -- lies anywhere downstream of it (through further
    repartition topics too); every other repartition drops them. Applied by
    :meth:`StreamsBuilder.build`, so it sees the whole graph."""
    from ..graph.ops import StreamStreamJoinOp, StreamTableJoinOp

    nodes = topology.nodes
    children = topology.child_map()
    readers: dict[str, list[str]] = {}
    for n in nodes.values():
        if isinstance(n.op, SourceOp):
            for topic in n.op.topics:
                readers.setdefault(topic, []).append(n.name)
    memo: dict[str, bool] = {}

    def relaxed(name: str) -> bool:
        """True if ``name`` or a node downstream of it is a null-key-relaxed join."""
        if name in memo:
            return memo[name]
        memo[name] = False  # guards against cycles (a topic read back upstream)
        op = nodes[name].op
        found = (isinstance(op, StreamStreamJoinOp) and (op.left_outer or op.right_outer)) or (isinstance(op, StreamTableJoinOp) and op.left)
        nxt = list(children.get(name, ()))
        if isinstance(op, SinkOp) and op.repartition and op.topic is not None:
            nxt += readers.get(op.topic, [])
        for child in nxt:
            if found:
                break
            found = relaxed(child)
        memo[name] = found
        return found

    for name, node in list(nodes.items()):
        if isinstance(node.op, FilterOp) and node.op.predicate in (_not_null_key, _any_key):
            want = _any_key if relaxed(name) else _not_null_key
            if node.op.predicate is not want:
                nodes[name] = replace(node, op=replace(node.op, predicate=want))


class StreamsBuilder:
    """Builds a :class:`Topology` with the DSL. ``build()`` returns it."""

    def __init__(self) -> None:
        self.topology = Topology()

    # -- internal helpers used by the DSL classes
    def _name(self, given: str | None, prefix: str) -> str:
        return given if given else self.topology.names.new(prefix)

    def _burn_repartition_names(self) -> tuple[str, str, str]:
        """Allocate the sink, filter and source indices of a repartition, as Kafka always
        does ("burn index counter for compatibility")."""
        names = self.topology.names
        return names.new("KSTREAM-SINK"), names.new("KSTREAM-FILTER"), names.new("KSTREAM-SOURCE")

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
        """Add a null-key filter, a sink and a source through the internal topic
        ``<application.id>-<base>-repartition``; returns the source node name.

        Names as Kafka's ``KStreamImpl#createRepartitionedSource``: three indices are always
        allocated (sink, filter, source); they name the nodes when ``base`` is itself a
        generated ``KSTREAM...-<10 digits>`` name, otherwise the nodes are
        ``<topic>-filter``, ``<topic>-sink`` and ``<topic>-source``."""
        topic = base if base.endswith("-repartition") else f"{base}-repartition"
        gen_sink, gen_filter, gen_source = self._burn_repartition_names()
        if re.fullmatch(r"KSTREAM.*-[0-9]{10}", base):
            sink, filt, source = gen_sink, gen_filter, gen_source
        else:
            sink, filt, source = f"{topic}-sink", f"{topic}-filter", f"{topic}-source"
        t = self.topology
        t.add_node(filt, FilterOp(_not_null_key), (parent,))
        t.add_node(sink, SinkOp(topic, None, key_serde, value_serde, partitioner, repartition=True), (filt,))
        t.add_internal_topic(InternalTopic(topic, partitions))
        t.add_node(source, SourceOp((topic,), key_serde, value_serde, repartition=True), ())
        return source

    # -- public API
    def stream(self, topics: str | list[str], consumed: Consumed | None = None) -> "KStream":
        """A KStream reading ``topics`` (one or several), named ``KSTREAM-SOURCE-<n>`` (or
        ``consumed.name``).

        As Kafka's ``InternalStreamsBuilder#mergeDuplicateSourceNodes``, a second
        ``stream()`` of exactly the same topics (with the same options) reads through the
        first source node (its name index is still allocated).

        Raises:
            TopologyException: if a topic is already read by a source with other topics (or
            by a table).
        """
        from ..errors import TopologyException
        from .kstream import KStream

        c = consumed or Consumed()
        tl = [topics] if isinstance(topics, str) else list(topics)
        name = self._name(c.name, "KSTREAM-SOURCE")
        existing = self.topology.source_topics()
        for t in tl:
            if t in existing:
                node = self.topology.nodes[existing[t]]
                op = node.op
                same = (isinstance(op, SourceOp) and not op.repartition and set(op.topics) == set(tl)
                        and op == SourceOp(op.topics, c.key_serde, c.value_serde, c.timestamp_extractor, c.offset_reset)
                        and not any(isinstance(self.topology.nodes[ch].op, TableSourceOp) for ch in self.topology.children(node.name)))
                if same:
                    return KStream(self, node.name, tuple(op.topics), key_serde=c.key_serde, value_serde=c.value_serde)
                if isinstance(op, SourceOp) and set(op.topics) != set(tl):
                    raise TopologyException("Two source nodes are subscribed to overlapping but not equal input topics")
                raise TopologyException(f"Topic {t} has already been registered by another source.")
        self.topology.add_node(name, SourceOp(tuple(tl), c.key_serde, c.value_serde, c.timestamp_extractor, c.offset_reset))
        return KStream(self, name, tuple(tl), key_serde=c.key_serde, value_serde=c.value_serde)

    def table(self, topic: str, consumed: Consumed | None = None, materialized: Materialized | None = None) -> "KTable":
        """A KTable of ``topic``: the latest value per key; null values delete; records with
        a null key are dropped (Kafka's ``StreamsBuilder#table``).

        Names as Kafka: the store ``<topic>-STATE-STORE-<n>`` (unless ``materialized``
        names it) takes the first index, then the source ``KSTREAM-SOURCE-<n>`` and the
        table source ``KTABLE-SOURCE-<n>`` (``<consumed name>-source`` and
        ``<consumed name>`` when ``consumed`` has a name). The table is
        materialized when ``materialized`` names a store, otherwise only when a later
        operation needs its values (group_by, suppress, joins, or reading ``.store``)."""
        from .ktable import KTable

        c = consumed or Consumed()
        m = materialized or Materialized()
        store = m.store_name or self.topology.names.store_name(topic)
        src = f"{c.name}-source" if c.name else self.topology.names.new("KSTREAM-SOURCE")
        tname = c.name or self.topology.names.new("KTABLE-SOURCE")
        spec = replace(kv_store_spec(store, replace(m, key_serde=m.key_serde or c.key_serde, value_serde=m.value_serde or c.value_serde)), source_topic_changelog=topic)
        for t in (topic,):
            if t in self.topology.source_topics():
                from ..errors import TopologyException

                raise TopologyException(f"Topic {t} has already been registered by another source.")
        self.topology.add_node(src, SourceOp((topic,), c.key_serde, c.value_serde, c.timestamp_extractor, c.offset_reset))
        self.topology.add_node(tname, TableSourceOp(None), (src,))
        table = KTable(self, tname, (topic,), key_serde=c.key_serde, value_serde=c.value_serde, kind="source", pending_store=spec,
                       queryable=m.store_name is not None)
        if m.store_name is not None:
            table._ensure_materialized()
        return table

    def global_table(self, topic: str, consumed: Consumed | None = None, materialized: Materialized | None = None) -> "GlobalKTable":
        """A GlobalKTable: every instance holds all partitions of ``topic`` in a global
        store, for lookups by any key (no co-partitioning needed). Names as Kafka: the store
        ``<topic>-STATE-STORE-<n>`` first, then ``KSTREAM-SOURCE-<n>`` and
        ``KTABLE-SOURCE-<n>``."""
        from .ktable import GlobalKTable

        c = consumed or Consumed()
        m = materialized or Materialized()
        store = m.store_name or self.topology.names.store_name(topic)
        src = f"{c.name}-source" if c.name else self.topology.names.new("KSTREAM-SOURCE")
        tname = c.name or self.topology.names.new("KTABLE-SOURCE")
        spec = replace(kv_store_spec(store, replace(m, caching_enabled=False, key_serde=m.key_serde or c.key_serde, value_serde=m.value_serde or c.value_serde)), global_topic=topic, logging=False)
        self.topology.add_global_store(spec, src, topic, tname, None, c.key_serde, c.value_serde, c.timestamp_extractor)
        return GlobalKTable(self, tname, topic, store)

    def add_state_store(self, store: StoreSpec) -> "StreamsBuilder":
        """Register a store for processors added with ``KStream.process(..., store_names)``."""
        self.topology.add_store(store)
        return self

    def build(self) -> Topology:
        """The Topology built so far (the same object on each call). As Kafka's
        ``StreamsBuilder#build``, repartitions upstream of a null-key-relaxed join keep
        null-key records (KIP-962, see :func:`relax_null_key_repartitions`)."""
        relax_null_key_repartitions(self.topology)
        return self.topology
