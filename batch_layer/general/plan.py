"""Driver side of the general executor: the speed layer's own processors run inside Spark,
one ``applyInPandas`` call per task (a sub-topology x a partition), over sorted history.

How a topology runs (docs/batch-executors.md):

1. Partition counts: each input topic's from its raw table (largest partition + 1);
   repartition topics' as the speed layer decides them (``plan_topology``: Kafka's
   ``RepartitionTopics`` and co-partitioning rules).
2. Sub-topologies run in dependency order (a sub-topology reading a topic runs after the
   ones writing it). Each task's input is the records of its partition of every source
   topic, plus every record of the global tables it reads; a record a task sends is
   partitioned exactly as the speed layer's producer does (the sink's partitioner, else
   murmur2 of the serialized key), so a repartition topic becomes a Spark shuffle
   (``groupBy(partition)``) between two sub-topologies.
3. Sub-topologies that feed each other (a foreign-key join's subscription and response
   topics, a ``through`` topic read upstream) run to a fixed point: their feedback topics
   start empty, and the group re-runs with the previous round's records until those
   records no longer change (each record takes the place of the input record that caused
   it, so a causal chain of n hops settles in n rounds).
4. Stores: each task emits its stores' final content as view rows; output topics are the
   records sent to topics the topology does not read.

Results are those of the speed layer fed its input in event-time order (see
``batch_layer.general.worker`` for the order and the commit-per-record rule).

This module plans (:func:`plan_general`); :mod:`batch_layer.general.run` holds the plan
(:class:`GeneralPlan`) and runs it, :mod:`batch_layer.general.topology` the topology and
config as batch runs them. Their names are importable from here too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from speed_layer.config import StreamsConfig
from speed_layer.graph.ops import GlobalStoreOp, ProcessOp, SourceOp, TableSourceOp
from speed_layer.topology import Topology

from .run import MAX_ROUNDS, GeneralPlan, Group, task_spec, union_all
from .topology import FULL_HISTORY_MS, batch_config, full_history, in_memory

if TYPE_CHECKING:
    from ..model import BatchOptions

__all__ = [
    "FULL_HISTORY_MS", "MAX_ROUNDS", "GeneralPlan", "Group", "batch_config", "full_history", "in_memory", "plan_general",
    "process_stores", "task_spec", "union_all",
]


def _full(topology: Topology, app: str, topic: str) -> str:
    return f"{app}-{topic}" if topic in topology.internal_topics else topic


def plan_general(topology: Topology, views: tuple[str, ...], config: StreamsConfig, options: "BatchOptions") -> GeneralPlan:
    """Plan ``topology`` for the general executor (no Spark needed)."""
    app = config.application_id
    subs = topology.subtopologies()
    by_id = {s.id: s for s in subs}
    produced: dict[str, list[int]] = {}
    for s in subs:
        for t in s.sink_topics:
            produced.setdefault(_full(topology, app, t), []).append(s.id)
    global_groups = {n.op.store: (n.parents[0], n.name, tuple(topology.nodes[n.parents[0]].op.topics))
                     for n in topology.nodes.values() if isinstance(n.op, GlobalStoreOp)}
    reads: dict[int, tuple[str, ...]] = {}
    globals_of: dict[int, tuple[tuple[str, str, tuple[str, ...]], ...]] = {}
    for s in subs:
        used = sorted({st for n in s.nodes for st in topology.nodes[n].stores if st in global_groups})
        globals_of[s.id] = tuple(global_groups[st] for st in used)
        topics = [_full(topology, app, t) for t in s.source_topics]
        topics += [t for g in globals_of[s.id] for t in g[2]]
        reads[s.id] = tuple(dict.fromkeys(topics))
    # dependencies between sub-topologies, then strongly connected groups in order
    deps = {s.id: sorted({w for t in reads[s.id] for w in produced.get(t, ())}) for s in subs}
    groups = [Group(tuple(by_id[i] for i in comp), len(comp) > 1 or comp[0] in deps[comp[0]])
              for comp in _components_in_order(deps)]
    all_read = {t for ts in reads.values() for t in ts}
    global_topics = {t for g in global_groups.values() for t in g[2]}
    table_topics = set(global_topics)
    for n in topology.nodes.values():
        if isinstance(n.op, SourceOp):
            children = [topology.nodes[c].op for c in topology.children(n.name)]
            if children and all(isinstance(c, (TableSourceOp, GlobalStoreOp)) for c in children):
                table_topics.update(n.op.topics)
    inputs = tuple(sorted(t for t in all_read if t not in produced))
    return GeneralPlan(topology, views, config, options, tuple(groups), {t: tuple(v) for t, v in produced.items()},
                       reads, globals_of, inputs, frozenset(table_topics))


def _components_in_order(deps: dict[int, list[int]]) -> list[list[int]]:
    """Strongly connected components of ``deps`` (node -> nodes it depends on), each
    sorted, in an order where a component comes after those it depends on (Tarjan's
    algorithm emits components dependencies-first)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    out: list[list[int]] = []

    def visit(v: int) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in deps[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def process_stores(topology: Topology) -> list[str]:
    """Stores connected to Processor-API nodes (user processors), in creation order."""
    out: list[str] = []
    for n in topology.nodes.values():
        if isinstance(n.op, ProcessOp):
            out.extend(s for s in n.stores if s not in out and not topology.stores[s].global_topic)
    return out
