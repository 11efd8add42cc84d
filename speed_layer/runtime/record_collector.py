"""The record collector: how tasks send records to Kafka (Kafka's ``RecordCollectorImpl``).

One collector per stream thread wraps the thread's producer. It chooses the partition of
every record itself (murmur2 of the key bytes, as the Java client; round-robin for null
keys), remembers the offset of the last acknowledged record per changelog partition (for
checkpoints), and treats a failed send as Kafka's ``RecordCollectorImpl#recordSendError``
(:mod:`.delivery_errors`): fatal errors, the production exception handler's FAIL and a
failed dead letter are raised at the next ``send``, ``flush`` or commit (as Kafka's
collector rethrows the first send error); its CONTINUE drops the record
(``dropped-records``), and ``dead_letter`` sends it to the dead-letter topic.
"""
from __future__ import annotations

import logging
import sys
import threading
from collections import deque
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from ..errors import StreamsException, TaskCorruptedException, TaskMigratedException
from .bounded_call import run_bounded
from .delivery_errors import BATCH_OVERHEAD, RECORD_OVERHEAD_MAX, dead_letter_headers, record_batch_size, send_error_kind
from .partitioning import RoundRobin, partition_for_key
from .task import Metrics
from .task_timeout import TaskTimeout, topic_partition_count

log = logging.getLogger("speed_layer.collector")

#: producers never destroyed while the process runs: those replaced after a fatal error
#: (``StreamThread._recover_producer``) and those that could not be closed cleanly
#: (:func:`retire_producer`)
RETIRED_PRODUCERS: list[Producer] = []
#: how long a producer's ``close()`` may take at shutdown, s
CLOSE_TIMEOUT_S = 10.0


def retire_producer(producer: Producer, *, purge: bool = True) -> None:
    """Drop what ``producer`` still queues (unless ``purge`` is False: a hung producer is
    left alone) and keep it referenced for the process' life instead of destroying it:
    destroying a transactional producer whose transaction failed mid-request can abort the
    process on a librdkafka 2.16 assertion (``rd_kafka_enq_once_del_source_return``, seen
    in the broker-outage test)."""
    if purge:
        try:
            producer.purge()
            producer.flush(0)
        except Exception:  # noqa: BLE001 - the producer is dead anyway
            log.debug("purging a retired producer failed", exc_info=True)
    RETIRED_PRODUCERS.append(producer)


def close_producer(producer: Producer, flush_s: float, name: str) -> None:
    """Close ``producer`` at shutdown, as Kafka's ``Producer#close``: flush for at most
    ``flush_s`` seconds, then end its librdkafka threads and broker connections (within
    :data:`CLOSE_TIMEOUT_S`, else left to a daemon thread, WARNING). One that still holds
    records after the flush (no broker answered) is retired instead
    (:func:`retire_producer`), its records logged as not delivered. Never raises."""
    left = producer.flush(flush_s)
    if left:
        log.warning("%s: %d record(s) not delivered at close", name, left)
        retire_producer(producer)
        return
    returned, error = run_bounded(f"{name}: producer.close", producer.close, CLOSE_TIMEOUT_S)
    if not returned:
        log.warning("%s: the producer did not close within %.0f s: left to a daemon thread", name, CLOSE_TIMEOUT_S)
    elif error is not None:
        log.error("%s: closing the producer failed", name, exc_info=error)

Headers = list[tuple[str, bytes | None]]

#: ``send`` serves delivery reports once per this many records (and ``flush`` waits for all)
POLL_EVERY_SENDS = 500
#: the task id under which the collector counts ``dropped-records`` and ``dead-lettered``
#: (a delivery report comes after its task moved on: the collector does not know it)
METRICS_ID = "producer"
#: the size budget of a topic whose ``max.message.bytes`` is not known
NO_LIMIT = sys.maxsize

__all__ = ["KafkaRecordCollector", "PartitionCounts"]


