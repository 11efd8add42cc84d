"""StreamThread: one consumer, one producer, the tasks of its partitions (Kafka's
``StreamThread``; the tasks themselves, their restore and checkpoints are its
:class:`~.task_manager.TaskManager`'s).

Loop (``runOnce``): poll records into the tasks' per-partition buffers (pausing partitions
whose buffer holds ``buffered.records.per.partition`` records, resuming them when drained:
:mod:`.input_buffers`);
process records (:mod:`.task_executor`: the lowest head across tasks first), each task
taking the buffered record with the lowest timestamp
(``PartitionGroup``) once every input partition has data or is known to be caught up
(KIP-695: ``max.task.idle.ms`` = 0 waits only for data known to be on the broker, > 0 also
waits that long for an empty caught-up partition, -1 never waits; these rules and the
waits for repartition records on their way back live in :mod:`.readiness`); run
wall-clock punctuations; commit every ``commit.interval.ms`` (ms).

Commit (``TaskManager#commit``): :mod:`.task_committer`; the producer and its transaction
(``StreamsProducer``): :mod:`.streams_producer`.

Assignment and revocation (``StreamsRebalanceListener``): :mod:`.rebalance_listener`; where
the partitions of new or rewound tasks start: :class:`.CommittedOffsets`.
"""
from __future__ import annotations

import logging
from collections import deque
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from ..errors import StreamsException, TaskCorruptedException
from .bounded_call import run_bounded
from .backlog_ends import BacklogEnds
from .committed_offsets import CommittedOffsets
from .input_buffers import InputBuffers
from .offset_commits import OffsetCommits
from .readiness import Readiness
from .rebalance_listener import StreamsRebalanceListener
from .record_collector import KafkaRecordCollector
from .restore import ChangelogRestorer
from .streams_producer import StreamsProducer, fatal_producer_error
from .task import Metrics
from .task_committer import TaskCommitter
from .task_executor import TaskExecutor
from .task_manager import TaskManager
from .task_timeout import TaskTimeout
from .thread_context import ThreadContext, ThreadHooks
from .upstream import UpstreamInput

log = logging.getLogger("speed_layer.thread")

__all__ = ["StreamThread", "ThreadContext", "ThreadHooks"]

TP = tuple[str, int]
#: Kafka's ``repartition.purge.interval.ms`` default (30 s)
REPARTITION_PURGE_INTERVAL_S = 30.0
#: how often the thread reads its stores' RocksDB property metrics (:attr:`StreamThread.state_metrics`), s
STATE_METRICS_INTERVAL_S = 5.0
#: How long a recovery step (a new transactional producer, reading the committed offsets)
#: retries while the broker is away by default, s: Kafka Streams' ``task.timeout.ms``
#: default (5 minutes); the steps use the config's ``task.timeout.ms``. If the steps
#: together outlast ``max.poll.interval.ms`` the consumer leaves the group, and rejoins
#: at its next poll (its tasks are then closed and assigned again).
RECOVERY_TIMEOUT_S = 300.0


