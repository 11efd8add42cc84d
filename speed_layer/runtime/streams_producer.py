"""StreamsProducer: a stream thread's producer, its record collector and its transaction
(Kafka's ``org.apache.kafka.streams.processor.internals.StreamsProducer``).

It creates the producer (exactly-once, ``exactly_once_v2``: a transactional producer with a
stable ``transactional.id`` per thread, whose ``init_transactions`` fences any older producer
with the same id and aborts its open transaction) and the :class:`.KafkaRecordCollector`
that sends through it; opens a transaction before a task processes or punctuates
(:meth:`StreamsProducer.maybe_begin`); commits it with the consumed offsets (KIP-447);
aborts it; replaces a producer that failed fatally (Kafka's ``resetProducer``); and closes it
when the thread ends.

librdkafka 2.16 can block forever in ``send_offsets_to_transaction`` after the transaction
coordinator timed out (seen in ``bench/faults/broker_outage.py``): the transactional calls
that take a timeout run under a watchdog (:func:`.run_bounded`), and one that has not
returned ``WATCHDOG_GRACE_S`` after its own timeout is reported as a fatal ``_TIMED_OUT``
(:func:`is_hung`), so that the thread replaces the producer.

What the stream thread does about a failed transaction (closing its tasks, rewinding them to
the committed offsets) is not this module's: it only reports the errors.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from ..errors import StreamsException
from .bounded_call import run_bounded
from .record_collector import KafkaRecordCollector, close_producer, retire_producer

if TYPE_CHECKING:
    from ..config import StreamsConfig
    from .record_collector import PartitionCounts
    from .task import Metrics

log = logging.getLogger("speed_layer.thread")

__all__ = ["ABORT_TIMEOUT_S", "DEFAULT_TRANSACTION_TIMEOUT_MS", "StreamsProducer", "WATCHDOG_GRACE_S",
           "fatal_producer_error", "is_hung"]

#: How long an exactly-once thread retries aborting a transaction that failed to commit
#: before it replaces its producer instead (whose ``init_transactions`` aborts it), s
ABORT_TIMEOUT_S = 20.0
#: how much longer than its own timeout a transactional call may take before it is
#: considered hung (see :func:`_watchdog`), s
WATCHDOG_GRACE_S = 10.0
#: ``transaction.timeout.ms`` when the producer's config has none (Kafka Streams' default
#: under exactly-once), ms
DEFAULT_TRANSACTION_TIMEOUT_MS = 10_000


def _watchdog(what: str, call: Callable[[], None], timeout_s: float) -> None:
    """Run a transactional producer call that takes a timeout (s), but give up on it when it
    has not returned ``WATCHDOG_GRACE_S`` after that timeout (:func:`.run_bounded`).
    librdkafka 2.16 can block forever in ``send_offsets_to_transaction`` after the
    transaction coordinator timed out (seen in ``bench/faults/broker_outage.py``); the
    stuck call is left in its daemon thread and the producer is replaced.

    Raises:
        KafkaException: the call's own error, or a fatal ``_TIMED_OUT`` when it hung.
    """
    returned, error = run_bounded(what, call, timeout_s + WATCHDOG_GRACE_S)
    if not returned:
        log.error("%s did not return %.0f s after its %.0f s timeout: replacing the producer", what, WATCHDOG_GRACE_S, timeout_s)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{what} hung", fatal=True))
    if error is not None:
        raise error


def is_hung(err: object) -> bool:
    """Whether ``err`` is :func:`_watchdog`'s verdict on a transactional call that hung (a
    fatal ``_TIMED_OUT``; librdkafka's own timeouts are retriable)."""
    return isinstance(err, KafkaError) and err.fatal() and err.code() == KafkaError._TIMED_OUT


