"""Records a stream thread holds outside a task buffer keep their place in the thread's
timestamp order (broker-free: the real ``Readiness``, ``InputBuffers`` and
``TaskExecutor`` over fake tasks; found by ``test_liveness_property.py``, issue 25).

``buffered.records.per.partition`` bounds a task buffer; what the consumer fetched beyond
it is held by ``InputBuffers`` (and the partition paused once enough bytes are held). A
buffer that ran dry within one loop of the executor stayed empty until the next loop:

* with records held for it, its task took the partition as at its end (its end-of-partition
  had been seen, the held records being the last) or as waiting, and the thread's other
  tasks ran past the held records;
* paused with nothing held, it was not waited for (paused partitions were exempt from the
  thread's wait), although its next records were on the broker.

Either way a backlog in timestamp order reached a repartition topic out of order, and a
windowed count downstream dropped up to half of it as late (1,500 in-order records with
``buffered.records.per.partition`` 10 to 200: 248 to 833 dropped). Now a buffer that runs
dry takes its held records at once, and a paused partition that ran dry holds the thread
like any other.
"""
from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition

from speed_layer.runtime import input_buffers
from speed_layer.runtime.input_buffers import InputBuffers
from speed_layer.runtime.readiness import Readiness
from speed_layer.runtime.task import Metrics, RawRecord
from speed_layer.runtime.task_executor import TaskExecutor

TP = tuple[str, int]
SRC = "in"


class RawTask:
    """A task over real partition buffers (deques of ``RawRecord``, as ``StreamTask``'s) whose
    processing logs ``(task, timestamp)``; runs follow ``StreamTask#process_run``: lowest
    head first, stopping after a record that empties its partition's buffer."""

    def __init__(self, task_id: str, tps: list[TP], log: list[tuple[str, int]]) -> None:
        self.task_id = task_id
        self.queues: dict[TP, deque[RawRecord]] = {tp: deque() for tp in tps}
        self.log = log
        self.metrics = Metrics()  # the thread's counters (the executor adds active-time-ns)

    def queue(self, topic: str, partition: int) -> deque[RawRecord]:
        return self.queues[(topic, partition)]

    def buffered(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def buffered_in(self, topic: str, partition: int) -> int:
        return len(self.queues.get((topic, partition), ()))

    def buffered_head(self, topic: str, partition: int) -> int | None:
        q = self.queues.get((topic, partition))
        return q[0].timestamp if q else None

    def head_timestamp(self) -> int:
        heads = [q[0].timestamp for q in self.queues.values() if q]
        return min(heads) if heads else -1

    def may_send_to_own_sources(self) -> bool:
        return False

    def _pop(self) -> deque[RawRecord]:
        q = min((q for q in self.queues.values() if q), key=lambda q: q[0].timestamp)
        self.log.append((self.task_id, q.popleft().timestamp))
        return q

    def process_next(self) -> bool:
        if not self.buffered():
            return False
        self._pop()
        return True

    def process_run(self, until_ts: int | None, max_records: int) -> int:
        n = 0
        while n < max_records and self.buffered() and (until_ts is None or self.head_timestamp() <= until_ts):
            q = self._pop()
            n += 1
            if not q:
                break
        return n


class PausingConsumer:
    def __init__(self) -> None:
        self.paused: set[TP] = set()

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in tps)

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in tps)


class Thread:
    """One stream thread's bookkeeping as ``StreamThread`` wires it: readiness, input buffers
    (``limit`` records per task buffer) and the executor, over source tasks of one
    partition each."""

    def __init__(self, partitions: int, limit: int) -> None:
        self.log: list[tuple[str, int]] = []
        self.tasks = {f"0_{p}": RawTask(f"0_{p}", [(SRC, p)], self.log) for p in range(partitions)}
        task_tps = {t.task_id: sorted(t.queues) for t in self.tasks.values()}
        tp_task: dict[TP, Any] = {tp: t for t in self.tasks.values() for tp in t.queues}
        self.readiness = Readiness(0, False, task_tps, tp_task, lambda tp, nxt: None, lambda: None,
                                   lambda tp: self.inputs.waiting_input(tp))
        self.inputs = InputBuffers(tp_task, self.readiness, limit, "test")  # type: ignore[arg-type]
        for tp in tp_task:
            self.readiness.add_partition(tp, False)
        self.executor = TaskExecutor(self.tasks, task_tps, self.readiness, lambda: None, clock=lambda: 0.0)  # type: ignore[arg-type]
        self.consumer = PausingConsumer()

    def fetch(self, partition: int, timestamps: list[int], *, at_end: bool) -> None:
        """The consumer returns these records of ``partition`` (then its end, if ``at_end``)."""
        start = self.readiness.fetched_next.get((SRC, partition), 0)
        self.inputs.add([Message(topic=SRC, partition=partition, offset=start + i, key=b"k", value=b"v", timestamp=(1, ts))
                         for i, ts in enumerate(timestamps)])
        self.readiness.eof[(SRC, partition)] = at_end
        self.inputs.pause_resume(self.consumer)  # type: ignore[arg-type]


def test_a_buffer_that_runs_dry_takes_its_held_records_before_the_other_tasks_go_on() -> None:
    """Partition 0's consumer reached its end: 300 and 400 are held behind a buffer of two.
    Before: 500 was processed before them (the partition counted as at its end)."""
    thread = Thread(2, limit=2)
    thread.fetch(0, [100, 200, 300, 400], at_end=True)
    thread.fetch(1, [250, 500], at_end=True)
    assert thread.inputs.holds((SRC, 0))
    assert thread.executor.process() == 6
    assert [ts for _, ts in thread.log] == [100, 200, 250, 300, 400, 500]
    assert not thread.inputs.any_held()


def test_a_paused_partition_that_runs_dry_holds_the_thread_until_it_is_resumed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition 0 is paused (its held bytes reached the limit); within the loop its buffer
    takes the held 300 and runs dry again, with more on the broker. Before: partition 1's
    500 was processed (a paused partition was not waited for)."""
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_PARTITION", 1)
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_THREAD", 0)
    thread = Thread(2, limit=2)
    thread.fetch(0, [100, 200, 300], at_end=False)
    thread.fetch(1, [250, 500], at_end=True)
    assert thread.consumer.paused == {(SRC, 0)}
    assert thread.executor.process() == 4
    assert [ts for _, ts in thread.log] == [100, 200, 250, 300]
    # the next loop resumes partition 0 and waits for its records
    thread.inputs.pause_resume(thread.consumer)  # type: ignore[arg-type]
    assert thread.consumer.paused == set()
    assert thread.executor.process() == 0
    thread.fetch(0, [350, 600], at_end=True)
    assert thread.executor.process() == 3
    assert [ts for _, ts in thread.log] == [100, 200, 250, 300, 350, 500, 600]


def test_a_backlog_in_timestamp_order_is_processed_in_timestamp_order_with_small_buffers() -> None:
    """Four partitions of one backlog, fetched whole (the ends seen), buffers of three: one
    loop processes everything, in timestamp order."""
    thread = Thread(4, limit=3)
    timestamps = {p: [1_000 * i + p for i in range(1, 30) if i % 4 == p or i % 7 == p] for p in range(4)}
    for p, ts in timestamps.items():
        thread.fetch(p, ts, at_end=True)
    total = sum(len(ts) for ts in timestamps.values())
    assert thread.executor.process() == total
    processed = [ts for _, ts in thread.log]
    assert processed == sorted(processed)
