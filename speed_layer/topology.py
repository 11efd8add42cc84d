"""The Topology: a plain graph of processor nodes, state stores and topics.

Built by :class:`speed_layer.StreamsBuilder` (the DSL) or by hand with the Processor API
(``add_source``, ``add_processor``, ``add_sink``, ``add_state_store``), as Kafka's
``Topology``. It holds user functions but imports nothing from Kafka or Spark: the runtime,
the test driver and the batch compiler all read it.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .errors import TopologyException
from .graph.naming import NameGenerator
from .graph.nodes import GraphNode, InternalTopic, StoreSpec, SubTopology
from .graph.ops import GlobalStoreOp, Op, ProcessOp, SinkOp, SourceOp
from .options import StreamPartitioner, TimestampExtractor
from .serde import Serde

if TYPE_CHECKING:
    from .describe import TopologyDescription


@dataclass
class Topology:
    """Processor nodes in creation order, state stores, repartition topics and co-partition
    groups. Methods return ``self`` so that Processor-API calls can be chained."""

    nodes: dict[str, GraphNode] = field(default_factory=dict)
    stores: dict[str, StoreSpec] = field(default_factory=dict)
    internal_topics: dict[str, InternalTopic] = field(default_factory=dict)
    #: groups of topics that must have the same partition count (joined inputs)
    copartition_groups: list[frozenset[str]] = field(default_factory=list)
    #: DSL metadata: store name -> the node that writes it (for views / batch compiler)
    store_writers: dict[str, str] = field(default_factory=dict)
    names: NameGenerator = field(default_factory=NameGenerator)

    # ------------------------------------------------------------------ graph building
    def add_node(self, name: str, op: Op, parents: tuple[str, ...] = (), stores: tuple[str, ...] = ()) -> GraphNode:
        """Add a node. Raises TopologyException on a duplicate name or an unknown parent."""
        if name in self.nodes:
            raise TopologyException(f"Processor {name} is already added.")
        for p in parents:
            if p not in self.nodes:
                raise TopologyException(f"Parent processor {p} is not added yet for {name}.")
            if isinstance(self.nodes[p].op, SinkOp):
                raise TopologyException(f"Sink {p} cannot be a parent of {name}.")
        for s in stores:
            if s not in self.stores:
                raise TopologyException(f"State store {s} is not added yet for {name}.")
        node = GraphNode(name, op, tuple(parents), tuple(stores))
        self.nodes[name] = node
        return node

    def add_store(self, spec: StoreSpec) -> StoreSpec:
        if spec.name in self.stores and self.stores[spec.name] != spec:
            raise TopologyException(f"A different StateStore has already been added with the name {spec.name}")
        self.stores[spec.name] = spec
        return spec

    def connect_store(self, node_name: str, store_name: str) -> None:
        """Give ``node_name`` access to ``store_name``."""
        node = self.nodes[node_name]
        if store_name not in node.stores:
            self.nodes[node_name] = GraphNode(node.name, node.op, node.parents, node.stores + (store_name,))

    def add_internal_topic(self, topic: InternalTopic) -> None:
        self.internal_topics[topic.name] = topic

    # ------------------------------------------------------------------ Processor API
    def add_source(
        self,
        name: str,
        *topics: str,
        key_deserializer: Serde[Any] | None = None,
        value_deserializer: Serde[Any] | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        offset_reset: str | None = None,
    ) -> "Topology":
        """Add a source node reading ``topics`` (Kafka's ``Topology#addSource``)."""
        if not topics:
            raise TopologyException(f"Source {name} needs at least one topic")
        for t in topics:
            if t in self.source_topics():
                raise TopologyException(f"Topic {t} has already been registered by another source.")
        self.add_node(name, SourceOp(tuple(topics), key_deserializer, value_deserializer, timestamp_extractor, offset_reset))
        return self

    def add_processor(self, name: str, supplier: Callable[[], Any], *parent_names: str) -> "Topology":
        """Add a user processor; ``supplier()`` returns a new :class:`Processor` per task."""
        if not parent_names:
            raise TopologyException(f"Processor {name} must have at least one parent")
        self.add_node(name, ProcessOp(supplier), tuple(parent_names))
        return self

    def add_sink(
        self,
        name: str,
        topic: str | Callable[[Any, Any, Any], str],
        *parent_names: str,
        key_serializer: Serde[Any] | None = None,
        value_serializer: Serde[Any] | None = None,
        partitioner: StreamPartitioner | None = None,
    ) -> "Topology":
        """Add a sink writing to ``topic`` (or to ``topic(key, value, record_context)``)."""
        if not parent_names:
            raise TopologyException(f"Sink {name} must have at least one parent")
        if callable(topic):
            op = SinkOp(None, topic, key_serializer, value_serializer, partitioner)
        else:
            op = SinkOp(topic, None, key_serializer, value_serializer, partitioner)
        self.add_node(name, op, tuple(parent_names))
        return self

    def add_state_store(self, store: StoreSpec, *processor_names: str) -> "Topology":
        """Add a store (from :class:`speed_layer.Stores`) and connect it to processors."""
        self.add_store(store)
        for p in processor_names:
            if p not in self.nodes:
                raise TopologyException(f"Processor {p} is not added yet.")
            self.connect_store(p, store.name)
        return self

    def connect_processor_and_state_stores(self, processor_name: str, *store_names: str) -> "Topology":
        for s in store_names:
            if s not in self.stores:
                raise TopologyException(f"StateStore {s} is not added yet.")
            self.connect_store(processor_name, s)
        return self

    def add_global_store(
        self,
        store: StoreSpec,
        source_name: str,
        topic: str,
        processor_name: str,
        supplier: Callable[[], Any] | None = None,
        key_deserializer: Serde[Any] | None = None,
        value_deserializer: Serde[Any] | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> "Topology":
        """Add a global store filled from ``topic`` on every instance (Kafka's
        ``addGlobalStore``); ``supplier`` None just puts each record into the store."""
        from dataclasses import replace

        self.add_store(replace(store, global_topic=topic, logging=False))
        self.add_node(source_name, SourceOp((topic,), key_deserializer, value_deserializer, timestamp_extractor))
        self.add_node(processor_name, GlobalStoreOp(store.name, supplier), (source_name,), (store.name,))
        return self

    # ------------------------------------------------------------------ queries
    def children(self, name: str) -> list[str]:
        """Names of the nodes whose parents include ``name``, in creation order."""
        return [n.name for n in self.nodes.values() if name in n.parents]

    def child_map(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for n in self.nodes.values():
            for p in n.parents:
                out[p].append(n.name)
        return out

    def source_topics(self) -> dict[str, str]:
        """topic -> source node name (internal repartition topics by their short name)."""
        out: dict[str, str] = {}
        for n in self.nodes.values():
            if isinstance(n.op, SourceOp):
                for t in n.op.topics:
                    out[t] = n.name
        return out

    def global_nodes(self) -> set[str]:
        """Nodes belonging to global stores' sub-graphs (sources and their processors)."""
        out: set[str] = set()
        for n in self.nodes.values():
            if isinstance(n.op, GlobalStoreOp):
                out.add(n.name)
                out.update(n.parents)
        return out

    def global_stores(self) -> dict[str, StoreSpec]:
        return {k: s for k, s in self.stores.items() if s.global_topic}

    def subtopologies(self) -> list[SubTopology]:
        """Connected components of the non-global graph, joined through shared stores,
        split at topics; numbered in order of their first node (as Kafka's node groups)."""
        globals_ = self.global_nodes()
        names = [n for n in self.nodes if n not in globals_]
        parent = {n: n for n in names}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: str, b: str) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[rb] = ra

        store_users: dict[str, list[str]] = defaultdict(list)
        for n in names:
            node = self.nodes[n]
            for p in node.parents:
                if p in parent:
                    union(p, n)
            for s in node.stores:
                if not self.stores[s].global_topic:
                    store_users[s].append(n)
        for users in store_users.values():
            for u in users[1:]:
                union(users[0], u)
        groups: dict[str, list[str]] = {}
        for n in names:
            groups.setdefault(find(n), []).append(n)
        ids = self._group_ids([members[0] for members in groups.values()])
        out = []
        for members in groups.values():
            i = ids[members[0]]
            srcs: list[str] = []
            sinks: list[str] = []
            stores: list[str] = []
            for m in members:
                op = self.nodes[m].op
                if isinstance(op, SourceOp):
                    srcs.extend(op.topics)
                if isinstance(op, SinkOp) and op.topic:
                    sinks.append(op.topic)
                for s in self.nodes[m].stores:
                    if s not in stores and not self.stores[s].global_topic:
                        stores.append(s)
            out.append(SubTopology(i, tuple(members), tuple(srcs), tuple(sinks), tuple(stores)))
        return out

    def task_subtopologies(self) -> list[SubTopology]:
        """The sub-topologies of :meth:`subtopologies` (global stores' are not among them:
        they run on the global thread) that have source topics, hence tasks (one per
        partition, Kafka's ``DefaultPartitionGrouper``), in that order."""
        return [sub for sub in self.subtopologies() if sub.source_topics]

    def _group_ids(self, first_members: list[str]) -> dict[str, int]:
        """Ids of node groups as Kafka's ``InternalTopologyBuilder#makeNodeGroups``: groups
        (global-store groups included) numbered in the order of their first node, so a
        global table declared before a stream takes id 0. Maps the first member of each
        given (non-global) group to its id."""
        order = {n: i for i, n in enumerate(self.nodes)}
        firsts: list[tuple[int, str]] = [(order[m], m) for m in first_members]
        for gn in self.global_groups().values():
            firsts.append((min(order[m] for m in gn), ""))
        ids: dict[str, int] = {}
        for i, (_, m) in enumerate(sorted(firsts)):
            if m:
                ids[m] = i
        return ids

    def global_groups(self) -> dict[str, tuple[str, ...]]:
        """Global-store groups: the global processor name -> (its source, the processor)."""
        return {n.name: (*n.parents, n.name) for n in self.nodes.values() if isinstance(n.op, GlobalStoreOp)}

    def global_group_ids(self) -> dict[str, int]:
        """The sub-topology id Kafka gives each global-store group (by processor name)."""
        order = {n: i for i, n in enumerate(self.nodes)}
        firsts = [(min(order[m] for m in gn), name) for name, gn in self.global_groups().items()]
        for sub in self.subtopologies():
            firsts.append((order[sub.nodes[0]], ""))
        return {name: i for i, (_, name) in enumerate(sorted(firsts)) if name}

    def walk(self) -> Iterator[GraphNode]:
        """Nodes in creation order (a topological order: parents are created first)."""
        yield from self.nodes.values()

    def describe(self) -> "TopologyDescription":
        """A printable description in the format of Kafka's ``TopologyDescription``."""
        from .describe import TopologyDescription

        return TopologyDescription.of(self)