def fatal_producer_error(exc: BaseException) -> KafkaError | None:
    """The fatal producer error behind ``exc`` (its chain of causes), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        err = seen.args[0] if isinstance(seen, KafkaException) and seen.args else None
        if isinstance(err, KafkaError) and err.fatal():
            return err
        seen = seen.__cause__
    return None


class StreamsProducer:
    """One stream thread's producer and its transaction (see the module docstring).

    Args:
        name: the thread's name, for the logs.
        config: the streams config (``exactly_once``, ``task.timeout.ms``, the production
            exception handler and the dead-letter queue topic).
        producer_config: client id -> the producer config.
        client_id: the producer's ``client.id``.
        transactional_id: its ``transactional.id`` under exactly-once (ignored otherwise).
        partition_counts: topic -> partitions, of the topics it writes.
        metrics: the thread's task metrics (the collector counts dropped records there).
        only_errors: nothing reads the offsets of acknowledged sends (no changelog, no
            repartition topic): librdkafka then reports failed deliveries only.
    """

    def __init__(self, name: str, config: "StreamsConfig", producer_config: Callable[..., dict[str, Any]], client_id: str,
                 transactional_id: str, partition_counts: "PartitionCounts", metrics: "Metrics", only_errors: bool) -> None:
        self.name = name
        self.config = config
        self.eos = bool(config.exactly_once)
        self.metrics = metrics
        self._producer_config = producer_config
        self._client_id = client_id
        self._transactional_id = transactional_id
        self._partition_counts = partition_counts
        self._only_errors = only_errors
        #: the current producer (None before :meth:`create` and after :meth:`close`)
        self.producer: Producer | None = None
        #: the record collector sending through :attr:`producer`
        self.collector: KafkaRecordCollector | None = None
        self._in_txn = False
        #: ``send_offsets_to_transaction``'s timeout, s: the transaction's own timeout, past
        #: which its coordinator aborts it (and bumps the epoch), so a longer wait cannot commit
        self._txn_timeout_s = DEFAULT_TRANSACTION_TIMEOUT_MS / 1000

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (exactly-once)."""
        return self._in_txn

    def create(self) -> None:
        """Create the producer and its record collector (exactly-once: a transactional
        producer with a stable ``transactional.id``; ``init_transactions`` fences any older
        producer with the same id and aborts its open transaction). ``init_transactions`` is
        retried while it fails with a retriable error, until ``task.timeout.ms`` (ms).

        Raises:
            KafkaException: ``init_transactions`` failed for good (:attr:`producer` is then
                the new producer, :attr:`collector` still the former one's).
        """
        pconf = self._producer_config(self._client_id)
        if self.eos:
            pconf["transactional.id"] = self._transactional_id
        if self._only_errors:
            # nothing reads the offsets of acknowledged sends (changelog checkpoints, the
            # repartition records on their way back): librdkafka reports failures only
            pconf.setdefault("delivery.report.only.error", True)
        self.producer = Producer(pconf)
        self._txn_timeout_s = int(pconf.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)) / 1000
        if self.eos:
            deadline = time.monotonic() + self.config.task_timeout_ms / 1000
            while True:
                try:
                    self.producer.init_transactions(30)
                    break
                except KafkaException as exc:  # the coordinator may be loading after a restart
                    err = exc.args[0] if exc.args else None
                    if not isinstance(err, KafkaError) or not err.retriable() or time.monotonic() > deadline:
                        raise
                    log.warning("%s: init_transactions: %s: retrying", self.name, err.str())
        self.collector = KafkaRecordCollector(self.producer, self._partition_counts, transactional=self.eos,
                                              handler=self.config.production_exception_handler,
                                              dead_letter_topic=self.config.dead_letter_queue_topic, metrics=self.metrics)

    def maybe_begin(self) -> None:
        """Exactly-once: open a transaction unless one is open (before a task processes or
        punctuates, and before a commit). At-least-once: nothing.

        Raises:
            KafkaException: ``begin_transaction`` failed.
        """
        if self.eos and not self._in_txn:
            assert self.producer is not None
            self.producer.begin_transaction()
            self._in_txn = True

    def commit_transaction(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        """Commit the open transaction, with ``offsets`` (the next offsets to read, with
        their metadata; none: no offset moved) sent to it for the consumer group of
        ``group_metadata`` (KIP-447). ``send_offsets_to_transaction`` waits at most the
        transaction's timeout (``transaction.timeout.ms``), ``commit_transaction`` 60 s; each
        under the watchdog (``WATCHDOG_GRACE_S`` more).

        Raises:
            KafkaException: either call failed (the transaction stays open), or hung (a
                fatal ``_TIMED_OUT``: :func:`is_hung`).
        """
        producer, txn_s = self.producer, self._txn_timeout_s
        assert producer is not None
        if offsets:
            _watchdog(f"{self.name}: send_offsets_to_transaction",
                      lambda: producer.send_offsets_to_transaction(offsets, group_metadata, txn_s), txn_s)
        _watchdog(f"{self.name}: commit_transaction", lambda: producer.commit_transaction(60), 60)
        self._in_txn = False

    def abort_transaction(self) -> None:
        """Abort the open transaction that could not commit, retrying for
        ``ABORT_TIMEOUT_S`` (s) while the abort fails with a non-fatal error (10 s each).

        Raises:
            KafkaException: the abort failed fatally, with no ``KafkaError``, or still
                failed after ``ABORT_TIMEOUT_S`` (the coordinator may have aborted the
                transaction itself and bumped the epoch, or stays away): the producer must
                be replaced (:meth:`reset`).
        """
        assert self.producer is not None
        deadline = time.monotonic() + ABORT_TIMEOUT_S
        while True:
            try:
                self.producer.abort_transaction(10)
                break
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not isinstance(err, KafkaError) or err.fatal() or time.monotonic() > deadline:
                    raise
                time.sleep(1)
        self._in_txn = False

    def abort_open_transaction(self) -> None:
        """Abort the open transaction, if any (before tasks are closed dirty), waiting at
        most 10 s. Never raises: a failed abort is logged (ERROR) and forgotten."""
        if self._in_txn and self.producer is not None:
            try:
                self.producer.abort_transaction(10)
            except Exception:  # noqa: BLE001 - closing dirty anyway
                log.exception("aborting the transaction failed")
            self._in_txn = False

    def forget_transaction(self) -> None:
        """Forget the open transaction without aborting it: the producer failed fatally, so
        it cannot be aborted; the next producer's ``init_transactions`` aborts it
        (:meth:`reset`)."""
        self._in_txn = False

    def reset(self, cause: BaseException) -> None:
        """Replace the producer that failed fatally with ``cause`` (Kafka's
        ``StreamsProducer#resetProducer``): the old one is retired (:func:`.retire_producer`;
        its queue is purged unless one of its calls hung: :func:`is_hung`), a new one is
        created (:meth:`create`).

        Raises:
            StreamsException: the new producer could not be created.
        """
        self._in_txn = False
        old = self.producer
        hung = is_hung(fatal_producer_error(cause))
        if old is not None:
            retire_producer(old, purge=not hung)  # (a hung producer is left alone: see _watchdog)
        try:
            self.create()
        except KafkaException as exc:
            raise StreamsException(f"{self.name}: cannot replace the failed producer: {exc}") from exc

    def close(self) -> None:
        """Abort the open transaction, then close the producer (:func:`.close_producer`:
        a flush of at most 10 s first), as Kafka Streams' ``StreamThread`` closes its
        thread producer at shutdown: its librdkafka threads and broker connections end with
        the thread, not when the thread object is freed (a closed ``KafkaStreams`` may stay
        referenced). A producer whose transaction could not be aborted is retired instead
        (:func:`.retire_producer`). :attr:`producer` and :attr:`collector` are None after.
        Never raises."""
        producer, self.producer = self.producer, None
        self.collector = None
        assert producer is not None
        if self._in_txn:
            self._in_txn = False
            try:
                producer.abort_transaction(10)
            except Exception:  # noqa: BLE001
                log.exception("%s: aborting the transaction at close failed", self.name)
                retire_producer(producer)
                return
        close_producer(producer, 10, self.name)
