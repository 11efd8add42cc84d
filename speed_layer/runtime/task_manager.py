"""TaskManager: the active tasks of one stream thread and their local state (Kafka's
``TaskManager`` with ``ProcessorStateManager``'s checkpoint bookkeeping).

It creates a task when the thread is assigned its partitions: validates the task
directory's checkpoint against the changelog (or source-topic) watermarks and wipes local
state that cannot be trusted, restores the stores from their changelogs (from the
checkpoint when there is one), and initializes the task. It writes the checkpoints
(``CHECKPOINT_OFFSET_DELTA``) and closes tasks, clean or dirty. It owns the thread's task
dictionaries (``tasks``, ``task_tps``, ``tp_task``), the committed offsets and the task
directory locks; the thread's readiness, input buffers and record collector learn about
new and closed tasks through a :class:`TaskListener`.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from ..errors import StreamsException
from .record_collector import KafkaRecordCollector
from .restore import ChangelogRestorer, RestoreEntry, delete_checkpoint, read_checkpoint, write_checkpoint
from .task import Metrics, StreamTask

log = logging.getLogger("speed_layer.thread")

__all__ = ["CHECKPOINT_OFFSET_DELTA", "TaskListener", "TaskManager"]

TP = tuple[str, int]

#: records (summed over a task's changelog partitions) between two checkpoints at commit,
#: Kafka's ``OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT``
CHECKPOINT_OFFSET_DELTA = 10_000


class TaskListener(Protocol):
    """What the stream thread does when a task is added or removed."""

    def task_added(self, task_id: str, tps: list[TP]) -> None:
        """Task ``task_id`` reading ``tps`` was created and restored."""

    def task_removed(self, task_id: str, tps: list[TP]) -> None:
        """Task ``task_id`` reading ``tps`` is closed (called before it is forgotten)."""

    def standby_claim(self, task_id: str) -> None:
        """A warm standby of ``task_id`` on this instance hands its stores over."""

    def standby_release(self, task_id: str) -> None:
        """The closed ``task_id`` may be kept as a standby again."""


class TaskManager:
    """The active tasks of one stream thread (see the module docstring).

    ``collector`` and ``restorer`` are the thread's current record collector and changelog
    restorer: the thread sets them when it creates (or replaces) its clients.
    """

    def __init__(self, name: str, config: Any, plan: Any, topology: Any, state_directory: Any, global_stores: Any,
                 metrics: Metrics, listener: TaskListener) -> None:
        self.name = name
        self.config = config
        self.plan = plan
        self.topology = topology
        self.state_directory = state_directory
        self.global_stores = global_stores
        self.metrics = metrics
        self.listener = listener
        self.eos = bool(config.exactly_once)
        self.collector: KafkaRecordCollector | None = None
        self.restorer: ChangelogRestorer | None = None
        self.tasks: dict[str, StreamTask] = {}
        self.task_tps: dict[str, list[TP]] = {}
        self.tp_task: dict[TP, StreamTask] = {}
        #: the group's committed offsets of the owned partitions
        self.committed: dict[TP, int] = {}
        self._task_locks: dict[str, threading.Lock] = {}
        #: per task: {changelog or source tp: "changelog" | "source"} of persistent stores
        self._store_tps: dict[str, dict[TP, str]] = {}
        self._restored_end: dict[TP, int] = {}
        self._last_checkpoint: dict[str, dict[TP, int]] = {}

    def create_tasks(self, tps: list[TP], committed: dict[TP, int]) -> None:
        """Create, restore and initialize the tasks reading ``tps`` (each task's source
        partitions), with the group's ``committed`` offsets (absent: none committed).

        Raises:
            StreamsException: a partition no task reads.
        """
        by_task: dict[str, list[TP]] = {}
        for t, p in tps:
            tid = self.plan.task_for(t, p)
            if tid is None:
                raise StreamsException(f"no task reads {t}-{p}")
            by_task.setdefault(tid, []).append((t, p))
        for tid, task_tps in sorted(by_task.items()):
            self._create_task(tid, task_tps, committed)

    def _create_task(self, task_id: str, tps: list[TP], committed: dict[TP, int]) -> None:
        assert self.restorer is not None and self.collector is not None
        sub_id, partition = (int(x) for x in task_id.split("_"))
        sub = next(s for s in self.plan.subtopologies if s.id == sub_id)
        state = self.state_directory
        self.listener.standby_claim(task_id)  # a warm standby here hands its stores over first
        lock = state.lock_task(task_id)
        task: StreamTask | None = None
        try:
            task_dir = state.task_dir(task_id)
            store_tps: dict[str, tuple[TP, str]] = {}
            for s in sub.stores:
                spec = self.topology.stores[s]
                if spec.source_topic_changelog:
                    topic = spec.source_topic_changelog
                    if partition < self.plan.partitions.get(topic, 0):
                        store_tps[s] = ((topic, partition), "source")
                elif spec.logging:
                    store_tps[s] = ((spec.changelog_topic(self.config.application_id), partition), "changelog")
            watermarks = {tp: self.restorer.watermarks(*tp) for tp, _ in store_tps.values()}
            checkpoint = read_checkpoint(task_dir)
            wipe = checkpoint is None and (task_dir / "rocksdb").exists()
            for tp, kind in store_tps.values():
                if checkpoint is None or tp not in checkpoint:
                    continue
                lo, hi = watermarks[tp]
                limit = hi if kind == "changelog" else committed.get(tp, -1)
                if not lo <= checkpoint[tp] <= limit:
                    log.warning("task %s: checkpoint %s=%d outside [%d, %d]: wiping local state", task_id, tp, checkpoint[tp], lo, limit)
                    wipe = True
            if wipe:
                state.wipe(task_dir)
                checkpoint = None
            ckpt = checkpoint or {}

            def sender(topic: str, key: bytes, value: bytes | None, ts: int, _p: int = partition) -> None:
                if topic in self.plan.source_changelogs:
                    return  # a KTable's source topic is its changelog: nothing to write
                assert self.collector is not None
                self.collector.send(topic, key, value, ts, [], _p)

            task = StreamTask(
                task_id, self.topology, sub, partition, self.config, self.collector,
                state_dir=task_dir, global_stores=self.global_stores,
                clock=lambda: int(time.time() * 1000), metrics=self.metrics, changelog_sender=sender,
            )
            entries: list[RestoreEntry] = []
            persistent: dict[TP, str] = {}
            for s, (tp, kind) in store_tps.items():
                store = task.stores[s]
                lo, hi = watermarks[tp]
                start = ckpt[tp] if store.persistent and tp in ckpt else lo
                if kind == "changelog":
                    self.collector.report_offsets(tp[0])  # checkpoints write its acked offsets
                    end = hi
                    apply = (lambda st: lambda k, v, ts, h: st.restore(k, v))(store)
                else:
                    end = committed.get(tp, lo)
                    apply = self._source_restorer(task, tp[0], store)
                entries.append(RestoreEntry(tp[0], tp[1], start, end, apply))
                self._restored_end[tp] = max(start, end)
                if store.persistent:
                    persistent[tp] = kind
            log.debug("%s: creating task %s (checkpoint %s, wiped %s): restoring %s", self.name, task_id, checkpoint, wipe,
                     [(e.topic, e.partition, e.start, e.end) for e in entries])
            self.restorer.restore(entries)
            self.metrics.inc(task_id, "restored-records", sum(e.restored for e in entries))
            for st in task.stores.values():
                st.flush()
            if self.eos:
                delete_checkpoint(task_dir)  # Kafka: no checkpoint while processing under EOS
            task.initialize()
        except BaseException:
            if task is not None:
                try:
                    task.close()  # release the stores (RocksDB locks) before giving up
                except Exception:  # noqa: BLE001 - already failing
                    log.exception("closing task %s after a failed creation failed", task_id)
            lock.release()
            raise
        self.tasks[task_id] = task
        self._task_locks[task_id] = lock
        self._store_tps[task_id] = persistent
        self.task_tps[task_id] = sorted(tps)
        for tp in tps:
            self.tp_task[tp] = task
            if tp in committed:
                self.committed[tp] = committed[tp]
        self.listener.task_added(task_id, sorted(tps))
        log.debug("%s: task %s reads %s from committed offsets %s", self.name, task_id, tps, {tp: committed.get(tp) for tp in tps})

    def _source_restorer(self, task: StreamTask, topic: str, store: Any) -> Any:
        """Restore a KTable store from its source topic: deserialize with the source's serdes
        and put (Kafka's source-topic changelog restore)."""
        node = task.sources[topic]
        ks, vs = task.node_serdes(node)

        def apply(kb: bytes | None, vb: bytes | None, ts: int, headers: Any) -> None:
            try:
                key, value = ks.deserialize(kb), vs.deserialize(vb)
            except Exception as exc:  # noqa: BLE001 - the record was skipped by processing too
                log.warning("task %s: skipping undeserializable %s record while restoring: %r", task.task_id, topic, exc)
                return
            if key is None:
                return
            store.put(key, value, ts)  # KeyValueStore and VersionedKeyValueStore alike

        return apply

    def checkpoint(self, task_id: str, force: bool = False, acked: dict[TP, int] | None = None) -> None:
        """Write the task's checkpoint: at-least-once, at a commit once its offsets moved by
        more than ``CHECKPOINT_OFFSET_DELTA`` records in all (Kafka's
        ``StateManagerUtil#checkpointNeeded``); on a clean close (``force``) whenever they
        moved. An older checkpoint only means a longer restore: replaying the changelog
        from it rewrites the same values. ``acked``: the changelog offsets acknowledged
        when the stores were flushed (an offset commit that returned later); None: now."""
        assert self.collector is not None
        acked = self.collector.acked_offsets if acked is None else acked
        offsets: dict[TP, int] = {}
        for tp, kind in self._store_tps.get(task_id, {}).items():
            if kind == "changelog":
                off = max(acked.get(tp, -1), self._restored_end.get(tp, -1))
            else:
                off = self.committed.get(tp, self._restored_end.get(tp, -1))
            if off >= 0:
                offsets[tp] = off
        if not self.tasks[task_id].stores:
            return
        last = self._last_checkpoint.get(task_id)
        if last == offsets:
            return
        if not force and last is not None:
            delta = sum(off - last.get(tp, 0) for tp, off in offsets.items())
            if delta <= CHECKPOINT_OFFSET_DELTA:
                return
        write_checkpoint(self.state_directory.task_dir(task_id), offsets)
        self._last_checkpoint[task_id] = offsets

    def close_task(self, task_id: str, clean: bool) -> None:
        """Close ``task_id`` (clean: after writing its checkpoint) and forget it; a no-op
        for a task this manager does not own. The thread commits (clean) or aborts the
        open transaction (dirty) before."""
        task = self.tasks.get(task_id)
        if task is None:
            return
        try:
            if clean:
                self.checkpoint(task_id, force=True)
            task.close()
        finally:
            tps = self.task_tps.get(task_id, [])
            self.listener.task_removed(task_id, tps)
            del self.tasks[task_id]
            self._store_tps.pop(task_id, None)
            self._last_checkpoint.pop(task_id, None)
            for tp in self.task_tps.pop(task_id, []):
                self.tp_task.pop(tp, None)
                self.committed.pop(tp, None)
            self._task_locks.pop(task_id).release()
            self.listener.standby_release(task_id)
