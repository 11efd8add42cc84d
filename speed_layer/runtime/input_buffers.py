"""A stream thread's fetched records on their way into its tasks' partition buffers.

Kafka's ``StreamThread#addRecordsToTasks`` hands each polled record to its task's
``PartitionGroup``, and a task pauses a partition whose buffer holds
``buffered.records.per.partition`` records while its consumer keeps what it had fetched
(KAFKA-7548). librdkafka throws away what it prefetched for a paused partition, so
:class:`InputBuffers` keeps records beyond the buffer itself ("held", oldest first), up to
:func:`held_bytes_limit` bytes per partition, before it pauses the partition, moves them
into the task buffer as room frees up, and resumes the partition once nothing is held and
its buffer is below the limit again. It also records, per partition, the end-of-partition events and
the next offset fetched (:class:`Readiness` reads them) and consumer errors.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Iterable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ..errors import StreamsException
from .readiness import Readiness
from .task import RawRecord, StreamTask

log = logging.getLogger("speed_layer.thread")

__all__ = ["InputBuffers", "HELD_BYTES_PER_PARTITION", "HELD_BYTES_PER_THREAD", "MISSING_TOPIC_TIMEOUT_S", "held_bytes_limit"]

TP = tuple[str, int]
#: how long a subscribed topic may be reported missing before the thread fails, s
MISSING_TOPIC_TIMEOUT_S = 30.0
#: bytes (keys and values) of consumed records a partition whose task buffer holds
#: ``buffered.records.per.partition`` records may keep waiting before it is paused: the
#: Java consumer's ``max.partition.fetch.bytes`` default, one fetch of the partition, which
#: Java's consumer keeps for a paused partition (KAFKA-7548) and librdkafka throws away
HELD_BYTES_PER_PARTITION = 1_048_576
#: bytes of held records one stream thread may keep over all its partitions before a
#: partition holding ``HELD_BYTES_PER_PARTITION`` is paused (see :func:`held_bytes_limit`)
HELD_BYTES_PER_THREAD = 16 * 1_048_576


def held_bytes_limit(partitions: int) -> int:
    """Bytes of held records at which a partition of a thread reading ``partitions``
    partitions is paused: ``HELD_BYTES_PER_PARTITION``, or an equal share of
    ``HELD_BYTES_PER_THREAD`` when that is more (so a thread's held records stay within the
    larger of the two totals).

    Why more than Java's one fetch: a pause makes librdkafka drop what it had prefetched for
    the partition, and fetch it again after the resume. A thread that keeps its tasks at one
    event time (:class:`.TaskExecutor`) fills one partition's buffer while it waits for
    another's records, so with 1 MB per partition a backlog of 4 partitions paused one
    partition ~40 times in 100 MB (336,776 flights; ~40 % of the bytes fetched twice) and
    waited for the refetches; with 4 MB each it paused once and ran ~20 % faster."""
    return max(HELD_BYTES_PER_PARTITION, HELD_BYTES_PER_THREAD // max(1, partitions))

#: ``RawRecord`` is a NamedTuple: ``_new_raw(RawRecord, fields)`` builds one without the
#: Python ``__init__`` frame (once per consumed record)
_new_raw = tuple.__new__


class InputBuffers:
    """The held records and paused partitions of one stream thread.

    ``tp_task`` (partition -> its task) and ``readiness`` are the thread's own, shared;
    ``limit`` is ``buffered.records.per.partition``; ``owner`` names the thread in errors.
    """

    def __init__(self, tp_task: dict[TP, StreamTask], readiness: Readiness, limit: int, owner: str) -> None:
        self.tp_task = tp_task
        self.readiness = readiness
        self.limit = limit
        self.owner = owner
        #: records waiting for room in their task buffer, oldest first, and their bytes
        self.held: dict[TP, deque[RawRecord]] = {}
        self.held_bytes: dict[TP, int] = {}
        #: partitions this thread paused
        self.paused: set[TP] = set()
        self._missing_since: float | None = None
        # the executor refills a buffer that ran dry within a loop (:meth:`refill`)
        readiness.refill = self.refill

    def holds(self, tp: TP) -> bool:
        """Whether records of ``tp`` wait outside its task buffer."""
        return tp in self.held

    def any_held(self) -> bool:
        return bool(self.held)

    def waiting_input(self, tp: TP) -> bool:
        """Whether the next records of ``tp`` are to come from the consumer: none are held
        (held records go into the buffer as it runs dry, :meth:`refill`). Paused or not: a
        partition is paused only while records are held for it or its buffer is full, and is
        resumed at the next loop once it ran dry, its next records being on the broker
        (exempting paused partitions let the thread's other tasks run past them)."""
        return tp not in self.held

    def refill(self, tps: Iterable[TP]) -> None:
        """Move the records held for each of ``tps`` whose task buffer ran dry into it, up
        to ``limit`` (the executor calls it after a task's run). They are the partition's
        next records: Kafka's ``PartitionGroup`` has every fetched record in its queue, and
        duet holds them outside the buffer only to bound it. Before, a buffer that ran dry
        within a loop stayed empty until the next loop while its records were held: its
        task counted it as at its end (end-of-partition seen) or waited, the thread's other
        tasks ran past its records, and a backlog in timestamp order reached a repartition
        topic out of order (records dropped as late downstream; issue 25's liveness
        property)."""
        held = self.held
        if not held:
            return
        tp_task = self.tp_task
        for tp in tps:
            queue = held.get(tp)
            if queue is not None and not tp_task[tp].buffered_in(*tp):
                self._move(tp, queue, self.limit)

    def _move(self, tp: TP, held: deque[RawRecord], room: int) -> bool:
        """Move up to ``room`` records held for ``tp`` into its task buffer; True once
        nothing is held for it any more."""
        queue = self.tp_task[tp].queue(*tp)
        if room >= len(held):  # all of them: one extend, no byte count
            queue.extend(held)
            del self.held[tp], self.held_bytes[tp]
            return True
        n = self.held_bytes[tp]
        popleft, append = held.popleft, queue.append
        for _ in range(room):
            raw = popleft()
            key, value = raw[3], raw[4]
            n -= (len(key) if key else 0) + (len(value) if value else 0)  # key and value bytes
            append(raw)
        self.held_bytes[tp] = n
        return False

    def forget(self, tp: TP) -> None:
        """Drop what is held for a partition whose task closed."""
        self.paused.discard(tp)
        self.held.pop(tp, None)
        self.held_bytes.pop(tp, None)

    def add(self, msgs: list[Any]) -> None:
        """Buffer consumed records in their tasks' partition queues, up to ``limit`` each,
        the rest held; note ends of partitions and consumer errors.

        Raises:
            StreamsException: on a fatal consumer error, or when a source topic has been
                missing for ``MISSING_TOPIC_TIMEOUT_S`` seconds (Kafka's
                MissingSourceTopicException).
        """
        tp_task, eof, fetched = self.tp_task, self.readiness.eof, self.readiness.fetched_next
        limit = self.limit
        last_tp: TP | None = None
        # the current run's topic and partition, compared per record (no tuple per record)
        last_topic: str | None = None
        last_partition = -1
        queue: Any = None
        room = 0
        offset = -1
        # the records of the current partition beyond its room, held once the partition
        # changes (one deque extend and one bytes update per run of records, not per record)
        over: list[RawRecord] = []
        over_bytes = 0
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if last_tp is not None:
                    fetched[last_tp] = offset + 1
                    if over:
                        self._hold(last_tp, over, over_bytes)
                        over, over_bytes = [], 0
                last_tp, last_topic = None, None
                tp = (msg.topic(), msg.partition())
                if err.code() == KafkaError._PARTITION_EOF:
                    if tp in tp_task:
                        eof[tp] = True
                    continue
                if err.fatal():
                    raise StreamsException(f"consumer of {self.owner} failed: {err.str()}")
                if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    # Kafka: MissingSourceTopicException; tolerated briefly (metadata lag)
                    self._missing_since = self._missing_since or time.monotonic()
                    if time.monotonic() - self._missing_since > MISSING_TOPIC_TIMEOUT_S:
                        raise StreamsException(f"source topic missing for {MISSING_TOPIC_TIMEOUT_S:.0f} s: {err.str()}")
                log.warning("consumer of %s: %s", self.owner, err.str())
                continue
            topic, partition = msg.topic(), msg.partition()
            if partition != last_partition or topic != last_topic:
                tp = (topic, partition)
                task = tp_task.get(tp)
                if task is None:
                    continue  # revoked meanwhile
                if last_tp is not None:
                    fetched[last_tp] = offset + 1
                    if over:
                        self._hold(last_tp, over, over_bytes)
                        over, over_bytes = [], 0
                eof[tp] = False
                queue = task.queue(topic, partition)
                room = 0 if tp in self.held else limit - len(queue)
                last_tp, last_topic, last_partition = tp, topic, partition
            offset = msg.offset()
            key, value = msg.key(), msg.value()
            raw = _new_raw(RawRecord, (topic, partition, offset, key, value, msg.timestamp()[1], msg.headers() or ()))
            if room > 0:
                queue.append(raw)
                room -= 1
            else:
                over.append(raw)
                over_bytes += (len(key) if key else 0) + (len(value) if value else 0)  # key and value bytes
        if last_tp is not None:
            fetched[last_tp] = offset + 1
            if over:
                self._hold(last_tp, over, over_bytes)

    def _hold(self, tp: TP, raws: list[RawRecord], nbytes: int) -> None:
        """Hold ``raws`` (consecutive records of ``tp``, ``nbytes`` bytes of keys and values)."""
        held = self.held.get(tp)
        if held is None:
            held = self.held[tp] = deque()
        held.extend(raws)
        self.held_bytes[tp] = self.held_bytes.get(tp, 0) + nbytes

    def pause_resume(self, consumer: Consumer) -> None:
        """Move held records into their task buffers while these hold fewer than ``limit``
        records; pause a partition once it holds :func:`held_bytes_limit` bytes besides
        (Kafka's ``StreamTask#addRecords`` pauses a partition whose buffer is over the
        limit, but its consumer keeps what it fetched), resume it once nothing is held and
        its buffer is below the limit again."""
        limit = self.limit
        pause_at = held_bytes_limit(len(self.tp_task))
        pause, resume = [], []
        held_bytes = self.held_bytes
        for tp, held in list(self.held.items()):
            room = limit - self.tp_task[tp].buffered_in(*tp)
            if room > 0 and self._move(tp, held, room):
                continue
            if tp not in self.paused and held_bytes[tp] >= pause_at:
                pause.append(tp)
        for tp in self.paused:
            if tp not in self.held and self.tp_task[tp].buffered_in(*tp) < limit:
                resume.append(tp)
        if pause:
            consumer.pause([TopicPartition(t, p) for t, p in pause])
            self.paused.update(pause)
        if resume:
            consumer.resume([TopicPartition(t, p) for t, p in resume])
            self.paused.difference_update(resume)
