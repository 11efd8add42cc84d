"""Local state: the state directory, checkpoint files and restoration from changelogs.

As Kafka Streams' ``StateDirectory``, ``OffsetCheckpoint`` and ``StoreChangelogReader``:

* ``<state.dir>/<application.id>/`` holds one directory per task (``<task id>/``, stores
  under ``rocksdb/<store>``), ``global/`` for global stores, a ``.lock`` taken by the
  running instance and ``kafka-streams-process-metadata`` (the process id, reused across
  restarts so that transactional ids stay stable);
* a ``.checkpoint`` file per task: JSON ``{"<changelog topic>-<partition>": offset}``, the
  changelog offset already reflected in the local store (written on commit and on clean
  close; deleted while processing under exactly-once);
* restoration replays a changelog partition from the checkpoint offset (or from the
  beginning after wiping the task directory) up to the end offset seen when the task is
  created, calling ``store.restore(key_bytes, value_bytes)``, before processing starts.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from ..errors import StreamsException
from .task_timeout import ListOffsets, TaskTimeout
from .task_timeout import watermarks as partition_watermarks

log = logging.getLogger("speed_layer.restore")

__all__ = [
    "StateDirectory", "read_checkpoint", "write_checkpoint", "delete_checkpoint", "ChangelogRestorer",
    "RestoreEntry", "CHECKPOINT_FILE",
]

CHECKPOINT_FILE = ".checkpoint"
TP = tuple[str, int]


def _tp_key(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


def read_checkpoint(task_dir: Path) -> dict[TP, int] | None:
    """Offsets of ``<task_dir>/.checkpoint``; None when there is no (readable) file."""
    path = Path(task_dir) / CHECKPOINT_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        log.warning("unreadable checkpoint %s: treating the state as corrupted", path)
        return None
    out: dict[TP, int] = {}
    for k, v in raw.items():
        topic, _, part = k.rpartition("-")
        out[(topic, int(part))] = int(v)
    return out


def write_checkpoint(task_dir: Path, offsets: dict[TP, int]) -> None:
    """Write ``offsets`` atomically (temporary file + rename, as Kafka's OffsetCheckpoint)."""
    task_dir = Path(task_dir)
    task_dir.mkdir(parents=True, exist_ok=True)
    tmp = task_dir / (CHECKPOINT_FILE + ".tmp")
    tmp.write_text(json.dumps({_tp_key(tp): off for tp, off in sorted(offsets.items())}, indent=0))
    os.replace(tmp, task_dir / CHECKPOINT_FILE)


def delete_checkpoint(task_dir: Path) -> None:
    (Path(task_dir) / CHECKPOINT_FILE).unlink(missing_ok=True)


class StateDirectory:
    """``<state.dir>/<application.id>`` (``state.dir`` None: ``<tmp>/kafka-streams``, as
    Kafka's default ``${java.io.tmpdir}/kafka-streams``)."""

    #: in-process task directory locks, shared by all instances in this process
    _task_locks: dict[Path, threading.Lock] = {}
    _registry_lock = threading.Lock()

    def __init__(self, state_dir: Path | None, application_id: str) -> None:
        base = Path(state_dir) if state_dir is not None else Path(tempfile.gettempdir()) / "kafka-streams"
        self.app_dir = base / application_id
        self._lock_fd: int | None = None

    # -- instance lock
    def lock(self) -> None:
        """Take ``.lock`` so that two instances never share a state directory.

        Raises:
            StreamsException: if another instance (process) holds it.
        """
        self.app_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.app_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StreamsException(f"state directory {self.app_dir} is used by another instance: give each instance its own state.dir") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def holder(self) -> str | None:
        """Who holds ``.lock`` now (a running instance): ``None`` when nobody does, else
        ``pid N (command line)`` (``this process (pid N)`` for a lock taken here) as
        ``/proc/locks`` names it, or ``another instance`` where it cannot be read. Probed with
        the ``flock`` :meth:`lock` takes, released at once."""
        try:
            fd = os.open(self.app_dir / ".lock", os.O_RDWR)
        except OSError:  # no lock file: never locked
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return _describe_pid(_flock_pid(os.fstat(fd)))
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def process_id(self) -> str:
        """The instance's process id, created once and kept in the state directory."""
        path = self.app_dir / "kafka-streams-process-metadata"
        try:
            return str(json.loads(path.read_text())["processId"])
        except (OSError, ValueError, KeyError):
            pid = str(uuid.uuid4())
            self.app_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"processId": pid}))
            return pid

    # -- task directories
    def task_dir(self, task_id: str) -> Path:
        return self.app_dir / task_id

    def global_dir(self) -> Path:
        return self.app_dir / "global"

    def lock_task(self, task_id: str, timeout_s: float = 60.0) -> threading.Lock:
        """Lock a task directory within this process (a task moving between threads waits
        until its previous owner closed it, as Kafka's ``StateDirectory#lock``).

        Raises:
            StreamsException: if not released within ``timeout_s`` seconds.
        """
        path = self.task_dir(task_id)
        with self._registry_lock:
            lk = self._task_locks.setdefault(path, threading.Lock())
        if not lk.acquire(timeout=timeout_s):
            raise StreamsException(f"task directory {path} still locked after {timeout_s} s")
        return lk

    def wipe(self, path: Path) -> None:
        """Delete a task's local state (used when there is no valid checkpoint)."""
        shutil.rmtree(path, ignore_errors=True)

    def cleanup(self) -> None:
        """Delete every task and global directory of the application (``KafkaStreams#cleanUp``)."""
        if not self.app_dir.exists():
            return
        for child in self.app_dir.iterdir():
            if child.name in (".lock", "kafka-streams-process-metadata"):
                continue
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def _flock_pid(st: os.stat_result) -> int | None:
    """The pid ``/proc/locks`` gives for a ``flock`` on the file of ``st`` (Linux); None when
    it names none or cannot be read. Its lines: ``1: FLOCK  ADVISORY  WRITE 1234 fe:00:5433561
    0 EOF`` (a waiter's has ``->`` after the number); device numbers in hex."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    flocks = [f for f in (line.split() for line in lines) if len(f) >= 6 and f[1] == "FLOCK"]
    exact = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    same_inode = [f for f in flocks if f[5].rsplit(":", 1)[-1] == str(st.st_ino)]
    for f in [f for f in same_inode if f[5] == exact] or same_inode:  # some file systems report another device
        if f[4].isdigit():
            return int(f[4])
    return None


def _describe_pid(pid: int | None) -> str:
    """``pid N (its command line, at most 100 characters)``."""
    if pid is None:
        return "another instance"
    if pid == os.getpid():
        return f"this process (pid {pid})"
    try:
        command = " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ").split())
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} ({command[:97] + '...' if len(command) > 100 else command})"


@dataclass
class RestoreEntry:
    """One partition to replay: records with ``start <= offset < end`` go to
    ``apply(key, value, timestamp_ms, headers)``."""

    topic: str
    partition: int
    start: int
    end: int
    apply: Callable[[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]], None]
    restored: int = 0


class ChangelogRestorer:
    """Replays changelog partitions with a dedicated consumer (Kafka's restore consumer:
    assigned partitions, no group, ``read_committed`` under exactly-once)."""

    def __init__(self, consumer_config: dict[str, Any], timeouts: TaskTimeout | None = None) -> None:
        """``timeouts``: the config's ``task.timeout.ms``, ``retry.backoff.ms`` and
        ``max.block.ms`` (:meth:`TaskTimeout.of`); default Kafka's defaults."""
        conf = dict(consumer_config)
        conf.update({"enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        conf.setdefault("group.id", f"restore-{uuid.uuid4().hex}")  # never joins, never commits
        self.consumer = Consumer(conf)
        self.offsets = ListOffsets(conf)
        self.timeouts = timeouts or TaskTimeout()

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """``(low, high)`` offsets of a changelog partition, under Kafka's timeout model
        (retriable errors, e.g. a new topic's leader not known yet, are retried every
        ``retry.backoff.ms`` until ``task.timeout.ms``: Kafka's ``StoreChangelogReader``
        hands its offset look-up's timeouts to ``AbstractTask#maybeInitTaskTimeoutOrThrow``).

        Raises:
            TaskTimeoutException: not answered within ``task.timeout.ms`` (the stream thread
                dies of it and the uncaught exception handler runs).
            StreamsException: a non-retriable error, at once.
        """
        return partition_watermarks(self.offsets, topic, partition, self.timeouts, "restore")

    def restore(self, entries: list[RestoreEntry], timeout_s: float = 600.0) -> None:
        """Replay every entry up to its end offset (end-of-partition also ends it: the last
        offsets may be transaction markers or compacted away).

        Raises:
            StreamsException: if restoration does not finish within ``timeout_s`` seconds.
        """
        todo = {(e.topic, e.partition): e for e in entries if e.end > e.start}
        if not todo:
            return
        self.consumer.assign([TopicPartition(t, p, e.start if e.start >= 0 else OFFSET_BEGINNING) for (t, p), e in todo.items()])
        deadline = time.monotonic() + timeout_s
        try:
            while todo:
                if time.monotonic() > deadline:
                    raise StreamsException(f"restoration of {sorted(todo)} not finished after {timeout_s} s")
                for msg in self.consumer.consume(1000, timeout=0.2):
                    tp = (msg.topic(), msg.partition())
                    e = todo.get(tp)
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if e is not None and msg.offset() >= e.end:
                                del todo[tp]
                            continue
                        if err.fatal():
                            raise StreamsException(f"restore consumer failed: {err.str()}")
                        log.warning("restore consumer: %s", err.str())
                        continue
                    if e is None:
                        continue
                    off = msg.offset()
                    if off < e.end:
                        ts = msg.timestamp()[1]
                        e.apply(msg.key(), msg.value(), ts, list(msg.headers() or []))
                        e.restored += 1
                    if off + 1 >= e.end:
                        del todo[tp]
        finally:
            self.consumer.unassign()
        for e in entries:
            if e.restored:
                log.info("restored %d record(s) of %s-%d [%d, %d)", e.restored, e.topic, e.partition, e.start, e.end)

    def close(self) -> None:
        self.consumer.close()
