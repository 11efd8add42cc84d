"""The lake lock of any pipeline folder: ``flock`` on local disk (:mod:`pipelines.lake.lock`),
a lease object on an object store (:mod:`pipelines.lake.lease`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from batch_layer.delta.storage import is_object_store
from pipelines.lake.lease import LeaseLock, lease_holder
from pipelines.lake.lock import LakeLock, LockHolder
from pipelines.lake.lock import lock_holder as local_holder

__all__ = ["open_lake_lock", "lock_holder"]


def open_lake_lock(folder: Path | str, command: str,
                   warn: Callable[[str], None] | None = None) -> LakeLock | LeaseLock:
    """The lake lock of the pipeline folder ``folder`` (not taken yet): a :class:`LakeLock`
    for a local folder, a :class:`LeaseLock` for ``s3://...``; both are context managers
    raising :class:`~pipelines.lake.lock.LakeBusy` (one line naming the holder) when another
    writer holds the folder."""
    if is_object_store(folder):
        return LeaseLock(str(folder), command, warn=warn)
    return LakeLock(Path(folder), command, warn=warn)


def lock_holder(folder: Path | str) -> LockHolder | None:
    """Who holds the lake lock of ``folder`` (local, or ``s3://...``: its lease) now; ``None``
    when nobody does. Takes nothing."""
    if is_object_store(folder):
        return lease_holder(str(folder))
    return local_holder(Path(folder))
