"""Which sub-topologies each instance of a pipeline's speed layer runs (``duet run
--instances N``, ``duet speed --instances N``).

**Why place whole sub-topologies.** Left to the consumer group, the tasks of every
sub-topology are balanced by count over the instances. A sub-topology whose tasks run in two
processes that catch up on a backlog, each at its own pace, writes into the repartition
topics it feeds records far apart in event time: the windows downstream see the records of
the slower one as late and drop them (docs/instances.md: 4,681,061 drops instead of 12,610
on the flights year). Within one process the stream thread keeps its tasks at the same event
time (:mod:`speed_layer.runtime.task_executor`). So each instance is given whole
sub-topologies, through the streams config ``instance.subtopologies`` (it subscribes to
their lead topics only), and the instances run different stages of the pipeline side by
side: pipeline parallelism, as Flink runs the chained operators of a streaming job in
separate task slots.

**Start order.** An instance running a downstream stage starts once the instances running
the stages upstream of it run, so that it begins on a backlog of their output. Started
together, it would read the head of its repartition topics, where records come in the
upstream producers' batches (``linger.ms``: about an hour of event time per ms when a year
is replayed), partition by partition, far apart in event time, and its windows would drop
records as late (measured on the flights year: 231,871 drops instead of 12,610). The
backlog matters, not only the order: all instances joining at once with the downstream one
paused until the upstream ran (``KafkaStreams.pause``) still dropped 270,214 and 318,645;
started after, its 2.5-5 s of joining the group give it seconds of the upstream's output.
A downstream stage that is faster than its upstream reaches the head all the same: the
placement puts the costliest stage alone, which on the flights topology is downstream.

**How.** Longest processing time first (Graham's LPT rule): the sub-topologies by cost,
the largest first, each onto the instance with the least cost so far. The costs are the
time each sub-topology's tasks took in the pipeline's last run of the same topology (the
runtime's task counter ``active-time-ns``, saved by :func:`save_costs`), else an estimate
from the topology (:func:`estimated_costs`). An instance LPT leaves without a sub-topology (more instances
than sub-topologies) shares the sub-topologies that feed no repartition topic (the last
stage is one) with the instance that has them: the group splits their tasks, which is
harmless, since no window of the application reads what they write.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speed_layer import Topology, TimeWindows
from speed_layer.graph.ops import AggregateOp, CogroupOp, SinkOp

log = logging.getLogger(__name__)

__all__ = ["Placement", "place_subtopologies", "stage_depths", "estimated_costs", "measured_costs", "load_costs", "save_costs"]

#: the task counter the costs are measured with (``speed_layer.runtime.task_executor``)
ACTIVE_TIME_NS = "active-time-ns"


@dataclass(frozen=True)
class Placement:
    """The sub-topology ids each instance runs (``instance.subtopologies``), one tuple per
    instance to start, and the costs the placement used (``source``: ``"measured"`` or
    ``"estimated"``; ``costs``: sub-topology id -> cost, seconds when measured)."""

    instances: tuple[tuple[int, ...], ...]
    costs: Mapping[int, float]
    source: str
    #: per instance, the lowest stage depth of its sub-topologies (:func:`stage_depths`):
    #: the instances start in this order, each depth once the lower ones run
    depths: tuple[int, ...] = ()

    def describe(self) -> str:
        """One line: e.g. ``instance 1: sub-topologies [1]; instance 2: [0, 3, 4] (estimated costs)``."""
        parts = [f"instance {n}: sub-topologies {list(subs)}" for n, subs in enumerate(self.instances, 1)]
        return "; ".join(parts) + f" ({self.source} costs)"


def estimated_costs(topology: Topology) -> dict[int, float]:
    """A rough cost per task sub-topology id, before any run has measured one: its node count,
    plus, for each time-windowed aggregation, the windows each record updates (size over
    advance: 24 for a 24 h hopping window advancing by 1 h). Unitless; only the ratios matter."""
    costs: dict[int, float] = {}
    for sub in topology.task_subtopologies():
        cost = float(len(sub.nodes))
        for name in sub.nodes:
            op = topology.nodes[name].op
            windows = getattr(op, "windows", None) if isinstance(op, (AggregateOp, CogroupOp)) else None
            if isinstance(windows, TimeWindows) and windows.advance_ms > 0:
                cost += windows.size_ms / windows.advance_ms
        costs[sub.id] = cost
    return costs


def measured_costs(metrics: Mapping[str, Any]) -> dict[int, float]:
    """Seconds each sub-topology's tasks were active in a run, from the runtime's metrics
    (``KafkaStreams.metrics()``, or the instances' merged ones): ``tasks[<sub>_<p>]
    ["active-time-ns"]`` summed per sub-topology. Empty when the run measured none."""
    costs: dict[int, float] = {}
    for task, counters in dict(metrics.get("tasks", {})).items():
        ns = dict(counters).get(ACTIVE_TIME_NS)
        sid, _, partition = str(task).partition("_")
        if ns and sid.isdigit() and partition.isdigit():
            costs[int(sid)] = costs.get(int(sid), 0.0) + ns / 1e9
    return costs


def _costs_file(root: Path, pipeline: str) -> Path:
    return root / f"{pipeline}.subtopology-costs.json"


def _fingerprint(topology: Topology) -> str:
    """The topology's description hashed: costs measured on another topology (sub-topology
    ids numbered differently) are not used."""
    return hashlib.sha256(str(topology.describe()).encode()).hexdigest()


def save_costs(root: Path, pipeline: str, topology: Topology, costs: Mapping[int, float]) -> None:
    """Keep a run's measured costs (seconds per sub-topology id of ``topology``) for the next
    placement of ``pipeline`` (a JSON file in ``root``, the speed layer's state folder).
    Nothing to keep: nothing written."""
    if costs:
        root.mkdir(parents=True, exist_ok=True)
        doc = {"topology": _fingerprint(topology), "costs": {str(k): v for k, v in sorted(costs.items())}}
        _costs_file(root, pipeline).write_text(json.dumps(doc))


def load_costs(root: Path, pipeline: str, topology: Topology) -> dict[int, float]:
    """The costs :func:`save_costs` kept for ``pipeline``, if measured on this ``topology``;
    empty when none, when measured on another topology, or unreadable (logged)."""
    path = _costs_file(root, pipeline)
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
        if doc["topology"] != _fingerprint(topology):
            log.info("%s: sub-topology costs measured on another topology: estimating them from this one", pipeline)
            return {}
        return {int(k): float(v) for k, v in doc["costs"].items()}
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        log.warning("ignoring the sub-topology costs in %s (%r): estimating them from the topology", path, exc)
        return {}


def _feeds_repartition(topology: Topology, sub: Any) -> bool:
    for name in sub.nodes:
        op = topology.nodes[name].op
        if isinstance(op, SinkOp) and op.repartition:
            return True
    return False


def stage_depths(topology: Topology) -> dict[int, int]:
    """Stage depth per task sub-topology id: 0 for one that reads no repartition topic
    another sub-topology writes, else one more than the deepest such writer (the number of
    repartition hops from the source topics)."""
    subs = topology.task_subtopologies()
    writers: dict[str, list[int]] = {}
    for sub in subs:
        for topic in sub.sink_topics:
            writers.setdefault(topic, []).append(sub.id)
    depths: dict[int, int] = {}

    def depth(sid: int, seen: frozenset[int]) -> int:
        if sid not in depths:
            sub = next(s for s in subs if s.id == sid)
            ups = [w for t in sub.source_topics for w in writers.get(t, []) if w != sid and w not in seen]
            depths[sid] = 1 + max(depth(w, seen | {sid}) for w in ups) if ups else 0
        return depths[sid]

    for sub in subs:
        depth(sub.id, frozenset())
    return depths


def place_subtopologies(topology: Topology, instances: int, measured: Mapping[int, float] | None = None) -> Placement:
    """Place the topology's task sub-topologies on at most ``instances`` instances (see the
    module docstring). ``measured``: costs of an earlier run (:func:`measured_costs`); used
    when they cover every sub-topology, else the topology's :func:`estimated_costs`.

    Raises:
        ValueError: ``instances`` < 1.
    """
    if instances < 1:
        raise ValueError(f"instances must be at least 1, got {instances}")
    subs = topology.task_subtopologies()
    ids = [sub.id for sub in subs]
    if measured and set(ids) <= set(measured) and all(measured[i] > 0 for i in ids):
        costs, source = {i: float(measured[i]) for i in ids}, "measured"
    else:
        costs, source = estimated_costs(topology), "estimated"
    loads = [0.0] * instances
    placed: list[list[int]] = [[] for _ in range(instances)]
    for sid in sorted(ids, key=lambda i: (-costs[i], i)):
        target = min(range(instances), key=lambda n: (loads[n], n))
        placed[target].append(sid)
        loads[target] += costs[sid]
    shareable = [sub.id for sub in subs if not _feeds_repartition(topology, sub)]
    result: list[tuple[int, ...]] = []
    for subs_of in placed:
        if subs_of:
            result.append(tuple(sorted(subs_of)))
    idle = instances - len(result)
    if idle and shareable:
        # the idle instances share the terminal sub-topologies: as do the instances holding them
        result = [tuple(sorted(set(r) | set(shareable))) if set(r) & set(shareable) else r for r in result]
        result += [tuple(sorted(shareable))] * idle
    depths = stage_depths(topology)
    return Placement(tuple(result), costs, source, tuple(min(depths[i] for i in subs_of) for subs_of in result))
