"""Sources, sinks and KTable / GlobalKTable sources.

* A source of a topic that no sink of the topology writes reads ``<lake>/raw/<topic>``,
  deserialized with the source's serdes (defaults: the StreamsConfig's, String key / JSON
  value) and timestamped by its extractor.
* A source of a topic that a sink of the same topology writes (a repartition topic, or a
  ``through`` topic) reads the sink's input instead: batch ignores partitioning, and each
  record keeps the order key of its ORIGINAL source record. The sink's serialization and the
  source's deserialization are replayed when either is not the internal default
  (order-preserving key / pickle), so a lossy serde behaves as in the speed layer.
* ``TableSourceOp`` / ``GlobalStoreOp``: the table's changelog (records with a null key are
  ignored, as the speed layer does).
"""
from __future__ import annotations

from collections.abc import Iterator

from typing import TYPE_CHECKING

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode
from speed_layer.state.keys import ORDERED_KEY, PICKLE

from ..model import TABLE_OPS
from ._chain import DropNullKeyStep, RoundTripStep
from ._plan import RawBase, StreamPipe, TableChain
from .base import Translator, Unsupported

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ..model import RelationalPlan

    from ._plan import ExecContext


def topic_writers(topology: "Topology", source: GraphNode, topic: str) -> list[str]:
    """Sink nodes of ``topology`` writing ``topic`` as ``source`` reads it (internal
    repartition topic or user topic)."""
    rep = source.op.repartition
    return [n.name for n in topology.nodes.values()
            if isinstance(n.op, ops.SinkOp) and n.op.topic == topic and n.op.repartition == rep]


def walk_upstream(topology: "Topology", name: str) -> Iterator[tuple[GraphNode, list[str]]]:
    """Every node upstream of node ``name`` (itself included), once each, depth first,
    following topics the topology writes itself (repartition and ``through`` topics) back to
    their sink nodes. Yields ``(node, raw_topics)``: for a source node the topics it reads
    that no sink of the topology writes (raw input), for any other node ``[]``.

    The caller decides what to do with each node; the walk goes on into a node's parents
    (a source: into the sinks writing its topics) after the caller resumes the generator."""
    seen: set[str] = set()
    stack = [name]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        node = topology.nodes[n]
        raw: list[str] = []
        if isinstance(node.op, ops.SourceOp):
            for t in node.op.topics:
                writers = topic_writers(topology, node, t)
                stack.extend(writers)
                if not writers:
                    raw.append(t)
        yield node, raw
        stack.extend(node.parents)


def is_table_source(topology: "Topology", name: str) -> bool:
    """True when every child of source ``name`` is a KTable / global store source."""
    children = [topology.nodes[c] for c in topology.children(name)]
    return bool(children) and all(isinstance(c.op, (ops.TableSourceOp, ops.GlobalStoreOp)) for c in children)


def table_src_indexes(plan: "RelationalPlan") -> frozenset[int]:
    """The ``src`` indexes of the topics ``plan`` reads as KTable / GlobalKTable
    changelogs: at one timestamp their records come before stream records (the batch
    order's "table changes first"; ``_records.ranked_rows``)."""
    return frozenset(i for (name, _topic), i in plan.src_index.items() if is_table_source(plan.topology, name))


class SourceTranslator(Translator):
    def dependencies(self, node: GraphNode, topology: "Topology") -> tuple[str, ...]:
        deps: list[str] = []
        for topic in node.op.topics:
            writers = topic_writers(topology, node, topic)
            if node.op.repartition and not writers:
                raise Unsupported(f"no sink of the topology writes its internal topic {topic!r}")
            deps.extend(writers)
        return tuple(deps)

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        op: ops.SourceOp = node.op
        cfg = ctx.plan.config
        if op.repartition:
            src_serdes = (op.key_serde or ORDERED_KEY, op.value_serde or PICKLE)
        else:
            src_serdes = (op.key_serde or cfg.default_key_serde, op.value_serde or cfg.default_value_serde)
        stream = not is_table_source(ctx.plan.topology, node.name)
        pipes = []
        for topic in op.topics:
            writers = topic_writers(ctx.plan.topology, node, topic)
            if not writers:
                base = RawBase(node.name, topic, src_serdes[0], src_serdes[1], op.timestamp_extractor,
                               ctx.plan.src_index[(node.name, topic)], stream)
                pipes.append(StreamPipe.of(base))
                continue
            for w in writers:
                sink: ops.SinkOp = ctx.plan.topology.nodes[w].op
                if sink.repartition:
                    sink_serdes = (sink.key_serde or ORDERED_KEY, sink.value_serde or PICKLE)
                else:
                    sink_serdes = (sink.key_serde or cfg.default_key_serde, sink.value_serde or cfg.default_value_serde)
                pipe = ctx.stream(w)
                identity = all(s is d and s in (ORDERED_KEY, PICKLE) for s, d in zip(sink_serdes, src_serdes))
                if not identity or op.timestamp_extractor is not None:
                    pipe = pipe.then(RoundTripStep(node.name, sink_serdes, src_serdes, op.timestamp_extractor))
                pipes.append(pipe)
        return StreamPipe.union(pipes)


class SinkTranslator(Translator):
    """A sink's output is its input: a source of the same topic reads it (see module doc)."""

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        return ctx.stream(node.parents[0])


class TableSourceTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        if len(node.parents) != 1:
            raise Unsupported("a KTable source must have exactly one parent")
        if isinstance(topology.nodes[node.parents[0]].op, TABLE_OPS):
            raise Unsupported("a KTable source over another KTable is not supported")

    def build(self, node: GraphNode, ctx: "ExecContext") -> TableChain:
        pipe = ctx.stream(node.parents[0]).then(DropNullKeyStep(node.name))
        return TableChain(pipe, node.name, source_has_store=node.op.store is not None)


class GlobalStoreTranslator(Translator):
    def check(self, node: GraphNode, topology: "Topology") -> None:
        if node.op.supplier is not None:
            raise Unsupported("a global store filled by a user Processor (Topology.add_global_store with a supplier) "
                              "cannot be translated: its logic is opaque to the batch layer")

    def build(self, node: GraphNode, ctx: "ExecContext") -> TableChain:
        pipe = ctx.stream(node.parents[0]).then(DropNullKeyStep(node.name))
        return TableChain(pipe, node.name, source_has_store=True)

