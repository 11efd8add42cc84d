"""The folder of a serving process's live row stores (docs/live-serving.md).

Each serving process claims a folder of its own below a *base* folder (``--live-dir`` of
``duet serve``, else ``$DUET_SERVING_LIVE_DIR``, else ``<state root>/serving-live``:
on disk, not in ``$TMPDIR``, which may be a tmpfs and would put the rows back in memory). It
holds an exclusive ``flock`` on the folder's ``lock`` file while it lives; the kernel drops
the lock when the process ends, however it ends. The stores are a cache of the view topics:
nothing in the folder is read again. So a claim first removes the folders below the base whose
lock nobody holds (a process that crashed or was killed before its shutdown removed its own),
and a process's shutdown (:meth:`LiveDir.release`) removes its folder. Replicas and test
processes may share one base: a folder is removed only when its owner is gone.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

__all__ = ["ENV", "LiveDir", "check_base", "claim", "default_base", "remove_stale"]

log = logging.getLogger(__name__)

#: environment variable naming the base folder (``duet serve --live-dir`` overrides it)
ENV = "DUET_SERVING_LIVE_DIR"
#: the lock file of a claimed folder
LOCK = "lock"
#: seconds a folder without a lock file is left alone (a process between its mkdtemp and its lock)
CLAIMING_S = 60.0


def default_base() -> Path:
    """``$DUET_SERVING_LIVE_DIR`` when set, else ``<state root>/serving-live``
    (``$DUET_STATE_DIR``, else ``<duet_home>/state``)."""
    from speed_layer.runtime.paths import state_root

    env = os.environ.get(ENV, "").strip()
    return Path(env).expanduser().resolve() if env else state_root() / "serving-live"


class LiveDir:
    """A claimed folder (:attr:`path`), locked until :meth:`release`."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._fd: int | None = lock_fd

    def release(self) -> None:
        """Delete the folder, then drop the lock (idempotent)."""
        if self._fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)
        self._fd = None


def _try_lock(lock: Path) -> int | None:
    """An fd holding ``lock``'s exclusive flock, ``None`` when another open file holds it.

    Raises:
        FileNotFoundError: no ``lock`` file.
    """
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def remove_stale(base: Path) -> list[Path]:
    """Remove the folders below ``base`` whose lock nobody holds (their process is gone), and
    those without a lock file made more than :data:`CLAIMING_S` ago; returns them."""
    removed = []
    for child in sorted(base.iterdir()) if base.is_dir() else []:
        if not child.is_dir():
            continue
        try:
            fd = _try_lock(child / LOCK)
        except FileNotFoundError:
            try:
                young = time.time() - child.stat().st_mtime < CLAIMING_S
            except FileNotFoundError:  # removed meanwhile by another process's claim
                continue
            if young:
                continue
            fd = None
        else:
            if fd is None:  # held: its process is alive
                continue
        shutil.rmtree(child, ignore_errors=True)
        if fd is not None:
            os.close(fd)
        removed.append(child)
    if removed:
        log.warning("serving: removed %d live store folder(s) left by a process that did not shut down: %s",
                    len(removed), ", ".join(str(p) for p in removed))
    return removed


def check_base(base: Path | str | None = None) -> Path:
    """Create ``base`` (default :func:`default_base`) if missing and check this process can
    make folders in it; returns it.

    Raises:
        OSError: it cannot be created or written (the message names it and the setting).
    """
    base = default_base() if base is None else Path(base)
    try:
        base.mkdir(parents=True, exist_ok=True)
        if not os.access(base, os.W_OK | os.X_OK):
            raise PermissionError(13, "permission denied")
    except OSError as exc:
        raise OSError(exc.errno, f"the live stores' folder {base} (--live-dir, ${ENV}) is not writable: "
                      f"{exc.strerror}") from exc
    return base


def claim(base: Path | str | None = None) -> LiveDir:
    """Remove the stale folders below ``base`` (default :func:`default_base`), then make and
    lock a new folder there for this process.

    Raises:
        OSError: ``base`` cannot be created or written (a clear message names it).
    """
    base = check_base(base)
    try:
        remove_stale(base)
        path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))
    except OSError as exc:
        raise OSError(exc.errno, f"the live stores' folder {base} (--live-dir, ${ENV}) is not writable: "
                      f"{exc.strerror}") from exc
    fd = _try_lock(_touch(path / LOCK))
    assert fd is not None  # a new file nobody else opened
    return LiveDir(path, fd)


def _touch(path: Path) -> Path:
    path.touch()
    return path
