"""TaskCommitter: the commit of one stream thread's tasks (Kafka's ``StreamThread#maybeCommit``,
``TaskManager#commit`` with ``commitTasksAndMaybeUpdateCommittableOffsets``,
``TaskExecutor#commitOffsetsOrTransaction`` and ``TaskManager#maybePurgeCommittedRecords``).

The thread commits every ``commit.interval.ms`` (ms), when a task requests it, and once it
is caught up if a waiter asked (:meth:`TaskCommitter.request_commit_when_caught_up`).
``task.commit()`` flushes record caches (forwarding their updates) and stores; at-least-once
then flushes the producer and commits the next offsets to read, one commit in flight at a
time, never blocking the thread: the result is picked up at the next loop, the task
checkpoints are written once it succeeded, and a commit that does not return within
``default.api.timeout.ms`` is reported and its offsets deferred (:mod:`.offset_commits`);
exactly-once (``exactly_once_v2``, KIP-447) sends the offsets to the open transaction and
commits it (:class:`.StreamsProducer`). After a commit, every
``repartition.purge.interval.ms`` the consumed records of the repartition topics are deleted.

A transaction that cannot commit is handed back to the thread: one whose call hung or whose
producer failed fatally to ``recover_producer`` (Kafka's ``TaskMigratedException``), one that
may be aborted to ``abort_and_rewind`` (Kafka's ``TaskCorruptedException``).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..errors import StreamsException
from .admin import admin_client
from .offset_commits import COORDINATOR_ERRORS, REBALANCE_ERRORS, InFlightCommit, OffsetCommits, describe_offsets
from .streams_producer import StreamsProducer, is_hung
from .task_executor import ACTIVE_TIME_NS

if TYPE_CHECKING:
    from .input_buffers import InputBuffers
    from .readiness import Readiness
    from .task_manager import TaskManager
    from .thread_context import ThreadContext

log = logging.getLogger("speed_layer.thread")

__all__ = ["TaskCommitter"]

TP = tuple[str, int]
#: how often a backlog's finished tasks are looked for (:meth:`TaskCommitter._backlog_finished`), s
BACKLOG_CHECK_S = 0.05


class TaskCommitter:
    """Commits the tasks of one stream thread (see the module docstring).

    Args:
        name: the thread's name, for the logs.
        context: the thread's :class:`.ThreadContext`: the streams config (``exactly_once``,
            ``bootstrap.servers``), the topology plan (which topics are repartition topics),
            the effective ``commit.interval.ms`` (ms) and the user's admin client overrides.
        purge_interval_s: ``repartition.purge.interval.ms``, s.
        task_manager: the thread's tasks, their partitions, committed offsets and checkpoints.
        streams_producer: the thread's producer and transaction.
        commits: the at-least-once commit in flight (fed by the consumer's ``on_commit``).
        inputs: the records held before the task buffers.
        readiness: whether every owned partition is consumed to its end.
        consumer: the thread's consumer now (None before it is created and after it is closed).
        recover_producer: the thread's recovery from a fatal producer error (its argument).
        abort_and_rewind: the thread's recovery from a transaction that may be aborted.
    """

    def __init__(self, name: str, context: "ThreadContext", purge_interval_s: float, task_manager: "TaskManager",
                 streams_producer: StreamsProducer, commits: OffsetCommits, inputs: "InputBuffers", readiness: "Readiness",
                 consumer: Callable[[], Consumer | None], recover_producer: Callable[[BaseException], None],
                 abort_and_rewind: Callable[[KafkaException], None]) -> None:
        self.name = name
        self.config = context.config
        self.plan = context.plan
        self.eos = bool(self.config.exactly_once)
        self.commit_interval_ms = context.commit_interval_ms
        self.purge_interval_s = purge_interval_s
        self.task_manager = task_manager
        self.tasks = task_manager.tasks
        self.task_tps = task_manager.task_tps
        self.tp_task = task_manager.tp_task
        self.committed = task_manager.committed
        self.streams_producer = streams_producer
        self.commits = commits
        self.inputs = inputs
        self.readiness = readiness
        self._consumer = consumer
        self._client_overrides = context.client_overrides
        self._recover_producer = recover_producer
        self._abort_and_rewind = abort_and_rewind
        #: ``time.monotonic()`` of the latest commit (or assignment), s
        self.last_commit = time.monotonic()
        #: set by :meth:`request_commit_when_caught_up` (another thread): commit at the
        #: next loop that finds every owned partition consumed to its end
        self._commit_when_caught_up = False
        #: commits done (Kafka's thread metric ``commit-total``)
        self.commit_total = 0
        #: ``(monotonic s, ms)`` of the latest commits, for Kafka's thread metrics
        #: ``commit-latency-avg`` / ``-max`` (:meth:`KafkaStreams.metrics`)
        self.commit_latencies: deque[tuple[float, float]] = deque(maxlen=1024)
        self._purged: dict[TP, int] = {}
        self._last_purge = time.monotonic()
        self._admin: Any = None
        self._backlog_checked = 0.0

    def request_commit_when_caught_up(self) -> None:
        """Ask for one commit at the next loop that finds every owned partition consumed
        to its end (thread-safe)."""
        self._commit_when_caught_up = True

    def restart_interval(self) -> None:
        """Count ``commit.interval.ms`` from now (new tasks start from committed offsets)."""
        self.last_commit = time.monotonic()

    def maybe_commit(self) -> None:
        """Commit when ``commit.interval.ms`` (ms) has passed since the last commit, a task
        requested one, or a waiter asked for one and the thread is caught up (Kafka's
        ``StreamThread#maybeCommit``).

        Raises:
            StreamsException: see :meth:`commit`.
        """
        if (time.monotonic() - self.last_commit) * 1000 >= self.commit_interval_ms or any(t.commit_requested for t in self.tasks.values()):
            self.commit()
        elif self._commit_when_caught_up and not self.inputs.any_held() and self.readiness.caught_up():
            self.commit()
        elif self.readiness.backlog is not None and self.commits.pending is None and self._backlog_finished():
            self.commit()

    def _backlog_finished(self) -> bool:
        """Whether a task consumed its partitions to the known ends of a backlog
        (:mod:`.backlog_ends`) and is not committed there yet: committed now, the tasks
        downstream of its sub-topology learn that their input is complete without waiting
        for ``commit.interval.ms``. Looked at every ``BACKLOG_CHECK_S`` at most."""
        now = time.monotonic()
        if now - self._backlog_checked < BACKLOG_CHECK_S:
            return False
        self._backlog_checked = now
        readiness, inputs = self.readiness, self.inputs
        backlog = readiness.backlog
        assert backlog is not None
        for task in self.tasks.values():
            def position(tp: TP, end: int) -> int | None:
                return None if task.buffered_in(*tp) or inputs.holds(tp) else readiness.position(tp, end)  # noqa: B023 - called at once
            if backlog.finished(self.task_tps[task.task_id], position, self.committed):
                return True
        return False

    def commit(self, force: bool = False) -> None:
        """Commit every task (see the module docstring). ``force`` also commits when no
        offset moved (before closing tasks).

        At-least-once, the offsets are sent asynchronously (:mod:`.offset_commits`): while
        an earlier commit is in flight they are deferred (INFO), and the committed offsets
        and checkpoints are updated when the result comes in (:meth:`settle`).

        Raises:
            StreamsException: a send failed for good (the collector's error), the
                transaction failed to commit with an error that is neither retriable nor
                abortable, or the at-least-once commit failed (:meth:`settle`).
        """
        consumer, collector = self._consumer(), self.streams_producer.collector
        assert consumer is not None and self.streams_producer.producer is not None and collector is not None
        self.last_commit = time.monotonic()
        self._commit_when_caught_up = False
        if not self.eos:
            self.settle()
        if not self.tasks:
            return
        self.streams_producer.maybe_begin()
        offsets: dict[TP, int] = {}
        for task in self.tasks.values():
            started = time.perf_counter_ns()
            offsets.update(task.commit())
            task.metrics.inc(task.task_id, ACTIVE_TIME_NS, time.perf_counter_ns() - started)
        drained = [TopicPartition(t, p) for (t, p), task in self.tp_task.items() if task.buffered_in(t, p) == 0 and not self.inputs.holds((t, p))]
        if drained:
            # past transaction markers: commit the position when nothing is buffered (Kafka does too)
            for pos in consumer.position(drained):
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
            collector.poll()
            collector.check_error()
            try:
                metadata = consumer.consumer_group_metadata()
                self.streams_producer.commit_transaction(self._committable(changed) if changed else [], metadata)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if is_hung(err):
                    # the hung call blocks every other call of this producer (an abort fails
                    # with _CONFLICT): replace it at once, whatever the failed sends say
                    self._recover_producer(exc)
                    return
                # the send that made the transaction abortable: raised if it may not be
                # retried (a record error, a fatal one), rather than rewound to fail again
                collector.poll()
                collector.check_error()
                if isinstance(err, KafkaError) and not err.fatal() and (err.txn_requires_abort() or err.retriable()):
                    self._abort_and_rewind(exc)
                    return
                raise StreamsException(f"committing the transaction of {self.name} failed: {exc}") from exc
            collector.check_error()
        else:
            collector.flush()
            if changed:
                if self.commits.pending is not None:
                    log.info("%s: commit of %s deferred: the commit of %s has not returned", self.name,
                             describe_offsets(changed), self.commits.describe())
                    self.commits.warn_if_overdue()
                    return
                meta = frozenset(t.task_id for t in self.tasks.values() if t.processor_metadata_needs_commit)
                for tid in meta:
                    self.tasks[tid].processor_metadata_needs_commit = False
                commit = InFlightCommit(changed, frozenset(self.tasks), meta, dict(collector.acked_offsets), self.last_commit)
                self.commits.send(consumer, self._committable(changed), commit)
                return  # the rest once it returns: settle
        self.committed.update(changed)
        if changed:
            for task in self.tasks.values():
                task.processor_metadata_needs_commit = False
        self._after_commit(bool(changed) or force, self.last_commit, list(self.tasks), None)

    def _after_commit(self, counted: bool, started: float, task_ids: list[str], acked: dict[TP, int] | None) -> None:
        """After a commit: its metrics (when ``counted``; ``started``: monotonic s),
        at-least-once the checkpoints of ``task_ids`` (with the changelog offsets ``acked``
        when it was sent; None: now), and the periodic purge of the repartition topics."""
        if counted:
            self.commit_total += 1
            done = time.monotonic()
            self.commit_latencies.append((done, (done - started) * 1000))
        if not self.eos:
            for tid in task_ids:
                if tid in self.tasks:
                    self.task_manager.checkpoint(tid, acked=acked)
        if time.monotonic() - self._last_purge >= self.purge_interval_s:
            self._purge_repartition_topics()

    def settle(self) -> None:
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
        done = self.commits.returned()
        if done is None:
            self.commits.warn_if_overdue()
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
        if err.code() in REBALANCE_ERRORS or err.code() in COORDINATOR_ERRORS or err.retriable():
            # the outputs are flushed; the offsets are committed at the next commit (or
            # by the next owner when a rebalance revokes the tasks)
            log.info("%s: commit deferred (%s)", self.name, err.str())
            return
        raise StreamsException(f"committing offsets of {self.name} failed: {err.str()}")

    def await_in_flight(self) -> None:
        """Before the last commit at close: wait for the at-least-once commit in flight
        (polling the consumer with its partitions paused, to serve its callback), at most
        until ``default.api.timeout.ms`` + ``COMMIT_GRACE_S`` after it was sent; then
        handle its result (:meth:`settle`). Still in flight: the last commit is deferred
        (see :mod:`.offset_commits`).

        Raises:
            StreamsException: see :meth:`settle`.
        """
        consumer = self._consumer()
        if self.eos or consumer is None or not self.commits.in_flight():
            return
        assignment = consumer.assignment()
        if assignment:
            consumer.pause(assignment)
        while self.commits.in_flight() and not self.commits.overdue():
            msg = consumer.poll(0.05)  # paused: serves callbacks
            if msg is not None:  # fetched before the pause: buffered, so that no position skips it
                self.inputs.add([msg])
        self.settle()

    def settle_at_close(self) -> None:
        """After the consumer closed (which serves the last commit's callback): count the
        last commit, or log (WARNING) that it failed. Never raises."""
        last = self.commits.returned()
        if last is not None and last.error is None:
            self.commit_total += 1
        elif last is not None and last.error is not None:
            log.warning("%s: the last offset commit (%s) failed at close: %s", self.name,
                        describe_offsets(last.offsets), last.error.str())

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

    def _admin_client(self) -> Any:
        if self._admin is None:
            self._admin = admin_client(self.config.bootstrap_servers, self._client_overrides("admin."))
        return self._admin