class PartitionCounts:
    """Partition counts of topics from metadata, cached (shared by the threads of one
    instance), and the ``max.message.bytes`` of those known at start-up. Topics of a
    running application do not change partition counts.

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
        self._max_bytes: dict[str, int] = {}
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

    def set_max_message_bytes(self, limits: dict[str, int]) -> None:
        """The topics' ``max.message.bytes`` (bytes), looked up at start-up: the record
        collectors fail a record larger than that before producing it."""
        with self._lock:
            self._max_bytes.update(limits)

    def max_message_bytes(self, topic: str) -> int | None:
        """The ``max.message.bytes`` of ``topic`` (None: not known)."""
        return self._max_bytes.get(topic)

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
    murmur2 of ``key`` (null key: round-robin). Delivery reports of failed sends go to
    :meth:`_send_failed` (Kafka's ``RecordCollectorImpl#recordSendError``, see
    :mod:`.delivery_errors`); those of the topics registered with :meth:`report_offsets`
    (changelogs) and of tracked partitions also update :attr:`acked_offsets`
    (``{(topic, partition): offset + 1}``). The sends to other topics (output topics, dead
    letters) get a callback that looks at the error only: a third of a stream thread's
    sends, each report one call cheaper.

    A record larger than its topic's ``max.message.bytes`` (when :class:`PartitionCounts`
    knows it) fails before it is produced, as a broker's ``MSG_SIZE_TOO_LARGE`` would: the
    broker rejects a whole batch, and librdkafka, unlike Kafka's Java producer, does not
    split it to fail only the oversized record.
    """

    def __init__(self, producer: Producer, counts: PartitionCounts, *, transactional: bool = False,
                 handler: str = "log_and_fail", dead_letter_topic: str | None = None,
                 metrics: Metrics | None = None) -> None:
        """``producer``: configured with ``delivery.report.only.error`` when nothing needs
        the offsets of acknowledged sends (no changelog, no tracked partition): then only
        failed deliveries are reported (the stream thread's choice). ``handler``: the
        config's ``production.exception.handler`` for a record that cannot be written;
        ``dead_letter_topic``: ``errors.dead.letter.queue.topic.name``; ``metrics``: where
        dropped and dead-lettered records are counted (under :data:`METRICS_ID`)."""
        self.producer = producer
        self.counts = counts
        self.transactional = transactional
        self.handler = handler
        self.dead_letter_topic = dead_letter_topic
        self.metrics = metrics if metrics is not None else Metrics()
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
        #: the first failed send's exception, raised by the next send/flush/commit
        self._error: StreamsException | None = None
        self._error_code: KafkaError | None = None
        #: dead letters of failed sends, sent at the next send/poll/flush (not from the
        #: delivery report callback): ``(key, value, timestamp, headers)``
        self._dead_letters: list[tuple[bytes | None, bytes | None, int, Headers]] = []
        #: per topic sent to: its partition count, the key + value bytes under which a
        #: record without headers surely fits its ``max.message.bytes`` (``NO_LIMIT``: not
        #: known), its delivery report callback, and whether some of its partitions are
        #: tracked (cleared when :meth:`track`, :meth:`untrack` or :meth:`report_offsets`
        #: change these)
        self._topics: dict[str, tuple[int, int, Any, bool]] = {}
        #: bound once (the hot path: one produce per record)
        self._produce = producer.produce
        self._report = self._on_delivery
        self._report_error = self._on_error

    # -- delivery reports
    def _on_error(self, err: KafkaError | None, msg: Any) -> None:
        """The delivery report of a topic whose offsets nothing reads: the error only."""
        if err is not None:
            self._send_failed(err, msg.topic(), msg.partition(), msg.key(), msg.value(), msg.timestamp()[1], msg.headers())

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        tp = (msg.topic(), msg.partition())
        unacked = self._unacked.get(tp) if self._unacked else None
        if err is not None:
            if unacked:
                unacked.popleft()
            self._send_failed(err, tp[0], tp[1], msg.key(), msg.value(), msg.timestamp()[1], msg.headers())
            return
        if unacked:
            self._acked.setdefault(tp, deque()).append((msg.offset(), unacked.popleft()))
        off = msg.offset() + 1
        if off > self.acked_offsets.get(tp, -1):
            self.acked_offsets[tp] = off

    # -- failed sends (Kafka's RecordCollectorImpl#recordSendError)
    def _send_failed(self, err: KafkaError, topic: str, partition: int, key: bytes | None, value: bytes | None,
                     timestamp: int, headers: Headers | None) -> None:
        """Treat one failed send by the kind of its error (:func:`send_error_kind`): record
        the exception the next send/flush/commit raises, or ask ``production.exception.handler``.
        As Kafka, once an exception is pending the later failures are not looked at."""
        kind = send_error_kind(err)
        if kind == "aborted":
            log.debug("send to %s-%d aborted with its transaction: %s", topic, partition, err.str())
            return
        if self._error is not None:
            return
        message = f"Error encountered sending record to topic {topic}: {err.str()} ({err.name()})"
        if kind == "fatal":
            self._fail(StreamsException, f"{message}. Written offsets would not be recorded and no more records would "
                                         f"be sent since this is a fatal error.", err)
        elif kind == "fenced":
            # the cause is marked fatal: the stream thread replaces the producer (Kafka's
            # TaskMigratedException handling) instead of dying
            fatal = KafkaError(err.code(), err.str(), fatal=True)
            self._fail(TaskMigratedException, f"{message}. Written offsets would not be recorded and no more records "
                                              f"would be sent since the producer is fenced.", fatal)
        elif kind == "retriable":
            self._fail(TaskCorruptedException, f"{message}. The broker is slow or unavailable: the tasks restart from "
                                               f"their last committed offsets. Consider a larger `delivery.timeout.ms` "
                                               f"(librdkafka's message.timeout.ms) to wait longer.", err)
        elif topic == self.dead_letter_topic:
            # KIP-1034: a dead letter that cannot be written goes to the uncaught exception handler
            self._fail(StreamsException, f"{message}. The dead letter could not be written to {topic}.", err)
        else:
            self._handle_record_error(err, message, topic, key, value, timestamp, headers)

    def _fail(self, kind: type[StreamsException], message: str, err: KafkaError) -> None:
        """Record ``kind(message)`` (its cause ``KafkaException(err)``) for the next
        send/flush/commit, and log it (Kafka logs every send error)."""
        exc = kind(message)
        exc.__cause__ = KafkaException(err)
        self._error, self._error_code = exc, err
        log.error("%s", message)

    def _handle_record_error(self, err: KafkaError, message: str, topic: str, key: bytes | None, value: bytes | None,
                             timestamp: int, headers: Headers | None) -> None:
        """``production.exception.handler`` for a record the broker (or the producer)
        refused: ``log_and_fail`` raises at the next send/flush/commit; ``log_and_continue``
        drops it (``dropped-records``); ``dead_letter`` also sends it (its key, value and
        headers as they were sent, with the KIP-1034 error headers and
        ``__streams.errors.sink.topic``) to the dead-letter topic.

        Under exactly-once a failed send leaves the transaction unable to commit (Kafka's
        producer moves it to an abortable error; ``StreamsProducer#commitTransaction`` then
        raises a ``StreamsException``): the handler's CONTINUE is logged and counted, but
        the error is raised as under FAIL, and no dead letter is sent (it would be aborted
        with the transaction)."""
        if self.handler == "log_and_fail":
            self._fail(StreamsException, f"{message}. Exception handler chose to FAIL the processing, no more records "
                                         f"would be sent.", err)
            return
        self.metrics.inc(METRICS_ID, "dropped-records")
        if self.transactional:
            self._fail(StreamsException, f"{message}. production.exception.handler={self.handler} chose to continue, "
                                         f"but under exactly_once_v2 a failed send leaves the transaction unable to "
                                         f"commit (as Kafka's producer): no more records would be sent.", err)
            return
        if self.handler == "log_and_continue":
            log.warning("%s. Exception handler chose to CONTINUE processing in spite of this error.", message)
            return
        self.metrics.inc(METRICS_ID, "dead-lettered")
        log.warning("%s. The record goes to the dead-letter topic %s.", message, self.dead_letter_topic)
        extra = dead_letter_headers("production", KafkaException(err), f"{err.str()} ({err.name()})")
        self._dead_letters.append((key, value, timestamp, list(headers or []) + extra +
                                   [("__streams.errors.sink.topic", topic.encode())]))

    def _send_dead_letters(self) -> None:
        """Send the dead letters of failed sends (outside the delivery report callbacks).

        Raises:
            StreamsException: no dead-letter topic set, or a dead letter cannot be sent.
        """
        letters, self._dead_letters = self._dead_letters, []
        if not letters:
            return
        if not self.dead_letter_topic:
            raise StreamsException("errors.dead.letter.queue.topic.name must be set when an exception handler is 'dead_letter'")
        for key, value, timestamp, headers in letters:
            self.send(self.dead_letter_topic, key, value, timestamp, headers, None)

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
        self._topics.clear()

    def report_offsets(self, topic: str) -> None:
        """Record the acknowledged offsets of ``topic`` in :attr:`acked_offsets` (a
        changelog: checkpoints write them)."""
        self.offset_topics.add(topic)
        self._topics.clear()

    def untrack(self, tp: tuple[str, int]) -> None:
        self.tracked.discard(tp)
        self._acked.pop(tp, None)
        self._unacked.pop(tp, None)
        self._topics.clear()

    def check_error(self) -> None:
        """Raise the first failed send's exception (Kafka's ``RecordCollectorImpl#checkForException``),
        once.

        Raises:
            StreamsException: naming the topic and Kafka's error (a fatal error, the
                handler's FAIL, a dead letter that could not be written, or any record
                error under exactly-once).
            TaskMigratedException: the producer is fenced (its cause is a fatal ``KafkaError``).
            TaskCorruptedException: a retriable error (e.g. a delivery timed out).
        """
        if self._error is not None:
            exc, self._error, self._error_code = self._error, None, None
            raise exc

    def discard_error(self) -> KafkaError | None:
        """Forget (and return) the pending send error and dead letters: the sends of an
        aborted transaction or of rewound tasks belong to what is being undone."""
        err, self._error, self._error_code = self._error_code, None, None
        self._dead_letters.clear()
        return err

    # -- RecordCollector protocol
    def partitions_for(self, topic: str) -> int:
        return self.counts.get(topic, self.producer)

    def _topic(self, topic: str) -> tuple[int, int, Any, bool]:
        """Partition count, size budget, delivery report callback and whether partitions
        of ``topic`` are tracked (see ``_topics``), cached."""
        limit = self.counts.max_message_bytes(topic)
        info = self._topics[topic] = (self.partitions_for(topic),
                                      NO_LIMIT if limit is None else limit - BATCH_OVERHEAD - RECORD_OVERHEAD_MAX,
                                      self._report if topic in self.offset_topics else self._report_error,
                                      any(tp[0] == topic for tp in self.tracked))
        return info

    def _too_large(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None) -> KafkaError | None:
        """``MSG_SIZE_TOO_LARGE`` when this record alone exceeds the topic's ``max.message.bytes``."""
        limit = self.counts.max_message_bytes(topic)
        if limit is None:
            return None
        size = record_batch_size(key, value, headers)
        if size <= limit:
            return None
        return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, f"Record of {size} bytes is larger than max.message.bytes "
                                                          f"{limit} of topic {topic}")

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers, partition: int | None) -> None:
        """Produce one record (asynchronously; ``flush`` waits for acknowledgements). A
        record the producer refuses (too large, an invalid record) is a failed send
        (:meth:`_send_failed`), as Kafka's producer hands such errors to the send's callback.

        Raises:
            StreamsException: an earlier send failed (see :meth:`check_error`), this one
                failed with a fatal error, or the topic is unknown.
        """
        if self._error is not None or self._dead_letters:
            self.check_error()
            self._send_dead_letters()
        info = self._topics.get(topic)
        if info is None:
            info = self._topic(topic)
        n, budget, report, tracked = info
        if partition is None:
            partition = partition_for_key(key, n) if key is not None else self.round_robin.next(topic, n)
        elif not 0 <= partition < n:
            raise StreamsException(f"partition {partition} out of range for topic {topic} with {n} partitions")
        produce = self._produce
        # positional arguments (topic, value, key, partition, callback, its alias
        # on_delivery, timestamp, headers): parsing keywords cost a third of the call
        hdrs = [(k, v) for k, v in headers] if headers else None
        ts = timestamp if timestamp >= 0 else 0  # 0: librdkafka stamps the current time
        if hdrs is not None or (len(value) if value is not None else 0) + (len(key) if key is not None else 0) > budget:
            too_large = self._too_large(topic, key, value, hdrs)
            if too_large is not None:
                self._send_failed(too_large, topic, partition, key, value, timestamp, hdrs)
                return
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
                self._produce_failed(exc, topic, partition, key, value, timestamp, hdrs)
                return
        if tracked and (topic, partition) in self.tracked:
            self._unacked.setdefault((topic, partition), deque()).append(timestamp)
        self.sent = sent = self.sent + 1
        if not sent % POLL_EVERY_SENDS:
            self.producer.poll(0)

    def _produce_failed(self, exc: KafkaException, topic: str, partition: int, key: bytes | None, value: bytes | None,
                        timestamp: int, headers: Headers | None) -> None:
        """A ``produce`` the producer refused at once (e.g. ``MSG_SIZE_TOO_LARGE`` above its
        ``message.max.bytes``): a failed send; raised now unless the handler went on.

        Raises:
            StreamsException: see :meth:`check_error`.
        """
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else KafkaError(KafkaError._FAIL, str(exc))
        self._send_failed(err, topic, partition, key, value, timestamp, headers)
        self.check_error()

    def poll(self) -> None:
        """Serve the delivery reports that arrived (the stream thread calls it once per
        loop; ``send`` serves them only every ``POLL_EVERY_SENDS`` records: a ``poll``
        per record cost more than the ``produce`` itself), then send the dead letters of
        failed sends."""
        self.producer.poll(0)
        if self._dead_letters:
            self._send_dead_letters()

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every sent record (and dead letter) is acknowledged (Kafka's
        ``flush`` before commit).

        Raises:
            StreamsException: if a send failed (see :meth:`check_error`) or records remain
                after ``timeout_s``.
        """
        left = self.producer.flush(timeout_s)
        if self._dead_letters and self._error is None:
            self._send_dead_letters()
            left = self.producer.flush(timeout_s)
        self.check_error()
        if left:
            raise StreamsException(f"{left} record(s) not acknowledged after {timeout_s} s")

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush what is still queued for at most ``timeout_s`` seconds, then close the
        producer (:func:`close_producer`; best effort: errors are logged, not raised)."""
        close_producer(self.producer, timeout_s, "record collector")
