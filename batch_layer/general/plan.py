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
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import reduce
from typing import TYPE_CHECKING, Any

from speed_layer.config import StreamsConfig
from speed_layer.graph.nodes import SubTopology
from speed_layer.graph.ops import GlobalStoreOp, ProcessOp, SourceOp, TableSourceOp
from speed_layer.topology import Topology

from .worker import TaskSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..model import BatchOptions
    from .run import GeneralViews

__all__ = [
    "FULL_HISTORY_MS", "MAX_ROUNDS", "GeneralPlan", "Group", "batch_config", "full_history", "in_memory", "plan_general",
    "process_stores", "task_spec", "union_all",
]

#: rounds a group of sub-topologies that feed each other may take to settle
MAX_ROUNDS = 10


@dataclass(frozen=True)
class Group:
    """Sub-topologies run together: one, or several that feed each other (``cyclic``)."""

    subs: tuple[SubTopology, ...]
    cyclic: bool


@dataclass
class GeneralPlan:
    """A topology compiled for the general executor (build it with :func:`plan_general`).

    Attributes:
        topology: the topology as the user built it.
        views: the stores whose content is computed.
        config: the speed layer's config.
        options: batch options.
        groups: sub-topology groups in dependency order.
        produced: full topic name -> ids of the sub-topologies writing it.
        reads: sub-topology id -> the full topic names its tasks read (global tables'
            topics included).
        input_topics: topics read from ``<lake>/raw/<topic>`` (no sink of the topology
            writes them).
        table_topics: input topics read as KTable / GlobalKTable changelogs.
    """

    topology: Topology
    views: tuple[str, ...]
    config: StreamsConfig
    options: "BatchOptions"
    groups: tuple[Group, ...]
    produced: dict[str, tuple[int, ...]]
    reads: dict[int, tuple[str, ...]]
    globals_of: dict[int, tuple[tuple[str, str, tuple[str, ...]], ...]]
    input_topics: tuple[str, ...]
    table_topics: frozenset[str]
    executor: str = field(default="general", init=False)

    @property
    def source_topics(self) -> list[str]:
        """Topics read from ``<lake>/raw/<topic>`` by this plan."""
        return list(self.input_topics)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.topology.nodes)

    def levels(self) -> list[list[Group]]:
        """The groups by dependency level: a group's level is one more than the highest
        level of the groups writing a topic it reads; the acyclic groups of one level run
        in one Spark stage."""
        level_of: dict[int, int] = {}
        out: list[list[Group]] = []
        for g in self.groups:  # dependency order
            ids = {s.id for s in g.subs}
            writers = {w for s in g.subs for t in self.reads[s.id] for w in self.produced.get(t, ()) if w not in ids}
            lvl = max((level_of[w] + 1 for w in writers), default=0)
            for i in ids:
                level_of[i] = lvl
            while len(out) <= lvl:
                out.append([])
            out[lvl].append(g)
        return out

    def explain(self) -> str:
        """One line per sub-topology group: ids, topics read, whether it iterates."""
        lines = [f"views: {', '.join(self.views)}", "executor: general (speed layer processors per task)"]
        for g in self.groups:
            ids = ", ".join(str(s.id) for s in g.subs)
            topics = sorted({t for s in g.subs for t in self.reads[s.id]})
            lines.append(f"  sub-topolog{'ies' if len(g.subs) > 1 else 'y'} {ids}{' (to a fixed point)' if g.cyclic else ''} <- {', '.join(topics)}")
        return "\n".join(lines)

    def execute(self, spark: "SparkSession", lake: Any, *, input_frames: dict[str, "DataFrame"] | None = None) -> "GeneralViews":
        """Run every sub-topology in Spark; returns :class:`GeneralViews` (lazy frames over
        persisted task outputs).

        Raises:
            BatchLayerError: a raw input table is missing.
            BatchCompileError: a group of sub-topologies feeding each other did not settle
                within :data:`MAX_ROUNDS` rounds.
        """
        from .run import GeneralRun

        return GeneralRun(self, spark, lake, dict(input_frames or {})).run()


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


def batch_config(config: StreamsConfig) -> StreamsConfig:
    """The config tasks run with in batch: a record whose deserialization or processing
    fails is never fatal to a recompute of history. ``log_and_fail`` becomes
    ``log_and_continue`` (the record is dropped and counted, as the relational path
    does); ``dead_letter`` stays (the record goes to the dead-letter topic, an output).

    Both wall-clock emit throttles (``__emit.interval.ms.kstreams.outer.join.spurious.results.fix__``
    and ``__emit.interval.ms.kstreams.windowed.aggregation__``) are 0: batch emits on event
    time alone, as Kafka's TopologyTestDriver does. With the 1000 ms default a recompute that
    runs in less than a second would never scan for unmatched outer-join records or closed
    windows."""
    updates: dict[str, object] = {"emit_interval_ms_kstreams_outer_join_spurious_results_fix": 0,
                                  "emit_interval_ms_kstreams_windowed_aggregation": 0}
    for field_name in ("deserialization_exception_handler", "processing_exception_handler"):
        if getattr(config, field_name) == "log_and_fail":
            updates[field_name] = "log_and_continue"
    return config.model_copy(update=updates)


def process_stores(topology: Topology) -> list[str]:
    """Stores connected to Processor-API nodes (user processors), in creation order."""
    out: list[str] = []
    for n in topology.nodes.values():
        if isinstance(n.op, ProcessOp):
            out.extend(s for s in n.stores if s not in out and not topology.stores[s].global_topic)
    return out


#: the retention of window and session stores in batch (ms): nothing expires
FULL_HISTORY_MS = 2**62


def full_history(topology: Topology) -> Topology:
    """A copy of ``topology`` whose window and session stores never expire, so that a
    store's content after the whole input holds every window ever computed: a batch view
    of a windowed store is the final value of EVERY window (contracts.md), as the speed
    layer's view topic holds it, while the store itself drops windows older than its
    retention.

    Results do not change: a record reaches a window only while stream time is before
    the window's end + grace <= retention (Kafka's rule), and joins fetch within their
    window, so retention only decides what is kept, never what is computed.
    """
    stores = {name: replace(spec, retention_ms=FULL_HISTORY_MS) if spec.kind in ("window", "session") else spec
              for name, spec in topology.stores.items()}
    return replace(topology, stores=stores)


def in_memory(topology: Topology) -> Topology:
    """:func:`full_history` with every store in memory (batch state lives for one task run)."""
    stores = {name: replace(spec, in_memory=True) for name, spec in full_history(topology).stores.items()}
    return replace(topology, stores=stores)


def task_spec(plan: GeneralPlan, topology: Topology, sub: SubTopology, partitions: dict[str, int], default_partitions: int) -> TaskSpec:
    """The :class:`TaskSpec` of ``sub``'s tasks."""
    wanted = tuple(s for s in sub.stores if s in plan.views)
    return TaskSpec(topology, batch_config(plan.config), sub, partitions, default_partitions, plan.globals_of.get(sub.id, ()), wanted)


def union_all(frames: list["DataFrame"]) -> "DataFrame":
    return reduce(lambda a, b: a.unionByName(b), frames)

