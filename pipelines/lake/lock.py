"""The lake lock: one ``duet`` command at a time writes a pipeline's folder of the lake.

Every command that writes the lake or resets the pipeline's topics (``duet run``, ``load``,
``batch``, ``ui --load``) holds the lock of ``<lake root>/<pipeline name>`` while it does: the
file ``.duet.lock`` in that folder, locked with ``flock`` and holding the holder's pid, host,
command line and start time (JSON). A second writer fails at once, naming the first
(:class:`LakeBusy`). Dagster runs hold it too, from their first step that writes a
pipeline's folder to their end (``LakeResource.writable`` in :mod:`pipelines.dagster.resources`).

The kernel releases an ``flock`` when its process dies, whatever the death (Ctrl-C,
exception, ``kill -9``), so a lock is never held by a process that is gone. A lock file left
behind by such a process (its holder's pid no longer running) is stale: the next writer
takes it over with a one-line warning. A normal exit (or an exception, or Ctrl-C) removes the
file.

One machine, or a shared file system whose locks work across machines (NFS v4 forwards
``flock`` as a POSIX lock). A folder on an object store (``s3://...``) has a lease object
instead (:mod:`pipelines.lake.lease`); :mod:`pipelines.lake.locking` chooses.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType

from pipelines.preflight import UserError

__all__ = ["LOCK_FILE", "LakeBusy", "LakeLock", "LockHolder", "command_line", "lock_holder"]

#: the lock file's name in the pipeline's folder of the lake
LOCK_FILE = ".duet.lock"
#: how long a holder that has just created the file may take to write its name into it
_NAMING_WAIT_S = 0.5


class LakeBusy(UserError):
    """Another ``duet`` command holds the lake lock (the message names it)."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) a lake lock."""

    pid: int
    host: str
    command: str
    since: float  # epoch seconds

    def describe(self, now: float | None = None) -> str:
        """```duet run --limit 20000` (pid 1234 on host-a, since 2026-11-27 08:12:03 UTC, 3 min ago)``."""
        when = datetime.fromtimestamp(self.since, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        age = max(0.0, (now if now is not None else time.time()) - self.since)
        return f"`{self.command}` (pid {self.pid} on {self.host}, since {when}, {_ago(age)})"

    def to_json(self) -> str:
        """The lock file's content."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> LockHolder | None:
        """The holder a lock file names; ``None`` for an empty or unreadable file."""
        try:
            doc = json.loads(text)
            return cls(pid=int(doc["pid"]), host=str(doc["host"]), command=str(doc["command"]),
                       since=float(doc["since"]))
        except (ValueError, KeyError, TypeError):
            return None


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def command_line(argv: list[str] | None = None) -> str:
    """The command line as the user typed it: ``duet run --limit 20000`` (``python -m
    pipelines.cli`` and the console script's full path both read ``duet``)."""
    args = list(sys.argv if argv is None else argv)
    return shlex.join(["duet", *args[1:]])


class LakeLock:
    """The lock of one pipeline's folder of the lake; a context manager.

    ``with LakeLock(folder, "duet run"):`` takes it (creating ``folder`` if needed) or raises
    :class:`LakeBusy`; leaving the block (normally, by an exception or by Ctrl-C) releases it
    and removes ``folder`` again if the lock created it and it is still empty.

    Args:
        folder: the pipeline's folder of the lake (``Pipeline.lake(root)``).
        command: the holder's command line (:func:`command_line`), named to a second writer.
        warn: receives the one-line warning when a stale lock is taken over (default: stderr).
    """

    def __init__(self, folder: Path, command: str, warn: Callable[[str], None] | None = None) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.command = command
        self._warn = warn or _stderr
        self._fd: int | None = None
        self._made_folder = False

    @property
    def held(self) -> bool:
        """This object holds the lock."""
        return self._fd is not None

    def acquire(self) -> LockHolder:
        """Take the lock; returns the holder written into the file (this process).

        Raises:
            LakeBusy: another process holds it (the message names that process).
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this LakeLock")
        self._made_folder = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:  # until the locked file is the one at self.path (see _locked_file)
            fd = self._locked_file()
            if fd is not None:
                break
        previous = LockHolder.from_json(_read(fd))
        me = LockHolder(pid=os.getpid(), host=socket.gethostname(), command=self.command, since=time.time())
        if previous is not None and previous.pid != me.pid:
            self._warn(f"taking over the stale lake lock of {previous.describe()} in {self.folder}: that "
                       "process is gone")
        os.ftruncate(fd, 0)
        os.pwrite(fd, me.to_json().encode(), 0)
        self._fd = fd
        return me

    def _locked_file(self) -> int | None:
        """Open and ``flock`` the lock file: its descriptor, or ``None`` when the file was
        replaced meanwhile (a holder removed it between our open and our lock: try again).

        Raises:
            LakeBusy: another process holds the lock.
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            taken = _try_exclusive(fd)
            holder = None if taken else _named_holder(fd)
            if not taken and holder is None:  # nobody named: maybe lock_holder's shared lock of a moment
                taken = _try_exclusive(fd)
        except OSError:
            os.close(fd)
            raise
        if not taken:
            os.close(fd)
            who = holder.describe() if holder is not None else "another duet command (starting)"
            raise LakeBusy(f"{self.folder} is in use by {who}; wait until it ends, or stop it (one command at a "
                           "time writes a pipeline's lake)")
        if not _same_file(fd, self.path):
            os.close(fd)
            return None
        return fd

    def release(self) -> None:
        """Release the lock and remove its file (and the folder the lock created, if empty)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _same_file(fd, self.path):
                self.path.unlink()
        finally:
            os.close(fd)
        if self._made_folder and self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()

    def __enter__(self) -> LakeLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def lock_holder(folder: Path) -> LockHolder | None:
    """Who holds the lake lock of the local folder ``folder`` now; ``None`` when nobody does
    (no file, or a stale one). Takes nothing. (Any folder: :func:`pipelines.lake.locking.lock_holder`.)"""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            return _named_holder(fd) or LockHolder(pid=0, host="?", command="duet", since=time.time())
        return None  # nobody holds it: stale (our shared lock goes with the descriptor)
    finally:
        os.close(fd)


def _try_exclusive(fd: int) -> bool:
    """``flock`` ``fd`` exclusively without waiting: ``True`` when taken, ``False`` when another
    open file holds a lock on it.

    Raises:
        OSError: any other failure of ``flock``.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def _named_holder(fd: int) -> LockHolder | None:
    """The holder a locked file names, waiting a moment for one that has just taken it."""
    deadline = time.monotonic() + _NAMING_WAIT_S
    while True:
        holder = LockHolder.from_json(_read(fd))
        if holder is not None or time.monotonic() > deadline:
            return holder
        time.sleep(0.02)


def _read(fd: int) -> str:
    return os.pread(fd, 64 << 10, 0).decode(errors="replace")


def _same_file(fd: int, path: Path) -> bool:
    """``fd`` is still the file at ``path`` (not removed nor replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