class StreamThread(threading.Thread):
    """See the module docstring. States (Kafka's ``StreamThread.State``): CREATED, STARTING,
    PARTITIONS_REVOKED, PARTITIONS_ASSIGNED, RUNNING, PENDING_SHUTDOWN, DEAD."""

    def __init__(self, context: ThreadContext, index: int, hooks: ThreadHooks) -> None:
        super().__init__(name=f"{context.config.application_id}-StreamThread-{index}", daemon=True)
        self.context = context
        self.hooks = hooks
        self.index = index
        self.config = context.config
        self.plan = context.plan
        self.topology = context.topology
        self.eos = self.config.exactly_once
        self.metrics = Metrics()
        self.thread_state = "CREATED"
        #: the active tasks, their partitions, committed offsets and local state
        self.task_manager = TaskManager(self.name, self.config, self.plan, self.topology, context.state_directory,
                                        context.global_stores, self.metrics, self)
        self.tasks = self.task_manager.tasks
        self.task_tps = self.task_manager.task_tps
        self.tp_task = self.task_manager.tp_task
        self.committed = self.task_manager.committed
        #: prefix of the thread's client ids
        self._client_id = f"{self.config.application_id}-{context.process_id}-StreamThread-{index}"
        #: the known ends of a backlog (``backlog.inputs.complete``, at-least-once, ``max.task.idle.ms`` > 0)
        self.backlog = (BacklogEnds.of(self.plan, self.topology, self._reader_config(), self.config.application_id)
                        if self.config.backlog_inputs_complete and not self.eos and self.config.max_task_idle_ms > 0 else None)
        #: which tasks may process now (KIP-695, the repartition round-trip waits); it owns
        #: the end-of-partition flags, fetched positions and tracked partitions
        self.readiness = Readiness(
            self.config.max_task_idle_ms, self.eos, self.task_tps, self.tp_task,
            pending=lambda tp, consumed_next: self.collector.pending_timestamp(tp, consumed_next) if self.collector else None,
            serve_reports=lambda: self.collector.poll() if self.collector else None,
            waiting_input=lambda tp: self.inputs.waiting_input(tp), owner=self.name, lag=self._known_lag,
            backlog=self.backlog, position=self._position,
            # the upstream-input wait orders a backlog (its inputs complete at the start): live,
            # a topic no key goes to would hold its readers while upstream input keeps coming
            upstream=UpstreamInput.of(self.plan, self.topology, self.tasks, self.task_tps, lambda tp: self.inputs.holds(tp),
                                      lambda tp: tp in self.readiness.tracked and self.collector is not None and  # in flight
                                      self.collector.pending_timestamp(tp, self.readiness.fetched_next.get(tp, 0)) is not None)
            if self.config.backlog_inputs_complete else None)
        self.readiness.on_enforced = lambda task_id: self.metrics.inc(task_id, "enforced-processing")
        #: fetched records on their way into the task buffers: held records, paused partitions
        self.inputs = InputBuffers(self.tp_task, self.readiness, self.config.buffered_records_per_partition, self.name)
        #: the thread's producer, its record collector and its transaction
        self.streams_producer = StreamsProducer(
            self.name, self.config, context.producer_config, f"{self._client_id}-producer",
            f"{self.config.application_id}-{context.process_id}-{index}", context.partition_counts, self.metrics,
            only_errors=not self.plan.changelogs and not self.plan.repartition)
        #: which ready task processes next, and how many records (the lowest head first)
        self.executor = TaskExecutor(self.tasks, self.task_tps, self.readiness, self.streams_producer.maybe_begin)
        #: ``{task id: {store: {metric: value}}}``: the KIP-607 property metrics of the
        #: tasks' stores (``BytesStore.state_metrics``), read by this thread every
        #: ``STATE_METRICS_INTERVAL_S`` (a store is closed only by its own thread)
        self.state_metrics: dict[str, dict[str, dict[str, int]]] = {}
        self._state_metrics_at = 0.0
        #: where new and rewound tasks' partitions start (committed offsets, else the reset policy)
        self.offsets = CommittedOffsets(self.config, self.plan, self.topology, lambda: self.consumer, self._reader_config)
        self._stopping = threading.Event()
        #: the at-least-once offset commit in flight (:mod:`.offset_commits`), fed by the consumer's ``on_commit``
        self._commits = OffsetCommits(self.name, self.config.default_api_timeout_ms)
        #: commits the tasks (every ``commit.interval.ms``, before tasks close)
        self.committer = TaskCommitter(
            self.name, context, REPARTITION_PURGE_INTERVAL_S, self.task_manager, self.streams_producer, self._commits,
            self.inputs, self.readiness, consumer=lambda: self.consumer, recover_producer=self._recover_producer,
            abort_and_rewind=self._abort_and_rewind)
        #: the consumer's rebalance callbacks
        self.rebalance_listener = StreamsRebalanceListener(
            self.name, self.plan, self.task_manager, self.offsets, self.committer, self._set_state, self._close_tasks,
            hooks.standby_refresh)
        #: iterations of the run loop (Kafka's thread metric ``poll-total``)
        self.poll_total = 0
        self.error: BaseException | None = None
        self.consumer: Consumer | None = None

    @property
    def collector(self) -> KafkaRecordCollector | None:
        """The record collector of the current producer (shared with the task manager)."""
        return self.task_manager.collector

    @collector.setter
    def collector(self, collector: KafkaRecordCollector | None) -> None:
        self.task_manager.collector = collector

    @property
    def producer(self) -> Producer | None:
        """The thread's current producer (:class:`.StreamsProducer`)."""
        return self.streams_producer.producer

    @property
    def commit_total(self) -> int:
        """Commits done (Kafka's thread metric ``commit-total``)."""
        return self.committer.commit_total

    @property
    def commit_latencies(self) -> deque[tuple[float, float]]:
        """``(monotonic s, ms)`` of the latest commits (``commit-latency-avg`` / ``-max``)."""
        return self.committer.commit_latencies

    @property
    def restorer(self) -> ChangelogRestorer | None:
        """The changelog restorer (shared with the task manager)."""
        return self.task_manager.restorer

    @restorer.setter
    def restorer(self, restorer: ChangelogRestorer | None) -> None:
        self.task_manager.restorer = restorer

    def _known_lag(self, tp: TP) -> int | None:
        """The consumer's lag of ``tp`` (``Readiness``'s ``lag``): its cached high watermark
        (from the last fetch answer, no request) minus the next offset to consume; None while
        unknown (no fetch answered yet, or no record consumed and no position)."""
        consumer = self.consumer
        if consumer is None:
            return None
        part = TopicPartition(*tp)
        high = consumer.get_watermark_offsets(part, cached=True)[1]
        if high < 0:
            return None
        position = self.readiness.fetched_next.get(tp)
        if position is None:
            position = self._position(tp)
            if position is None:
                return None
        return max(0, high - position)

    def _position(self, tp: TP) -> int | None:
        """The consumer's next offset to fetch of ``tp`` (no request); None if unknown."""
        consumer = self.consumer
        position = -1 if consumer is None else consumer.position([TopicPartition(*tp)])[0].offset
        return position if position >= 0 else None

    # ------------------------------------------------------------------ TaskListener
    def task_added(self, task_id: str, tps: list[TP]) -> None:
        assert self.collector is not None
        for tp in tps:
            self.readiness.add_partition(tp, tp[0] in self.plan.repartition)
            if tp[0] in self.plan.repartition:
                self.collector.track(tp)

    def task_removed(self, task_id: str, tps: list[TP]) -> None:
        self.readiness.remove_task(task_id, tps)
        for tp in tps:
            if self.collector is not None:
                self.collector.untrack(tp)
            self.inputs.forget(tp)

    def standby_claim(self, task_id: str) -> None:
        self.hooks.standby_claim(task_id)

    def standby_release(self, task_id: str) -> None:
        self.hooks.standby_release(task_id)

    # ------------------------------------------------------------------ lifecycle
    def _set_state(self, state: str) -> None:
        if self.thread_state in ("PENDING_SHUTDOWN", "DEAD") and state not in ("DEAD",):
            return
        self.thread_state = state
        self.hooks.on_state_change(self)

    def _setup_clients(self) -> None:
        s = self.context
        client_id = self._client_id
        cconf = s.consumer_config(f"{client_id}-consumer")
        cconf.update({
            "group.id": self.config.application_id,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "partition.assignment.strategy": "cooperative-sticky",
            "on_commit": self._commits.on_commit,
        })
        cconf.update(s.client_overrides("consumer."))
        self.consumer = Consumer(cconf)
        self._new_producer()
        rconf = s.consumer_config(f"{client_id}-restore-consumer")
        rconf.update(s.client_overrides("consumer."))
        self.restorer = ChangelogRestorer(rconf, TaskTimeout.of(self.config))

    def _new_producer(self) -> None:
        """Create the producer (:meth:`.StreamsProducer.create`) and hand its record
        collector to the tasks."""
        self.streams_producer.create()
        self.collector = self.streams_producer.collector

    def run(self) -> None:
        try:
            self._set_state("STARTING")
            self._setup_clients()
            assert self.consumer is not None
            topics = self.plan.lead_topics(self.config.instance_subtopologies)
            listener = self.rebalance_listener
            self.consumer.subscribe(topics, on_assign=listener.on_assign, on_revoke=listener.on_revoke, on_lost=listener.on_lost)
            if self.backlog is not None:
                self.backlog.start(self.name)
            while not self._stopping.is_set():
                try:
                    self._run_once()
                except TaskCorruptedException as exc:
                    self._recover_corrupted(exc)
                except (KafkaException, StreamsException) as exc:
                    if fatal_producer_error(exc) is None:
                        raise
                    self._recover_producer(exc)
            self._shutdown(clean=True)
        except BaseException as exc:  # noqa: BLE001 - handed to the uncaught exception handler
            self.error = exc
            log.error("stream thread %s failed: %r", self.name, exc, exc_info=exc)
            try:
                self._shutdown(clean=False)
            except BaseException:  # noqa: BLE001 - already failing: log and go on
                log.exception("stream thread %s: error while closing after a failure", self.name)
            self._set_state("DEAD")
            self.hooks.on_error(self, exc)
            return
        self._set_state("DEAD")

    def request_shutdown(self) -> None:
        """Ask the thread to stop after the current iteration (it commits and closes cleanly)."""
        self._stopping.set()

    def _shutdown(self, clean: bool) -> None:
        """Close the tasks (clean: after a last commit), then the clients. Bounded while no
        broker answers: a commit in flight is waited for at most ``default.api.timeout.ms``
        + ``COMMIT_GRACE_S`` after it was sent (:meth:`.TaskCommitter.await_in_flight`), and so is the
        consumer's ``close()`` (which waits for the last commit: librdkafka issue #3740),
        else it is left to a daemon thread and logged (WARNING)."""
        self._set_state("PENDING_SHUTDOWN")
        try:
            if clean:
                try:
                    self.committer.await_in_flight()
                    self._close_tasks(list(self.tasks), clean=True)
                except BaseException:
                    self._close_tasks(list(self.tasks), clean=False)
                    raise
            else:
                self._close_tasks(list(self.tasks), clean=False)
        finally:
            if self.consumer is not None:
                self._close_consumer()
            if self.streams_producer.producer is not None:
                self.collector = None
                self.streams_producer.close()  # aborts the open transaction first
            if self.restorer is not None:
                self.restorer.close()
                self.restorer = None
            self.offsets.close()
            if self.backlog is not None:
                self.backlog.close()

    def _close_consumer(self) -> None:
        """Close the consumer, waiting at most ``default.api.timeout.ms`` +
        ``COMMIT_GRACE_S``: its ``close()`` waits for the commits in flight and may retry
        the coordinator lookup forever while no broker answers (librdkafka issue #3740).
        A close that has not returned is left to its daemon thread (WARNING)."""
        consumer, self.consumer = self.consumer, None
        bound_s = self._commits.bound_s
        returned, error = run_bounded(f"{self.name}: consumer.close", consumer.close, bound_s)  # type: ignore[union-attr]
        if not returned:
            log.warning("%s: the consumer did not close within %.1f s (default.api.timeout.ms + grace): left to a daemon "
                        "thread; offset commit in flight: %s", self.name, bound_s, self._commits.describe())
        elif error is not None:
            log.error("%s: closing the consumer failed", self.name, exc_info=error)
        self.committer.settle_at_close()  # the last commit's result, served by close()

    def _reader_config(self) -> dict[str, Any]:
        """The consumer config of the thread's committed-offsets reader (:class:`.CommittedOffsets`)."""
        conf = self.context.consumer_config(f"{self._client_id}-offsets-reader")
        conf.update(self.context.client_overrides("consumer."))
        return conf

    # ------------------------------------------------------------------ recovery
    def _abort_and_rewind(self, cause: KafkaException) -> None:
        """Exactly-once recovery from a transaction that could not commit but may be aborted
        (e.g. a timeout while the broker did not answer), as Kafka Streams' handling of a
        ``TaskCorruptedException``: abort the transaction (:meth:`.StreamsProducer.abort_transaction`,
        else replacing the producer as :meth:`_recover_producer`), close the tasks dirty (their stores hold uncommitted writes and
        have no checkpoint, so they are wiped), seek every input partition back to its
        committed offset and recreate the tasks, which restore from the changelogs
        (read_committed). The aborted outputs are never visible to read_committed readers.

        Raises:
            StreamsException: the producer had to be replaced and could not be.
        """
        assert self.streams_producer.producer is not None and self.consumer is not None and self.collector is not None
        err = cause.args[0] if cause.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError._MSG_TIMED_OUT:
            # records timed out while the broker was away: librdkafka 2.16's producer then
            # needs an epoch bump, its abort was retried for ABORT_TIMEOUT_S and the next
            # transaction's send_offsets_to_transaction hung (a broker SIGKILLed and
            # restarted, bench/faults/broker_outage.py); a new producer fences and aborts
            self._recover_producer(cause)
            return
        log.warning("%s: the transaction could not commit (%s): aborting it and rewinding to the committed offsets",
                    self.name, cause)
        try:
            self.streams_producer.abort_transaction()
        except KafkaException as exc:
            # the coordinator may have aborted the transaction itself and bumped the
            # epoch (fenced), or stays away: a new producer fences the old one
            self._recover_producer(exc)
            return
        self.collector.discard_error()
        self._rewind(sorted(self.tp_task))

    def _recover_producer(self, cause: BaseException) -> None:
        """Recovery from a fatal producer error (e.g. ``OUT_OF_ORDER_SEQUENCE_NUMBER`` after
        requests timed out while the broker was away, or a fenced producer), as Kafka
        Streams' ``TaskMigratedException`` handling (``RecordCollectorImpl#recordSendError``
        treats these errors so): close every task dirty, replace the producer (exactly-once:
        the new one's ``init_transactions`` aborts the old transaction), rewind to the
        committed offsets and recreate the tasks, which restore from the changelogs.

        Raises:
            StreamsException: the new producer could not be created.
        """
        log.warning("%s: the producer failed fatally (%s): replacing it and rewinding to the committed offsets", self.name, cause)
        tps = sorted(self.tp_task)
        self.streams_producer.forget_transaction()  # it cannot be aborted: the new producer fences it
        self._close_tasks(list(self.tasks), clean=False)
        self.streams_producer.reset(cause)
        self.collector = self.streams_producer.collector
        self._rewind(tps)

    def _recover_corrupted(self, exc: TaskCorruptedException) -> None:
        """A send failed with a retriable error (Kafka's ``TaskCorruptedException``): the
        tasks restart from their last committed offsets, exactly-once after aborting the
        transaction (:meth:`_abort_and_rewind`), at-least-once closed dirty and recreated
        (:meth:`_rewind`); the records since are processed (and sent) again."""
        cause = exc.__cause__ if isinstance(exc.__cause__, KafkaException) else KafkaException(KafkaError(KafkaError._FAIL, str(exc)))
        if self.eos:
            self._abort_and_rewind(cause)
            return
        assert self.collector is not None
        log.warning("%s: %s: rewinding the tasks to their committed offsets", self.name, exc)
        self.collector.discard_error()
        self._rewind(sorted(self.tp_task))

    def _rewind(self, tps: list[TP]) -> None:
        """Close the tasks dirty, seek the input partitions ``tps`` (those the tasks read)
        back to their committed offsets and recreate the tasks, which restore from the
        changelogs."""
        assert self.consumer is not None
        self._close_tasks(list(self.tasks), clean=False)
        committed = self.offsets.offsets(tps, fresh=True)
        if tps:
            self.consumer.resume([TopicPartition(t, p) for t, p in tps])
        for position in self.offsets.start_positions(tps, committed):
            self.consumer.seek(position)
        self.task_manager.create_tasks(tps, committed)
        self.committer.restart_interval()
        for tid in self.tasks:
            self.metrics.inc(tid, "task-corrupted")

    def _close_tasks(self, task_ids: list[str], clean: bool) -> None:
        if not task_ids:
            return
        if clean:
            self.committer.commit(force=True)
        else:
            self.streams_producer.abort_open_transaction()
        for tid in task_ids:
            self.task_manager.close_task(tid, clean)

    # ------------------------------------------------------------------ the loop
    def _run_once(self) -> None:
        assert self.consumer is not None
        self.poll_total += 1
        if self.collector is not None:
            self.collector.poll()  # delivery reports: acked offsets of changelogs and repartitions
        if self.inputs.any_held():
            self.inputs.pause_resume(self.consumer)  # refill the task buffers that were drained
        now = time.monotonic()
        readiness = self.readiness
        paused = self.context.paused.is_set()
        busy = not paused and any(readiness.ready(t, now) for t in self.tasks.values()) and readiness.thread_ready(now)
        if busy:
            msgs = self.consumer.consume(500, timeout=0)
        else:
            # consume() waits for a full batch or the timeout: poll() returns at the first
            # record or event, then take what else is already fetched
            first = self.consumer.poll(self.config.poll_ms / 1000)
            msgs = [] if first is None else [first, *self.consumer.consume(499, timeout=0)]
        self.rebalance_listener.raise_error()  # caught by a rebalance callback during the poll
        if not self.eos:
            self.committer.settle()
        self.inputs.add(msgs)
        self.inputs.pause_resume(self.consumer)
        self._restore_metadata()
        if not paused:
            self.executor.process()
            self.executor.punctuate(int(time.time() * 1000))
        self.committer.maybe_commit()
        if time.monotonic() - self._state_metrics_at >= STATE_METRICS_INTERVAL_S:
            self._read_state_metrics()

    def _read_state_metrics(self) -> None:
        """Refresh :attr:`state_metrics` from the stores of the tasks owned now."""
        self._state_metrics_at = time.monotonic()
        self.state_metrics = {tid: {name: store.state_metrics() for name, store in task.stores.items()}
                              for tid, task in list(self.tasks.items())}

    def request_commit_when_caught_up(self) -> None:
        """Ask for one commit as soon as this thread has processed everything its
        partitions held at their last fetch (thread-safe; :meth:`KafkaStreams.wait_until_caught_up`
        calls it while it waits). Without it a caught-up thread commits only when
        ``commit.interval.ms`` has passed since its last commit, so a waiter waited up to
        that long (10 s in the flights job) for offsets already processed. While the
        thread still has records to process nothing changes: no extra commit, no extra
        cache flush."""
        self.committer.request_commit_when_caught_up()

    def _restore_metadata(self) -> None:
        """Tasks created since the last loop read the metadata committed with their offsets
        (Kafka's ``StreamTask#initializeMetadata``, KIP-825) before their first record: the
        stream time and the processor metadata (the last emit time of ON_WINDOW_CLOSE
        aggregations)."""
        fresh = [t for t in self.tasks.values() if not t.metadata_restored]
        if not fresh:
            return
        assert self.consumer is not None
        tps = [tp for t in fresh for tp in self.task_tps[t.task_id]]
        res = self.offsets.read(tps, fresh=True)
        meta = {(r.topic, r.partition): r.metadata for r in res if r.offset >= 0}
        for t in fresh:
            t.restore_metadata({tp: meta[tp] for tp in self.task_tps[t.task_id] if tp in meta})

    # ------------------------------------------------------------------ introspection
    def progress(self, tp: TP) -> int | None:
        """The committed offset of ``tp`` if this thread owns it, else None."""
        if tp not in self.tp_task:
            return None
        return self.committed.get(tp, -1)
