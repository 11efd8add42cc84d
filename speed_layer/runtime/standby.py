"""Standby replicas: warm copies of other instances' task stores (Kafka's
``num.standby.replicas`` and ``StandbyTask``).

Kafka's assignor places standby tasks and the stream threads keep them up to date. duet's
group assignment is librdkafka's (see ``docs/instances.md``), so the standbys are placed by
a rule every instance computes alike from the group coordinator's view
(:func:`~speed_layer.runtime.metadata.standby_assignment`: never on the active task's
instance, spread evenly), and one :class:`StandbyUpdater` thread per instance keeps its
standby tasks' stores:

* it re-reads the group after every rebalance this instance takes part in (the stream
  threads tell it) and every ``REFRESH_S`` seconds, then opens and closes standby tasks;
* a standby task locks its task directory, opens the task's persistent, logged stores
  (RocksDB) and replays their changelog partitions from the task's checkpoint (or from
  the beginning after wiping a directory without a valid one), with a consumer of its own
  (assigned partitions, no group, ``read_committed`` under exactly-once);
* every ``commit.interval.ms`` it flushes the stores and writes the checkpoint (the next
  changelog offset to apply), as ``StandbyTask#commit``;
* when a stream thread of this instance is assigned the task, it *claims* it: the standby
  is flushed, checkpointed and closed first, so the new active task restores only the
  changelog tail past that checkpoint instead of the whole changelog.

Differences from Kafka: in-memory stores and stores restored from their source topic
(``source_topic_changelog``) get no standby (the active task rebuilds them); the placement
does not weigh lags (Kafka's ``HighAvailabilityTaskAssignor`` moves an active task to a
caught-up standby with warm-up replicas; cooperative-sticky keeps tasks where they are).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from ..errors import StreamsException
from ..state.factories import build_store
from .metadata import describe_members, standby_assignment
from .restore import read_checkpoint, write_checkpoint
from .task_timeout import ListOffsets, TaskTimeout
from .task_timeout import watermarks as partition_watermarks

if TYPE_CHECKING:
    from .kafka_streams import KafkaStreams

log = logging.getLogger("speed_layer.standby")

__all__ = ["StandbyUpdater", "REFRESH_S"]

TP = tuple[str, int]
#: how often the updater re-reads the group's assignment without being told to, s
REFRESH_S = 5.0
#: how long after a rebalance callback the updater re-reads the group (lets it settle), s
SETTLE_S = 0.5


@dataclass
class _StandbyTask:
    task_id: str
    task_dir: Path
    lock: threading.Lock
    stores: dict[str, Any]
    #: changelog partition -> the store it restores
    store_of: dict[TP, Any]
    #: changelog partition -> next offset to apply
    position: dict[TP, int]
    checkpointed: dict[TP, int] = field(default_factory=dict)
    updates: int = 0


class StandbyUpdater(threading.Thread):
    """Keeps this instance's standby tasks (see the module docstring). Started by
    ``KafkaStreams.start`` when ``num.standby.replicas`` > 0."""

    def __init__(self, streams: "KafkaStreams", consumer_config: dict[str, Any],
                 on_error: Callable[[BaseException], None], admin: Callable[[], Any],
                 reset_admin: Callable[[], None]) -> None:
        """``admin()`` returns the client's admin client (to describe the group);
        ``reset_admin()`` drops it after a failed request (a new one is made next time)."""
        super().__init__(name=f"{streams.config.application_id}-StandbyUpdater", daemon=True)
        self.streams = streams
        self.config = streams.config
        self.plan = streams.plan
        self.topology = streams.topology
        self._on_error = on_error
        self._admin, self._reset_admin = admin, reset_admin
        conf = dict(consumer_config)
        conf.update({"enable.auto.commit": False, "enable.partition.eof": False, "auto.offset.reset": "earliest",
                     "group.id": f"{self.config.application_id}-standby-{streams.process_id}"})  # never joins nor commits
        self._consumer_config = conf
        self._lock = threading.RLock()
        self._tasks: dict[str, _StandbyTask] = {}
        self._claimed: set[str] = set()
        self._to_unassign: list[TP] = []
        self._refresh = threading.Event()
        self._refresh_at = 0.0
        self._stopping = threading.Event()
        #: standby updates applied per task over the instance's life
        self.updates: dict[str, int] = {}

    # ------------------------------------------------------------------ called by stream threads
    def request_refresh(self) -> None:
        """Re-read the group soon (after a rebalance callback)."""
        self._refresh_at = time.monotonic() + SETTLE_S
        self._refresh.set()

    def claim(self, task_id: str) -> None:
        """A stream thread of this instance takes ``task_id`` as an active task: close its
        standby (flushed and checkpointed) and keep it closed until :meth:`release`."""
        with self._lock:
            self._claimed.add(task_id)
            task = self._tasks.pop(task_id, None)
            if task is not None:
                self._close(task)
                self._to_unassign.extend(task.position)
                log.info("standby task %s handed over to an active task at %s", task_id, task.checkpointed)

    def release(self, task_id: str) -> None:
        """The active task ``task_id`` was closed here: it may become a standby again."""
        with self._lock:
            self._claimed.discard(task_id)
        self.request_refresh()

    def standby_task_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._tasks)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        self._refresh.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout_s)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        consumer = Consumer(self._consumer_config)
        offsets = ListOffsets(self._consumer_config)
        last_commit = time.monotonic()
        next_refresh = 0.0
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                if now >= next_refresh or (self._refresh.is_set() and now >= self._refresh_at):
                    self._refresh.clear()
                    self._reconcile(consumer, offsets)
                    next_refresh = time.monotonic() + REFRESH_S
                with self._lock:
                    if self._to_unassign:
                        consumer.incremental_unassign([TopicPartition(t, p) for t, p in self._to_unassign])
                        self._to_unassign.clear()
                    assigned = any(task.position for task in self._tasks.values())
                if not assigned or self.streams.is_paused():  # KIP-834: a paused client updates no standby
                    self._refresh.wait(0.2)
                    continue
                msgs = consumer.consume(1000, timeout=0.1)
                if msgs:
                    self._apply(msgs)
                if (time.monotonic() - last_commit) * 1000 >= self.streams.commit_interval_ms:
                    last_commit = time.monotonic()
                    with self._lock:
                        for task in self._tasks.values():
                            self._checkpoint(task)
        except BaseException as exc:  # noqa: BLE001 - handed to the client's error handling
            log.error("standby updater failed: %r", exc, exc_info=exc)
            self._on_error(exc)
        finally:
            with self._lock:
                for task in list(self._tasks.values()):
                    try:
                        self._close(task)
                    except Exception:  # noqa: BLE001 - closing anyway
                        log.exception("closing standby task %s failed", task.task_id)
                self._tasks.clear()
            consumer.close()

    def _apply(self, msgs: list[Any]) -> None:
        with self._lock:
            task_of = {tp: task for task in self._tasks.values() for tp in task.position}
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise StreamsException(f"standby consumer failed: {err.str()}")
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("standby consumer: %s", err.str())
                    continue
                tp = (msg.topic(), msg.partition())
                task = task_of.get(tp)
                if task is None:
                    continue  # closed meanwhile
                task.store_of[tp].restore(msg.key(), msg.value())
                task.position[tp] = msg.offset() + 1
                task.updates += 1
                self.updates[task.task_id] = self.updates.get(task.task_id, 0) + 1

    def _reconcile(self, consumer: Consumer, offsets: ListOffsets) -> None:
        """Open the standby tasks this instance should keep and close the others."""
        try:
            members = describe_members(self._admin(), self.config.application_id)
        except KafkaException as exc:
            self._reset_admin()
            log.warning("standby updater: cannot describe the group (%s): keeping the current standbys", exc)
            return
        placement = standby_assignment(self.plan, members, self.config.num_standby_replicas)
        me = self.streams.process_id
        with self._lock:
            wanted = {tid for tid, procs in placement.items() if me in procs and tid not in self._claimed and self._logged_stores(tid)}
            for tid in sorted(set(self._tasks) - wanted):
                task = self._tasks.pop(tid)
                self._close(task)
                self._to_unassign.extend(task.position)
            if self._to_unassign:
                consumer.incremental_unassign([TopicPartition(t, p) for t, p in self._to_unassign])
                self._to_unassign.clear()
            new = sorted(wanted - set(self._tasks))
        # outside the lock: the look-ups may retry for task.timeout.ms, and a stream thread
        # claiming a task (in its rebalance callback) must not wait for them
        marks = {tid: self._watermarks(tid, offsets) for tid in new}
        with self._lock:
            for tid in new:
                if tid in self._claimed or tid in self._tasks:
                    continue  # claimed by a stream thread meanwhile
                task = self._open(tid, consumer, marks[tid])
                if task is not None:
                    self._tasks[tid] = task
                    consumer.incremental_assign([TopicPartition(t, p, off if off >= 0 else OFFSET_BEGINNING)
                                                 for (t, p), off in task.position.items()])

    def _logged_stores(self, task_id: str) -> list[str]:
        sid = int(task_id.split("_")[0])
        sub = next(s for s in self.plan.subtopologies if s.id == sid)
        out = []
        for name in sub.stores:
            spec = self.topology.stores[name]
            if spec.logging and not spec.in_memory and not spec.source_topic_changelog and not spec.global_topic:
                out.append(name)
        return out

    def _changelogs(self, task_id: str) -> dict[str, TP]:
        """Store name -> the changelog partition of ``task_id`` it restores."""
        partition = int(task_id.split("_")[1])
        return {name: (self.topology.stores[name].changelog_topic(self.config.application_id), partition)
                for name in self._logged_stores(task_id)}

    def _watermarks(self, task_id: str, offsets: ListOffsets) -> dict[TP, tuple[int, int]]:
        """``(low, high)`` offsets of the changelog partitions of ``task_id``, under Kafka's
        timeout model (a standby task's offset look-ups time out as an active task's,
        ``AbstractTask#maybeInitTaskTimeoutOrThrow``).

        Raises:
            TaskTimeoutException: not answered within ``task.timeout.ms`` (the updater dies
                of it and the uncaught exception handler runs).
            StreamsException: a non-retriable error, at once.
        """
        timeouts = TaskTimeout.of(self.config)
        return {tp: partition_watermarks(offsets, tp[0], tp[1], timeouts, f"standby task {task_id}")
                for tp in self._changelogs(task_id).values()}

    def _open(self, task_id: str, consumer: Consumer, watermarks: dict[TP, tuple[int, int]]) -> _StandbyTask | None:
        """Open the standby task ``task_id`` from its checkpoint, given its changelogs'
        ``watermarks`` (:meth:`_watermarks`); None while an active task holds its directory."""
        state = self.streams.state_directory
        try:
            lock = state.lock_task(task_id, timeout_s=0.05)
        except StreamsException:
            return None  # an active task of this instance holds it (mid-handover): next refresh
        try:
            task_dir = state.task_dir(task_id)
            tps = self._changelogs(task_id)
            checkpoint = read_checkpoint(task_dir)
            valid = checkpoint is not None and all(watermarks[tp][0] <= checkpoint[tp] <= watermarks[tp][1]
                                                   for tp in tps.values() if tp in checkpoint)
            if not valid and (task_dir / "rocksdb").exists():
                log.info("standby task %s: no valid checkpoint (%s): wiping its local state", task_id, checkpoint)
                state.wipe(task_dir)
                checkpoint = None
            ckpt = checkpoint or {}
            stores = {name: build_store(self.topology.stores[name], task_dir, None, 0) for name in tps}
            position = {tp: ckpt.get(tp, watermarks[tp][0]) for tp in tps.values()}
            task = _StandbyTask(task_id, task_dir, lock, stores, {tp: stores[name] for name, tp in tps.items()}, position,
                                dict(ckpt))
        except BaseException:
            lock.release()
            raise
        log.info("standby task %s opened at %s", task_id, position)
        return task

    def _checkpoint(self, task: _StandbyTask) -> None:
        if task.position == task.checkpointed:
            return
        for store in task.stores.values():
            store.persist()
        write_checkpoint(task.task_dir, task.position)
        task.checkpointed = dict(task.position)

    def _close(self, task: _StandbyTask) -> None:
        try:
            self._checkpoint(task)
            for store in task.stores.values():
                store.close()
        finally:
            task.lock.release()
