"""A stream thread's order of tasks on equal timestamps, and the sub-topologies of the
thread that may still write a repartition partition its tasks read (issue 42, item 2:
one instance gives a backlog the same order on every run).

Why: a task reading a repartition topic merges its partitions (and the thread merges its
tasks) by head timestamp. A partition with nothing buffered and nothing on its way back has
a next record not written yet, and its writer (an upstream sub-topology of the same thread)
may write it with a timestamp below the heads of the other partitions (a flight behind a
later flight in its source partition). Whether it was written when the task's turn came
depended on how far the upstream tasks had run ahead while the downstream ones waited for
their repartition round trips, that is on timing: 15 runs of the flights backlog
(20,000 flights) gave 474, 475 or 476 late drops, the repartition topics' orders differing
from run to run. A task now waits while such a partition's upstream tasks in this thread
still have input (the thread runs those meanwhile, :class:`.TaskExecutor`), so the merge
sees every partition's next record, and the order is a function of the data.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

if TYPE_CHECKING:
    from ..topology import Topology
    from .internal_topics import TopologyPlan

__all__ = ["UpstreamInput", "task_order", "subtopology_of"]

TP = tuple[str, int]


@lru_cache(maxsize=4096)
def task_order(task_id: str) -> tuple[int, tuple[int, ...], str]:
    """A task's place among a thread's tasks on equal timestamps: its id
    ``<sub-topology>_<partition>`` as numbers (``"1_10"`` after ``"1_2"``), other ids after
    those, by name."""
    parts = task_id.split("_")
    return (0, tuple(int(p) for p in parts), "") if all(p.isdigit() for p in parts) else (1, (), task_id)


@lru_cache(maxsize=4096)
def subtopology_of(task_id: str) -> int | None:
    """The sub-topology id of a task id ``<sub-topology>_<partition>``; None for other ids."""
    head = task_id.split("_", 1)[0]
    return int(head) if head.isdigit() else None


class _Task(Protocol):
    def buffered(self) -> int: ...


class UpstreamInput:
    """``upstream(topic, task_id)``: the ids of the sub-topologies that write ``topic``,
    directly or through other topics (from the topology: ``writers``, as
    :func:`.backlog_ends.writers_of`; ``sources``: each sub-topology's source topics), when
    one of this thread's tasks of those sub-topologies still has input (buffered, held by
    the thread's flow control: ``holds(tp)``, or on its way back to one of its repartition
    partitions: ``in_flight(tp)``) and the reading task's sub-topology is not
    among them (a cycle, such as a foreign-key join's, could wait for itself); else None.
    None for every topic when a sink has a topic extractor (``dynamic``: any topic may be
    written). ``tasks`` and ``task_tps`` are the thread's own dicts, read as they change."""

    def __init__(self, writers: Mapping[str, set[int]], sources: Mapping[int, tuple[str, ...]], dynamic: bool,
                 tasks: Mapping[str, _Task], task_tps: Mapping[str, list[TP]], holds: Callable[[TP], bool],
                 in_flight: Callable[[TP], bool] = lambda tp: False) -> None:
        self.tasks = tasks
        self.task_tps = task_tps
        self.holds = holds
        self.in_flight = in_flight
        self.upstream: dict[str, frozenset[int]] = {}
        if dynamic:
            return
        for topic in writers:
            seen: set[int] = set()
            todo = list(writers[topic])
            while todo:
                sid = todo.pop()
                if sid not in seen:
                    seen.add(sid)
                    todo.extend(w for src in sources.get(sid, ()) for w in writers.get(src, ()))
            self.upstream[topic] = frozenset(seen)

    @classmethod
    def of(cls, plan: "TopologyPlan", topology: "Topology", tasks: Mapping[str, _Task],
           task_tps: Mapping[str, list[TP]], holds: Callable[[TP], bool],
           in_flight: Callable[[TP], bool]) -> "UpstreamInput":
        from .backlog_ends import writers_of

        writers, dynamic = writers_of(plan, topology)
        return cls(writers, plan.sources, dynamic, tasks, task_tps, holds, in_flight)

    def __call__(self, topic: str, task_id: str) -> frozenset[int] | None:
        ups = self.upstream.get(topic)
        if not ups or subtopology_of(task_id) in ups:
            return None
        holds, in_flight = self.holds, self.in_flight
        for tid, task in self.tasks.items():
            if subtopology_of(tid) in ups and (
                    task.buffered() or any(holds(tp) or in_flight(tp) for tp in self.task_tps[tid])):
                return ups
        return None
