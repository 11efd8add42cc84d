"""The record collector: how tasks send records to Kafka (Kafka's ``RecordCollectorImpl``).

One collector per stream thread wraps the thread's producer. It chooses the partition of
every record itself (murmur2 of the key bytes, as the Java client; round-robin for null
keys), remembers the offset of the last acknowledged record per changelog partition (for
checkpoints), and turns a failed delivery into a :class:`StreamsException` at the next
``send`` or ``flush`` (as Kafka's collector rethrows the first send error).
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from ..errors import StreamsException
from .partitioning import RoundRobin, partition_for_key
from .task_timeout import TaskTimeout, topic_partition_count

log = logging.getLogger("speed_layer.collector")

Headers = list[tuple[str, bytes | None]]

#: ``send`` serves delivery reports once per this many records (and ``flush`` waits for all)
POLL_EVERY_SENDS = 500

__all__ = ["KafkaRecordCollector", "PartitionCounts"]


class PartitionCounts:
    """Partition counts of topics from metadata, cached (shared by the threads of one
    instance). Topics of a running application do not change partition counts.

    The instance seeds the counts of the topics it knows at start-up (sources, internal
    topics, sinks named in the topology); only topics named by a topic extractor are looked
    up on their first send, with Kafka's timeout model (KIP-572, :mod:`.task_timeout`): a
    retriable error (the broker unreachable or restarting, leader not available, the topic
    unknown while its metadata propagates) is retried every ``retry_backoff_ms`` until
    ``task_timeout_ms`` passed, then :class:`TaskTimeoutException` is raised
    (``task_timeout_ms`` 0: at the first error). One metadata request waits at most
    ``max_block_ms`` (Kafka's producer blocks in ``partitionsFor`` up to ``max.block.ms``).
    """

    def __init__(self, bootstrap: str, known: dict[str, int] | None = None, *, task_timeout_ms: int = 300_000,
                 retry_backoff_ms: int = 100, max_block_ms: int = 60_000) -> None:
        self._bootstrap = bootstrap
        self._counts: dict[str, int] = dict(known or {})
        self._lock = threading.Lock()
        self.timeouts = TaskTimeout(task_timeout_ms, retry_backoff_ms, max_block_ms)

    @property
    def task_timeout_ms(self) -> int:
        return self.timeouts.task_timeout_ms

    @property
    def retry_backoff_ms(self) -> int:
        return self.timeouts.retry_backoff_ms

    @property
    def max_block_ms(self) -> int:
        return self.timeouts.max_block_ms

    def set(self, topic: str, n: int) -> None:
        with self._lock:
            self._counts[topic] = n

    def known(self, topic: str) -> int | None:
        """The cached count of ``topic`` (None: not looked up yet)."""
        return self._counts.get(topic)

    def get(self, topic: str, client: Any, timeout_s: float | None = None) -> int:
        """Partition count of ``topic`` (``client`` answers ``list_topics``).

        ``timeout_s``: the longest one metadata request waits (default ``max_block_ms``);
        the whole look-up, retries included, ends after ``task_timeout_ms``.

        Raises:
            TaskTimeoutException: retriable errors (or the topic missing from the metadata)
                for longer than ``task_timeout_ms`` (at least one retry when it is above 0).
            StreamsException: a non-retriable error (e.g. authorization), at once.
        """
        n = self._counts.get(topic)
        if n is not None:
            return n
        n = topic_partition_count(client, topic, self.timeouts, request_s=timeout_s)
        self.set(topic, n)
        return n


class KafkaRecordCollector:
    """Implements the task's ``RecordCollector`` over a confluent-kafka ``Producer``.

    ``send(topic, key, value, timestamp_ms, headers, partition)``: ``partition`` None means
    murmur2 of ``key`` (null key: round-robin). Delivery reports record the first error;
    those of the topics registered with :meth:`report_offsets` (changelogs) and of tracked
    partitions also update :attr:`acked_offsets` (``{(topic, partition): offset + 1}``).
    The sends to other topics (output topics, dead letters) get a callback that looks at
    the error only: a third of a stream thread's sends, each report one call cheaper.
    """

    def __init__(self, producer: Producer, counts: PartitionCounts, *, transactional: bool = False) -> None:
        """``producer``: configured with ``delivery.report.only.error`` when nothing needs
        the offsets of acknowledged sends (no changelog, no tracked partition): then only
        failed deliveries are reported (the stream thread's choice)."""
        self.producer = producer
        self.counts = counts
        self.transactional = transactional
        self.round_robin = RoundRobin()
        self.acked_offsets: dict[tuple[str, int], int] = {}
        self.sent = 0
        #: partitions whose sends are tracked until this thread consumes them back (the
        #: repartition partitions it owns): timestamps (ms) of unacknowledged sends and
        #: ``(offset, timestamp)`` of acknowledged ones
        self.tracked: set[tuple[str, int]] = set()
        #: topics whose delivery reports update ``acked_offsets`` (changelogs, and the
        #: topics of tracked partitions)
        self.offset_topics: set[str] = set()
        self._unacked: dict[tuple[str, int], deque[int]] = {}
        self._acked: dict[tuple[str, int], deque[tuple[int, int]]] = {}
        self._error: KafkaError | None = None
        self._error_topic: str | None = None
        #: partition counts of the topics sent to (partition counts do not change)
        self._counts: dict[str, int] = {}
        #: bound once (the hot path: one produce per record)
        self._produce = producer.produce
        self._report = self._on_delivery
        self._report_error = self._on_error

    # -- delivery reports
    def _on_error(self, err: KafkaError | None, msg: Any) -> None:
        """The delivery report of a topic whose offsets nothing reads: the error only."""
        if err is not None and self._error is None:
            self._error, self._error_topic = err, msg.topic()

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        tp = (msg.topic(), msg.partition())
        unacked = self._unacked.get(tp) if self._unacked else None
        if err is not None:
            if unacked:
                unacked.popleft()
            if self._error is None:
                self._error, self._error_topic = err, msg.topic()
            return
        if unacked:
            self._acked.setdefault(tp, deque()).append((msg.offset(), unacked.popleft()))
        off = msg.offset() + 1
        if off > self.acked_offsets.get(tp, -1):
            self.acked_offsets[tp] = off

    def pending_timestamp(self, tp: tuple[str, int], consumed_next: int) -> int | None:
        """Timestamp (ms) of the oldest record this collector sent to a tracked partition
        that is not yet consumed back (offsets below ``consumed_next`` are); None if none."""
        acked = self._acked.get(tp)
        while acked and acked[0][0] < consumed_next:
            acked.popleft()
        if acked:
            return acked[0][1]
        unacked = self._unacked.get(tp)
        return unacked[0] if unacked else None

    def track(self, tp: tuple[str, int]) -> None:
        self.tracked.add(tp)
        self.offset_topics.add(tp[0])

    def report_offsets(self, topic: str) -> None:
        """Record the acknowledged offsets of ``topic`` in :attr:`acked_offsets` (a
        changelog: checkpoints write them)."""
        self.offset_topics.add(topic)

    def untrack(self, tp: tuple[str, int]) -> None:
        self.tracked.discard(tp)
        self._acked.pop(tp, None)
        self._unacked.pop(tp, None)

    def check_error(self) -> None:
        """Raise the first delivery error seen (Kafka's ``RecordCollector#checkForException``).

        Raises:
            StreamsException: naming the topic and Kafka's error.
        """
        if self._error is not None:
            err, topic = self._error, self._error_topic
            self._error = None
            raise StreamsException(f"Error encountered sending record to topic {topic}: {err.str()} ({err.name()})") from KafkaException(err)

    def discard_error(self) -> KafkaError | None:
        """Forget (and return) the pending delivery error: the sends of an aborted
        transaction fail with "purged", which belongs to that transaction only."""
        err, self._error, self._error_topic = self._error, None, None
        return err

    # -- RecordCollector protocol
    def partitions_for(self, topic: str) -> int:
        return self.counts.get(topic, self.producer)

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers, partition: int | None) -> None:
        """Produce one record (asynchronously; ``flush`` waits for acknowledgements).

        Raises:
            StreamsException: on an earlier delivery error, or when the topic is unknown.
        """
        if self._error is not None:
            self.check_error()
        n = self._counts.get(topic)
        if n is None:
            n = self._counts[topic] = self.partitions_for(topic)
        if partition is None:
            partition = partition_for_key(key, n) if key is not None else self.round_robin.next(topic, n)
        elif not 0 <= partition < n:
            raise StreamsException(f"partition {partition} out of range for topic {topic} with {n} partitions")
        produce = self._produce
        # positional arguments (topic, value, key, partition, callback, its alias
        # on_delivery, timestamp, headers): parsing keywords cost a third of the call
        hdrs = [(k, v) for k, v in headers] if headers else None
        ts = timestamp if timestamp >= 0 else 0  # 0: librdkafka stamps the current time
        report = self._report if topic in self.offset_topics else self._report_error
        while True:
            try:
                if hdrs is None:
                    produce(topic, value, key, partition, report, None, ts)
                else:
                    produce(topic, value, key, partition, report, None, ts, hdrs)
                break
            except BufferError:
                # local queue full: serve delivery reports and retry (Kafka blocks in send)
                self.producer.poll(0.1)
            except KafkaException as exc:
                raise StreamsException(f"Error sending record to topic {topic}: {exc}") from exc
        self.sent += 1
        if self.tracked and (topic, partition) in self.tracked:
            self._unacked.setdefault((topic, partition), deque()).append(timestamp)
        if self.sent % POLL_EVERY_SENDS == 0:
            self.producer.poll(0)

    def poll(self) -> None:
        """Serve the delivery reports that arrived (the stream thread calls it once per
        loop; ``send`` serves them only every ``POLL_EVERY_SENDS`` records: a ``poll``
        per record cost more than the ``produce`` itself)."""
        self.producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every sent record is acknowledged (Kafka's ``flush`` before commit).

        Raises:
            StreamsException: if a delivery failed or records remain after ``timeout_s``.
        """
        left = self.producer.flush(timeout_s)
        self.check_error()
        if left:
            raise StreamsException(f"{left} record(s) not acknowledged after {timeout_s} s")

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush what is still queued (best effort: errors are logged, not raised)."""
        left = self.producer.flush(timeout_s)
        if left:
            log.warning("%d record(s) not delivered at close", left)
