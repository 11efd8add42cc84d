"""The stream thread's processing of its tasks, Kafka's ``TaskExecutor``: which task
processes next, and how many records at a time.

Kafka orders records by timestamp within a task and leaves the order across tasks open
(round-robin). duet takes the lowest head across the thread's tasks, stops at the first
task that is held back (no task with a later head runs past it), and holds the thread
back while one of its partitions may still have data on the broker (KIP-695 applied to the
thread, :mod:`.readiness`): the tasks of a replayed backlog stay at the same event time, so
their outputs reach downstream repartition topics nearly in timestamp order and downstream
windows do not see the records of a lagging task as late. Live traffic is unaffected (a
caught-up partition has seen its end-of-partition). Equal heads go in task id order, and a
task waiting for input its upstream tasks in the thread have not written yet lets only
those run (:mod:`.upstream`): one instance gives a backlog the same order on every run.
"""
from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING, Callable

from .upstream import subtopology_of, task_order

if TYPE_CHECKING:
    from .readiness import Readiness
    from .task import StreamTask

__all__ = ["TaskExecutor", "MAX_RECORDS_PER_LOOP", "ACTIVE_TIME_NS"]

TP = tuple[str, int]
#: task counter: wall-clock ns the stream thread spent on the task, processing its records
#: (cache evictions included) and flushing it at commits; over the elapsed time it is
#: Kafka's task-level ``active-process-ratio`` (KIP-444), commits included
ACTIVE_TIME_NS = "active-time-ns"
#: records processed between two polls of the consumer
MAX_RECORDS_PER_LOOP = 1000


class TaskExecutor:
    """Runs the ready tasks of one stream thread.

    ``tasks`` and ``task_tps`` (task id -> its input partitions) are the thread's own dicts,
    shared and updated by it as tasks come and go; ``readiness`` decides which task may
    process; ``begin`` is called before a task processes or punctuates (an exactly-once
    thread opens its transaction there); ``clock`` is monotonic seconds.
    """

    def __init__(self, tasks: dict[str, "StreamTask"], task_tps: dict[str, list[TP]], readiness: "Readiness",
                 begin: Callable[[], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.tasks = tasks
        self.task_tps = task_tps
        self.readiness = readiness
        self.begin = begin
        self.clock = clock

    def process(self, max_records: int = MAX_RECORDS_PER_LOOP) -> int:
        """Process up to ``max_records`` records, always the one with the lowest timestamp
        (ms) among the heads of the tasks that are ready when its turn comes. Returns the
        number processed."""
        now = self.clock()
        readiness = self.readiness
        if not readiness.thread_ready(now):
            return 0
        # every task with buffered records, lowest head first, each checked when its turn
        # comes: one held back by a sibling's older record is released once the loop has
        # processed that record (checking only at the start of the loop ran such tasks one
        # record per loop: 3 records per loop through two repartitions instead of 200)
        # ties on the head timestamp go to the task with the lower id, so the order of a
        # backlog's records is a function of the data: with the tie left to the dict's order
        # or to where a run of a task stopped (a buffer running dry, the loop's
        # max_records), equal timestamps of two tasks reached the repartition topics both
        # write in a different order from run to run, and one run in four dropped one or
        # two more window updates as late (issue 42)
        # (the tie-break is the task's place, task_order: cached, no sort of the tasks per loop)
        heap = [(task.head_timestamp(), task_order(task.task_id), task)
                for task in self.tasks.values() if task.buffered()]
        heapq.heapify(heap)
        tracked = readiness.tracked
        n = 0
        #: while a task waits for its upstream tasks' input (:mod:`.upstream`): only those run
        allowed: frozenset[int] | None = None
        while heap and n < max_records:
            _, i, task = heapq.heappop(heap)
            if allowed is not None and subtopology_of(task.task_id) not in allowed:
                continue
            if not readiness.ready(task, now):
                wait = readiness.upstream_wait
                if wait is not None:
                    # a repartition partition it reads has no next record yet, and tasks of
                    # this thread upstream of it still have input: they run first (later
                    # heads: a held back task does not stop them), the others wait with it
                    allowed = wait if allowed is None else allowed & wait
                    continue
                if readiness.idling:
                    # max.task.idle.ms on a partition another process may feed (KIP-695):
                    # its order against this thread's other tasks is not this thread's to keep
                    if not readiness.thread_ready(now):
                        break
                    continue
                # held back: by an empty partition (KIP-695), or by a record sent to one of
                # its or its siblings' repartition partitions, older than its head. The tasks
                # after it have later heads: running them would take the thread's event time
                # past the records it waits for, and their outputs past its outputs in the
                # topics both write (issue 42: the orders' task waited for its foreign-key
                # responses while the clicks' task ran days ahead, and the stream-stream join
                # reading both re-keyed streams expired the orders' partners). Every such wait
                # ends by I/O (a fetch, a delivery) or by a task before it in this order.
                break
            self.begin()
            started = time.perf_counter_ns()
            # a run of the task's records up to the next task's head while it stays ready:
            # none of its buffers runs dry (process_run stops there), equal heads keep the
            # loop's order (the lower position first, as when it ran one record per turn)
            # and, for a task reading partitions this thread sends to, its head stays within
            # the records that would hold it back (:meth:`Readiness.horizon`)
            until = heap[0][0] if heap else None
            if heap and heap[0][1] < i:
                until = heap[0][0] - 1
            if tracked and any(tp in tracked for tp in self.task_tps[task.task_id]):
                horizon = readiness.horizon(task)
                if horizon is not None and (until is None or horizon < until):
                    until = horizon
            if until is not None and until < task.head_timestamp():
                task.process_next()  # ready after waiting its longest (enforced processing)
                n += 1
            else:
                n += task.process_run(until, max_records - n)
            task.metrics.inc(task.task_id, ACTIVE_TIME_NS, time.perf_counter_ns() - started)
            readiness.processed(task.task_id)
            # a buffer that ran dry takes the records held for its partition: they come
            # before anything the other tasks may process next
            readiness.refill(self.task_tps[task.task_id])
            if task.buffered():
                heapq.heappush(heap, (task.head_timestamp(), i, task))
            elif not readiness.thread_ready(now):
                break  # its partition ran dry and more may be on its way (KIP-695)
        return n

    def punctuate(self, now_ms: int) -> None:
        """Run the wall-clock punctuations due at ``now_ms`` (ms since the epoch)."""
        for task in list(self.tasks.values()):
            if task.wall_clock_punctuation_due(now_ms):
                self.begin()
                task.punctuate_wall_clock()
