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

Commit (``TaskManager#commit``): ``task.commit()`` flushes record caches (forwarding their
updates) and stores; at-least-once then flushes the producer and commits the next offsets
to read, one commit in flight at a time, never blocking the thread: the result is picked
up at the next loop, the task checkpoints are written once it succeeded, and a commit that
does not return within ``default.api.timeout.ms`` is reported and its offsets deferred
(:mod:`.offset_commits`); exactly-once (``exactly_once_v2``, KIP-447) sends the offsets to
the open transaction and commits it.

Assignment (see ``docs/instances.md``): Kafka Streams assigns *tasks* with its own
assignor, which librdkafka cannot load. duet lets the group assign one partition per task:
the threads subscribe only to each sub-topology's *lead topic* (its source topic with the
most partitions, :meth:`TopologyPlan.lead_topic`), so partition ``p`` of it is task
``<sub-topology>_<p>``, and the thread then fetches partition ``p`` of every source topic of
that sub-topology too (``incremental_assign``), so a task's co-partitioned inputs are always
owned together. The assignor is ``cooperative-sticky`` (KIP-429, as Kafka Streams' own
protocol since 2.4): assignments are balanced by task count over the group's threads and
sticky, and a rebalance revokes only the tasks that move. On revocation the thread commits
and closes those tasks cleanly (checkpoints written); on assignment it restores the new
tasks from their changelogs (from a standby's checkpoint when this instance kept one warm)
before processing them.
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from ..errors import StreamsException, TaskCorruptedException
from .bounded_call import run_bounded
from .committed_offsets import CommittedOffsetsReader
from .input_buffers import InputBuffers
from .offset_commits import InFlightCommit, OffsetCommits, describe_offsets
from .readiness import Readiness
from .record_collector import KafkaRecordCollector, close_producer, retire_producer
from .restore import ChangelogRestorer
from .task import Metrics
from .task_executor import ACTIVE_TIME_NS, TaskExecutor
from .task_manager import TaskManager
from .task_timeout import TaskTimeout

if TYPE_CHECKING:
    from ..config import StreamsConfig
    from ..topology import Topology
    from .internal_topics import TopologyPlan
    from .record_collector import PartitionCounts
    from .restore import StateDirectory

log = logging.getLogger("speed_layer.thread")

__all__ = ["StreamThread", "ThreadContext", "ThreadHooks"]

TP = tuple[str, int]
_COORDINATOR_ERRORS = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
#: offset-commit errors of a group that is rebalancing (the commit is retried later)
_REBALANCE_ERRORS = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID}
#: Kafka's ``repartition.purge.interval.ms`` default (30 s)
REPARTITION_PURGE_INTERVAL_S = 30.0
#: how often the thread reads its stores' RocksDB property metrics (:attr:`StreamThread.state_metrics`), s
STATE_METRICS_INTERVAL_S = 5.0
#: How long an exactly-once thread retries aborting a transaction that failed to commit
#: before it replaces its producer instead (whose ``init_transactions`` aborts it), s
ABORT_TIMEOUT_S = 20.0
#: How long a recovery step (a new transactional producer, reading the committed offsets)
#: retries while the broker is away by default, s: Kafka Streams' ``task.timeout.ms``
#: default (5 minutes); the steps use the config's ``task.timeout.ms``. If the steps
#: together outlast ``max.poll.interval.ms`` the consumer leaves the group, and rejoins
#: at its next poll (its tasks are then closed and assigned again).
RECOVERY_TIMEOUT_S = 300.0


#: how much longer than its own timeout a transactional call may take before it is
#: considered hung (see :func:`_watchdog`), s
WATCHDOG_GRACE_S = 10.0
#: ``transaction.timeout.ms`` when the producer's config has none (Kafka Streams' default
#: under exactly-once), ms
DEFAULT_TRANSACTION_TIMEOUT_MS = 10_000


