"""PartitionGroup: a task's buffered input, one queue per input partition (Kafka's
``PartitionGroup`` and its ``RecordQueue`` s).

The stream thread appends consumed records to the queue of their partition
(:meth:`PartitionGroup.queue`); the task takes the record with the lowest timestamp across
its queues next (Kafka's ``PartitionGroup#nextRecord``: the head with the lowest timestamp
wins, so a task processes its inputs in event-time order as far as they are buffered).
Timestamps are the records' own (ms). Whether a task may process at all while some of its
partitions are empty (KIP-695, ``max.task.idle.ms``) is decided outside, by
:mod:`.readiness`, from :meth:`buffered_in` and :meth:`buffered_head`.

No Kafka client here: the rules are unit-tested without a broker
(``tests/test_speed_layer/test_partition_group.py``).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import NamedTuple

__all__ = ["Headers", "PartitionGroup", "RawRecord"]

Headers = list[tuple[str, bytes | None]]


class RawRecord(NamedTuple):
    """A consumed record before deserialization (immutable; a named tuple, so the stream
    thread builds one per consumed record with ``tuple.__new__``, without a Python
    ``__init__`` frame). ``timestamp`` in ms; ``headers``: the consumer's list, or an empty
    tuple."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers | tuple[()] = ()


class PartitionGroup:
    """The record queues of one task's input partitions, keyed by ``(topic, partition)``."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, int], deque[RawRecord]] = {}

    def add_records(self, records: Iterable[RawRecord]) -> None:
        """Append ``records`` to the queues of their partitions, in the given order."""
        for r in records:
            self.queue(r.topic, r.partition).append(r)

    def queue(self, topic: str, partition: int) -> deque[RawRecord]:
        """The queue of one input partition (created empty on first use); the stream
        thread appends consumed records to it directly."""
        q = self.queues.get((topic, partition))
        if q is None:
            q = self.queues[(topic, partition)] = deque()
            # in (topic, partition) order, not the order partitions were first fetched: a tie
            # of head timestamps goes to the same partition on every run (issue 42)
            self.queues = dict(sorted(self.queues.items()))
        return q

    def buffered(self) -> int:
        """The number of records buffered over all partitions."""
        n = 0
        for q in self.queues.values():
            n += len(q)
        return n

    def buffered_in(self, topic: str, partition: int) -> int:
        """The number of records buffered for one input partition."""
        q = self.queues.get((topic, partition))
        return len(q) if q else 0

    def buffered_head(self, topic: str, partition: int) -> int | None:
        """The timestamp (ms) of the next buffered record of one input partition, None
        when its queue is empty."""
        q = self.queues.get((topic, partition))
        return q[0].timestamp if q else None

    def head_timestamp(self) -> int:
        """The lowest timestamp (ms) among the heads of the queues; -1 when all are empty."""
        best = -1
        for q in self.queues.values():
            if q:
                ts = q[0].timestamp
                if best < 0 or ts < best:
                    best = ts
        return best

    def next_queue(self) -> deque[RawRecord] | None:
        """The queue whose head has the lowest timestamp (the first such queue on a tie, in
        ``(topic, partition)`` order); None when all are empty."""
        best: deque[RawRecord] | None = None
        for q in self.queues.values():
            if q and (best is None or q[0].timestamp < best[0].timestamp):
                best = q
        return best

    def process_run(self, process: Callable[[RawRecord], None], until_ts: int | None, max_records: int,
                    run_queue: Callable[[deque[RawRecord], int | None, int], int] | None = None) -> int:
        """Hand up to ``max_records`` buffered records to ``process`` in timestamp order (as
        :meth:`next_queue`), while the next one's timestamp is ``<= until_ts`` (ms; None: no
        bound), stopping after a record that empties its partition's queue (which may
        change whether the task may go on, KIP-695). Returns the number handed over.
        ``run_queue(queue, until_ts, max_records)``, when given, takes the run instead when
        one queue alone holds records (its records in offset order, the same bounds; it
        returns how many it took): the task's faster path (:meth:`StreamTask._run_queue`)."""
        queues = [q for q in self.queues.values() if q]
        n = 0
        if len(queues) == 1:
            q = queues[0]
            if run_queue is not None:
                return run_queue(q, until_ts, max_records)
            popleft = q.popleft
            while n < max_records and q and (until_ts is None or q[0].timestamp <= until_ts):
                process(popleft())
                n += 1
            return n
        while n < max_records and queues:
            best = queues[0]
            for q in queues:
                if q[0].timestamp < best[0].timestamp:
                    best = q
            if until_ts is not None and best[0].timestamp > until_ts:
                break
            process(best.popleft())
            n += 1
            if not best:
                break
            queues = [q for q in queues if q]
        return n