def _watchdog(what: str, call: Callable[[], None], timeout_s: float) -> None:
    """Run a transactional producer call that takes a timeout, but give up on it when it
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


def _hung(err: object) -> bool:
    """Whether ``err`` is :func:`_watchdog`'s verdict on a transactional call that hung (a
    fatal ``_TIMED_OUT``; librdkafka's own timeouts are retriable)."""
    return isinstance(err, KafkaError) and err.fatal() and err.code() == KafkaError._TIMED_OUT


def _fatal_producer_error(exc: BaseException) -> KafkaError | None:
    """The fatal producer error behind ``exc`` (its chain of causes), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        err = seen.args[0] if isinstance(seen, KafkaException) and seen.args else None
        if isinstance(err, KafkaError) and err.fatal():
            return err
        seen = seen.__cause__
    return None


@dataclass(frozen=True)
class ThreadContext:
    """What a stream thread needs of its client, fixed when the client starts (Kafka's
    ``StreamThread#create`` gets the configs, the topology metadata, the state directory
    and the client suppliers, not the ``KafkaStreams`` instance)."""

    config: "StreamsConfig"
    plan: "TopologyPlan"
    topology: "Topology"
    #: the instance's id (from its state directory): part of the clients' and the transactional ids
    process_id: str
    state_directory: "StateDirectory"
    #: the instance's global stores (read by the tasks)
    global_stores: dict[str, Any]
    #: topic -> partitions, of the topics the thread's producer writes
    partition_counts: "PartitionCounts"
    #: the effective ``commit.interval.ms`` (100 under exactly-once unless set)
    commit_interval_ms: int
    #: client id -> the consumer config (Kafka's ``getMainConsumerConfigs``)
    consumer_config: Callable[[str], dict[str, Any]]
    #: client id -> the producer config
    producer_config: Callable[[str], dict[str, Any]]
    #: prefix (``"consumer."``, ``"admin."``) -> the user's overrides for that client
    client_overrides: Callable[[str], dict[str, Any]]
    #: set while the client is paused (``KafkaStreams.pause``, KIP-834): the thread polls
    #: and commits but neither processes nor punctuates
    paused: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class ThreadHooks:
    """What a stream thread reports to its client and asks of the instance's standby
    updater (Kafka's ``StreamThread.StateListener``, the uncaught exception handler, and
    the standby task hand-over), so the thread holds callables instead of reaching into
    ``KafkaStreams``."""

    #: after every state change of ``thread``
    on_state_change: Callable[["StreamThread"], None]
    #: when ``thread`` dies of ``exc`` (the client's uncaught exception handler)
    on_error: Callable[["StreamThread", BaseException], None]
    #: a warm standby of ``task_id`` on this instance hands its stores over (before the task opens them)
    standby_claim: Callable[[str], None]
    #: the closed active task ``task_id`` may be kept as a standby again
    standby_release: Callable[[str], None]
    #: the group's assignment changed: re-read which standbys this instance keeps
    standby_refresh: Callable[[], None]


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
        #: which tasks may process now (KIP-695, the repartition round-trip waits); it owns
        #: the end-of-partition flags, fetched positions and tracked partitions
        self.readiness = Readiness(
            self.config.max_task_idle_ms, self.eos, self.task_tps, self.tp_task,
            pending=lambda tp, consumed_next: self.collector.pending_timestamp(tp, consumed_next) if self.collector else None,
            serve_reports=lambda: self.collector.poll() if self.collector else None,
            waiting_input=lambda tp: self.inputs.waiting_input(tp), owner=self.name)
        self.readiness.on_enforced = lambda task_id: self.metrics.inc(task_id, "enforced-processing")
        #: fetched records on their way into the task buffers: held records, paused partitions
        self.inputs = InputBuffers(self.tp_task, self.readiness, self.config.buffered_records_per_partition, self.name)
        #: which ready task processes next, and how many records (the lowest head first)
        self.executor = TaskExecutor(self.tasks, self.task_tps, self.readiness, self._maybe_begin)
        self._purged: dict[TP, int] = {}
        self._last_purge = time.monotonic()
        #: ``{task id: {store: {metric: value}}}``: the KIP-607 property metrics of the
        #: tasks' stores (``BytesStore.state_metrics``), read by this thread every
        #: ``STATE_METRICS_INTERVAL_S`` (a store is closed only by its own thread)
        self.state_metrics: dict[str, dict[str, dict[str, int]]] = {}
        self._state_metrics_at = 0.0
        self._admin: Any = None
        self._reader: CommittedOffsetsReader | None = None  # see _committed
        self._in_txn = False
        self._stopping = threading.Event()
        self._callback_error: BaseException | None = None
        self._last_commit = time.monotonic()
        #: the at-least-once offset commit in flight (:mod:`.offset_commits`)
        self._commits = OffsetCommits(self.name, self.config.default_api_timeout_ms)
        #: set by :meth:`request_commit_when_caught_up` (another thread): commit at the
        #: next loop that finds every owned partition consumed to its end
        self._commit_when_caught_up = False
        self.commit_total = 0
        #: iterations of the run loop (Kafka's thread metric ``poll-total``)
        self.poll_total = 0
        #: ``(monotonic s, ms)`` of the latest commits, for Kafka's thread metrics
        #: ``commit-latency-avg`` / ``-max`` (:meth:`KafkaStreams.metrics`)
        self.commit_latencies: deque[tuple[float, float]] = deque(maxlen=1024)
        self.error: BaseException | None = None
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None

    @property
    def collector(self) -> KafkaRecordCollector | None:
        """The record collector of the current producer (shared with the task manager)."""
        return self.task_manager.collector

    @collector.setter
    def collector(self, collector: KafkaRecordCollector | None) -> None:
        self.task_manager.collector = collector

    @property
    def restorer(self) -> ChangelogRestorer | None:
        """The changelog restorer (shared with the task manager)."""
        return self.task_manager.restorer

    @restorer.setter
    def restorer(self, restorer: ChangelogRestorer | None) -> None:
        self.task_manager.restorer = restorer

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
        client_id = f"{self.config.application_id}-{s.process_id}-StreamThread-{self.index}"
        cconf = s.consumer_config(client_id=f"{client_id}-consumer")
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
        rconf = s.consumer_config(client_id=f"{client_id}-restore-consumer")
        rconf.update(s.client_overrides("consumer."))
        self.restorer = ChangelogRestorer(rconf, TaskTimeout.of(self.config))

    def _new_producer(self) -> None:
        """Create the thread's producer and record collector (exactly-once: a transactional
        producer with a stable ``transactional.id``; ``init_transactions`` fences any older
        producer with the same id and aborts its open transaction)."""
        s = self.context
        pconf = s.producer_config(client_id=f"{self.config.application_id}-{s.process_id}-StreamThread-{self.index}-producer")
        if self.eos:
            pconf["transactional.id"] = f"{self.config.application_id}-{s.process_id}-{self.index}"
        if not self.plan.changelogs and not self.plan.repartition:
            # nothing reads the offsets of acknowledged sends (changelog checkpoints, the
            # repartition records on their way back): librdkafka reports failures only
            pconf.setdefault("delivery.report.only.error", True)
        self.producer = Producer(pconf)
        #: ``send_offsets_to_transaction``'s timeout, s: the transaction's own timeout, past
        #: which its coordinator aborts it (and bumps the epoch), so a longer wait cannot commit
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
        self.collector = KafkaRecordCollector(self.producer, s.partition_counts, transactional=self.eos,
                                              handler=self.config.production_exception_handler,
                                              dead_letter_topic=self.config.dead_letter_queue_topic, metrics=self.metrics)

    def run(self) -> None:
        try:
            self._set_state("STARTING")
            self._setup_clients()
            assert self.consumer is not None
            topics = self.plan.lead_topics(self.config.instance_subtopologies)
            self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
            while not self._stopping.is_set():
                try:
                    self._run_once()
                except TaskCorruptedException as exc:
                    self._recover_corrupted(exc)
                except (KafkaException, StreamsException) as exc:
                    if _fatal_producer_error(exc) is None:
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
        + ``COMMIT_GRACE_S`` after it was sent (:meth:`_await_commit`), and so is the
        consumer's ``close()`` (which waits for the last commit: librdkafka issue #3740),
        else it is left to a daemon thread and logged (WARNING)."""
        self._set_state("PENDING_SHUTDOWN")
        try:
            if clean:
                try:
                    self._await_commit()
                    self._close_tasks(list(self.tasks), clean=True)
                except BaseException:
                    self._close_tasks(list(self.tasks), clean=False)
                    raise
            else:
                self._close_tasks(list(self.tasks), clean=False)
        finally:
            if self.consumer is not None:
                self._close_consumer()
            if self.producer is not None:
                self._close_producer()
            if self.restorer is not None:
                self.restorer.close()
                self.restorer = None
            self._close_offsets_reader()

    def _close_producer(self) -> None:
        """Abort the open transaction, then close the producer (:func:`.close_producer`:
        a flush of at most 10 s first), as Kafka Streams' ``StreamThread`` closes its
        thread producer at shutdown: its librdkafka threads and broker connections end with
        the thread, not when the thread object is freed (a closed ``KafkaStreams`` may stay
        referenced). A producer whose transaction could not be aborted is retired instead
        (:func:`.retire_producer`)."""
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
        last = self._commits.returned()  # the last commit's result, served by close()
        if last is not None and last.error is None:
            self.commit_total += 1
        elif last is not None and last.error is not None:
            log.warning("%s: the last offset commit (%s) failed at close: %s", self.name,
                        describe_offsets(last.offsets), last.error.str())

    def _await_commit(self) -> None:
        """Before the last commit at close: wait for the at-least-once commit in flight
        (polling the consumer with its partitions paused, to serve its callback), at most
        until ``default.api.timeout.ms`` + ``COMMIT_GRACE_S`` after it was sent; then
        handle its result (:meth:`_settle_commit`). Still in flight: the last commit is
        deferred (see :mod:`.offset_commits`)."""
        if self.eos or self.consumer is None or not self._commits.in_flight():
            return
        assignment = self.consumer.assignment()
        if assignment:
            self.consumer.pause(assignment)
        while self._commits.in_flight() and not self._commits.overdue():
            msg = self.consumer.poll(0.05)  # paused: serves callbacks
            if msg is not None:  # fetched before the pause: buffered, so that no position skips it
                self.inputs.add([msg])
        self._settle_commit()

    # ------------------------------------------------------------------ rebalance callbacks
    def _expand(self, partitions: list[TopicPartition]) -> dict[str, list[TP]]:
        """Lead-topic partitions -> {task id: every source partition of the task}."""
        out: dict[str, list[TP]] = {}
        for tp in partitions:
            tid = self.plan.task_of_lead(tp.topic, tp.partition)
            if tid is None:
                raise StreamsException(f"{tp.topic}-{tp.partition} is assigned but is no sub-topology's lead topic")
            out[tid] = self.plan.task_partitions(tid)
        return out

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Incremental (cooperative) assignment: ``partitions`` are the lead partitions of
        the tasks this thread gains (often none)."""
        try:
            self._set_state("PARTITIONS_ASSIGNED")
            tasks = self._expand(partitions)
            tps = [tp for task_tps in tasks.values() for tp in task_tps]
            committed = self._committed_offsets(tps)
            assignment = []
            for t, p in tps:
                off = committed.get((t, p))
                if off is None:
                    off = OFFSET_BEGINNING if self._reset_policy(t) == "earliest" else OFFSET_END
                assignment.append(TopicPartition(t, p, off))
            if assignment:
                consumer.incremental_assign(assignment)
            self.task_manager.create_tasks(tps, committed)
            self._last_commit = time.monotonic()
            self._set_state("RUNNING")
            self.hooks.standby_refresh()
        except BaseException as exc:  # noqa: BLE001 - re-raised from the poll loop
            self._callback_error = exc

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Cooperative revocation of the tasks whose lead partitions are in ``partitions``:
        commit, close them cleanly, stop fetching their partitions."""
        tasks = self._expand(partitions)
        try:
            if tasks:
                self._set_state("PARTITIONS_REVOKED")
                self._close_tasks([t for t in tasks if t in self.tasks], clean=True)
        except BaseException as exc:  # noqa: BLE001
            self._close_tasks([t for t in tasks if t in self.tasks], clean=False)
            self._callback_error = exc
        finally:
            self._unassign(consumer, tasks)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("stream thread %s lost its partitions (session timed out): closing tasks dirty", self.name)
        tasks = self._expand(partitions)
        try:
            self._close_tasks([t for t in tasks if t in self.tasks], clean=False)
        except BaseException as exc:  # noqa: BLE001
            self._callback_error = exc
        finally:
            self._unassign(consumer, tasks)

    def _unassign(self, consumer: Consumer, tasks: dict[str, list[TP]]) -> None:
        tps = [TopicPartition(t, p) for task_tps in tasks.values() for t, p in task_tps]
        if tps:
            try:
                consumer.incremental_unassign(tps)
            except KafkaException as exc:
                if self._callback_error is None:
                    self._callback_error = exc

    def _reset_policy(self, topic: str) -> str:
        if topic in self.plan.repartition:
            return "earliest"  # internal topics are always read from the beginning
        node = self.topology.nodes.get(self.topology.source_topics().get(topic, ""))
        policy = getattr(getattr(node, "op", None), "offset_reset", None)
        return str(policy or self.config.auto_offset_reset).lower()

    def _committed_offsets(self, tps: list[TP], fresh: bool = False) -> dict[TP, int]:
        """The group's committed offsets of ``tps`` (absent: none committed); see
        :meth:`_committed`."""
        return {(r.topic, r.partition): r.offset for r in self._committed(tps, fresh) if r.offset >= 0}

    def _committed(self, tps: list[TP], fresh: bool = False) -> list[TopicPartition]:
        """The group's committed offsets and metadata of ``tps``, read by the stream
        thread's consumer, or with ``fresh`` by a consumer of the group that never joins it
        (:mod:`speed_layer.runtime.committed_offsets`, which says why not the Admin API).
        Retriable and coordinator errors are retried until ``task.timeout.ms``.

        Raises:
            StreamsException: not readable within ``task.timeout.ms``.
        """
        if not tps:
            return []
        assert self.consumer is not None
        deadline = time.monotonic() + self.config.task_timeout_ms / 1000
        while True:
            try:
                if fresh:
                    return self._offsets_reader().read(tps)
                return list(self.consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10))
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                # the group coordinator may still be loading (a new broker): retry
                if time.monotonic() > deadline or not isinstance(err, KafkaError) or not (err.retriable() or err.code() in _COORDINATOR_ERRORS):
                    raise StreamsException(f"cannot read the committed offsets of {self.config.application_id}: {exc}") from exc
                time.sleep(0.2)

    def _offsets_reader(self) -> CommittedOffsetsReader:
        if self._reader is None:
            client_id = f"{self.config.application_id}-{self.context.process_id}-StreamThread-{self.index}-offsets-reader"
            conf = self.context.consumer_config(client_id=client_id)
            conf.update(self.context.client_overrides("consumer."))
            self._reader = CommittedOffsetsReader(conf, self.config.application_id)
        return self._reader

    def _close_offsets_reader(self) -> None:
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception:  # noqa: BLE001 - closing the thread anyway
                log.exception("closing the committed-offsets reader failed")
            self._reader = None

    def _admin_client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            conf = {"bootstrap.servers": self.config.bootstrap_servers, "logger": logging.getLogger("speed_layer.kafka")}
            conf.update(self.context.client_overrides("admin."))
            self._admin = AdminClient(conf)
        return self._admin

    def _abort_and_rewind(self, cause: KafkaException) -> None:
        """Exactly-once recovery from a transaction that could not commit but may be aborted
        (e.g. a timeout while the broker did not answer), as Kafka Streams' handling of a
        ``TaskCorruptedException``: abort the transaction (retrying for ``ABORT_TIMEOUT_S``,
        then replacing the producer as :meth:`_recover_producer`), close the tasks dirty (their stores hold uncommitted writes and
        have no checkpoint, so they are wiped), seek every input partition back to its
        committed offset and recreate the tasks, which restore from the changelogs
        (read_committed). The aborted outputs are never visible to read_committed readers.

        Raises:
            StreamsException: the producer had to be replaced and could not be.
        """
        assert self.producer is not None and self.consumer is not None and self.collector is not None
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
        deadline = time.monotonic() + ABORT_TIMEOUT_S
        while True:
            try:
                self.producer.abort_transaction(10)
                break
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not isinstance(err, KafkaError) or err.fatal() or time.monotonic() > deadline:
                    # the coordinator may have aborted the transaction itself and bumped the
                    # epoch (fenced), or stays away: a new producer fences the old one
                    self._recover_producer(exc)
                    return
                time.sleep(1)
        self._in_txn = False
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
        old = self.producer
        tps = sorted(self.tp_task)
        self._in_txn = False  # the old transaction cannot be aborted: the new producer fences it
        self._close_tasks(list(self.tasks), clean=False)
        hung = _hung(_fatal_producer_error(cause))
        if old is not None:
            retire_producer(old, purge=not hung)  # (a hung producer is left alone: see _watchdog)
        try:
            self._new_producer()
        except KafkaException as exc:
            raise StreamsException(f"{self.name}: cannot replace the failed producer: {exc}") from exc
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
        committed = self._committed_offsets(tps, fresh=True)
        if tps:
            self.consumer.resume([TopicPartition(t, p) for t, p in tps])
        for t, p in tps:
            off = committed.get((t, p))
            if off is None:
                off = OFFSET_BEGINNING if self._reset_policy(t) == "earliest" else OFFSET_END
            self.consumer.seek(TopicPartition(t, p, off))
        self.task_manager.create_tasks(tps, committed)
        self._last_commit = time.monotonic()
        for tid in self.tasks:
            self.metrics.inc(tid, "task-corrupted")

    def _close_tasks(self, task_ids: list[str], clean: bool) -> None:
        if not task_ids:
            return
        if clean:
            self._commit(force=True)
        elif self._in_txn and self.producer is not None:
            try:
                self.producer.abort_transaction(10)
            except Exception:  # noqa: BLE001 - closing dirty anyway
                log.exception("aborting the transaction failed")
            self._in_txn = False
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
        if self._callback_error is not None:
            exc, self._callback_error = self._callback_error, None
            raise exc
        if not self.eos:
            self._settle_commit()
        self.inputs.add(msgs)
        self.inputs.pause_resume(self.consumer)
        self._restore_metadata()
        if not paused:
            self.executor.process()
            self.executor.punctuate(int(time.time() * 1000))
        if (time.monotonic() - self._last_commit) * 1000 >= self.context.commit_interval_ms or any(t.commit_requested for t in self.tasks.values()):
            self._commit()
        elif self._commit_when_caught_up and not self.inputs.any_held() and self.readiness.caught_up():
            self._commit()
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
        self._commit_when_caught_up = True

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
        res = self._committed(tps, fresh=True)
        meta = {(r.topic, r.partition): r.metadata for r in res if r.offset >= 0}
        for t in fresh:
            t.restore_metadata({tp: meta[tp] for tp in self.task_tps[t.task_id] if tp in meta})

    def _maybe_begin(self) -> None:
        if self.eos and not self._in_txn:
            assert self.producer is not None
            self.producer.begin_transaction()
            self._in_txn = True

    def _commit(self, force: bool = False) -> None:
        """Commit every task (see the module docstring). ``force`` also commits when no
        offset moved (before closing tasks).

        At-least-once, the offsets are sent asynchronously (:mod:`.offset_commits`): while
        an earlier commit is in flight they are deferred (INFO), and the committed offsets
        and checkpoints are updated when the result comes in (:meth:`_settle_commit`)."""
        assert self.consumer is not None and self.producer is not None and self.collector is not None
        self._last_commit = time.monotonic()
        self._commit_when_caught_up = False
        if not self.eos:
            self._settle_commit()
        if not self.tasks:
            return
        self._maybe_begin()
        offsets: dict[TP, int] = {}
        for task in self.tasks.values():
            started = time.perf_counter_ns()
            offsets.update(task.commit())
            task.metrics.inc(task.task_id, ACTIVE_TIME_NS, time.perf_counter_ns() - started)
        drained = [TopicPartition(t, p) for (t, p), task in self.tp_task.items() if task.buffered_in(t, p) == 0 and not self.inputs.holds((t, p))]
        if drained:
            # past transaction markers: commit the position when nothing is buffered (Kafka does too)
            for pos in self.consumer.position(drained):
                if pos.offset >= 0:
                    tp = (pos.topic, pos.partition)
                    offsets[tp] = max(offsets.get(tp, -1), pos.offset)
        changed = {tp: off for tp, off in offsets.items() if off > self.committed.get(tp, -1)}
        for task in self.tasks.values():
            if task.processor_metadata_needs_commit:
                # Kafka commits a task whose processor metadata changed (ProcessorMetadata#needsCommit)
                for tp in self.task_tps[task.task_id]:
                    off = offsets.get(tp, self.committed.get(tp, -1))
                    if off >= 0:
                        changed.setdefault(tp, off)
        if changed:
            log.debug("%s: committing %s", self.name, changed)
        if self.eos:
            # a failed send leaves the transaction unable to commit: raise it now (Kafka's
            # StreamTask#prepareCommit flushes the collector and rethrows its send error
            # before the commit), so that no offsets are committed past the failed record
            self.collector.poll()
            self.collector.check_error()
            try:
                producer, metadata = self.producer, self.consumer.consumer_group_metadata()
                if changed:
                    positions, txn_s = self._committable(changed), self._txn_timeout_s
                    _watchdog(f"{self.name}: send_offsets_to_transaction",
                              lambda: producer.send_offsets_to_transaction(positions, metadata, txn_s), txn_s)
                _watchdog(f"{self.name}: commit_transaction", lambda: producer.commit_transaction(60), 60)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if _hung(err):
                    # the hung call blocks every other call of this producer (an abort fails
                    # with _CONFLICT): replace it at once, whatever the failed sends say
                    self._recover_producer(exc)
                    return
                # the send that made the transaction abortable: raised if it may not be
                # retried (a record error, a fatal one), rather than rewound to fail again
                self.collector.poll()
                self.collector.check_error()
                if isinstance(err, KafkaError) and not err.fatal() and (err.txn_requires_abort() or err.retriable()):
                    self._abort_and_rewind(exc)
                    return
                raise StreamsException(f"committing the transaction of {self.name} failed: {exc}") from exc
            self._in_txn = False
            self.collector.check_error()
        else:
            self.collector.flush()
            if changed:
                if self._commits.pending is not None:
                    log.info("%s: commit of %s deferred: the commit of %s has not returned", self.name,
                             describe_offsets(changed), self._commits.describe())
                    self._commits.warn_if_overdue()
                    return
                meta = frozenset(t.task_id for t in self.tasks.values() if t.processor_metadata_needs_commit)
                for tid in meta:
                    self.tasks[tid].processor_metadata_needs_commit = False
                commit = InFlightCommit(changed, frozenset(self.tasks), meta, dict(self.collector.acked_offsets), self._last_commit)
                self._commits.send(self.consumer, self._committable(changed), commit)
                return  # the rest once it returns: _settle_commit
        self.committed.update(changed)
        if changed:
            for task in self.tasks.values():
                task.processor_metadata_needs_commit = False
        self._after_commit(bool(changed) or force, self._last_commit, list(self.tasks), None)

    def _after_commit(self, counted: bool, started: float, task_ids: list[str], acked: dict[TP, int] | None) -> None:
        """After a commit: its metrics (when ``counted``), at-least-once the checkpoints of
        ``task_ids`` (with the changelog offsets ``acked`` when it was sent; None: now), and
        the periodic purge of the repartition topics."""
        if counted:
            self.commit_total += 1
            done = time.monotonic()
            self.commit_latencies.append((done, (done - started) * 1000))
        if not self.eos:
            for tid in task_ids:
                if tid in self.tasks:
                    self.task_manager.checkpoint(tid, acked=acked)
        if time.monotonic() - self._last_purge >= REPARTITION_PURGE_INTERVAL_S:
            self._purge_repartition_topics()

    def _settle_commit(self) -> None:
        """Handle the result of the at-least-once commit in flight once it has returned
        (:mod:`.offset_commits`; its ``on_commit`` callback runs in this thread's polls):
        success updates the committed offsets of the partitions still owned and writes the
        checkpoints of its tasks; a rebalance, coordinator or retriable error defers the
        offsets to the next commit, as Kafka's ``TaskManager#commit`` on
        ``RebalanceInProgressException`` and ``TimeoutException`` (INFO). Still in flight:
        logged once (WARNING) past ``default.api.timeout.ms`` + ``COMMIT_GRACE_S``.

        Raises:
            StreamsException: the commit failed with any other error.
        """
        done = self._commits.returned()
        if done is None:
            self._commits.warn_if_overdue()
            return
        err = done.error
        if err is None:
            self.committed.update({tp: off for tp, off in done.offsets.items()
                                   if tp in self.tp_task and off > self.committed.get(tp, -1)})
            if done.warned:
                log.info("%s: the offset commit reported late returned %.1f s after it was sent: committed",
                            self.name, time.monotonic() - done.sent)
            self._after_commit(True, done.sent, sorted(done.tasks), done.acked)
            return
        for tid in done.metadata_tasks:
            if tid in self.tasks:
                self.tasks[tid].processor_metadata_needs_commit = True
        if err.code() in _REBALANCE_ERRORS or err.code() in _COORDINATOR_ERRORS or err.retriable():
            # the outputs are flushed; the offsets are committed at the next commit (or
            # by the next owner when a rebalance revokes the tasks)
            log.info("%s: commit deferred (%s)", self.name, err.str())
            return
        raise StreamsException(f"committing offsets of {self.name} failed: {err.str()}")

    def _committable(self, offsets: dict[TP, int]) -> list[TopicPartition]:
        """Offsets with their metadata (Kafka's ``StreamTask#committableOffsetsAndMetadata``:
        ``TopicPartitionMetadata`` of the partition time and the processor metadata)."""
        tp_task = self.tp_task
        out = []
        for (t, p), o in offsets.items():
            task = tp_task.get((t, p))
            out.append(TopicPartition(t, p, o) if task is None else TopicPartition(t, p, o, metadata=task.commit_metadata()))
        return out

    def _purge_repartition_topics(self) -> None:
        """Delete consumed records of repartition topics up to the committed offsets
        (Kafka's ``TaskManager#maybePurgeCommittedRecords``, ``repartition.purge.interval.ms``
        30 s). Fire and forget: a failure is logged and retried at the next purge."""
        self._last_purge = time.monotonic()
        todo = [TopicPartition(t, p, off) for (t, p), off in self.committed.items()
                if t in self.plan.repartition and off > self._purged.get((t, p), 0)]
        if not todo:
            return

        def done(fut: Any, tp: TopicPartition = None) -> None:  # type: ignore[assignment]
            if fut.exception() is not None:
                log.debug("purging %s failed: %s", tp, fut.exception())

        try:
            futures = self._admin_client().delete_records(todo, request_timeout=30)
        except Exception as exc:  # noqa: BLE001 - purging is an optimisation
            log.debug("purging repartition topics failed: %r", exc)
            return
        for tp in todo:
            self._purged[(tp.topic, tp.partition)] = tp.offset
        for tp, fut in futures.items():
            fut.add_done_callback(lambda f, tp=tp: done(f, tp))

    # ------------------------------------------------------------------ introspection
    def progress(self, tp: TP) -> int | None:
        """The committed offset of ``tp`` if this thread owns it, else None."""
        if tp not in self.tp_task:
            return None
        return self.committed.get(tp, -1)
