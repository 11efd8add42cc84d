"""An in-memory read index over the published views ``<lake>/serving/<view>``.

Each view listed in ``<lake>/serving/_views.json`` whose Delta table exists is loaded (one
pinned Delta version) into a pandas frame sorted by ``key, window_start`` with a per-key row
range. The index checks the Delta versions at most every ``refresh_interval_s`` seconds (on
access) and swaps a reloaded view in atomically: a query sees either the old or the new
version of a view, never a mix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from serving.errors import UnknownKeyError, UnknownViewError
from serving.views.frames import normalize_view_frame
from serving.views.model import ViewSpec, load_catalogue

__all__ = ["ViewIndex", "ViewSnapshot"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ViewSnapshot:
    """One loaded version of a view (immutable once built).

    Attributes:
        spec: the view description from the catalogue.
        version: the Delta version loaded.
        frame: rows sorted by ``key, window_start, window_end`` (served columns).
        ranges: ``key -> (first row, end row)`` positions in ``frame``.
        loaded_at: wall-clock time of the load (epoch seconds).
    """

    spec: ViewSpec
    version: int
    frame: pd.DataFrame
    ranges: dict[str, tuple[int, int]] = field(repr=False)
    loaded_at: float

    @property
    def rows(self) -> int:
        return len(self.frame)

    @classmethod
    def load(cls, spec: ViewSpec, path: Path, version: int) -> ViewSnapshot:
        """Load ``version`` of the Delta table at ``path``."""
        from deltalake import DeltaTable

        table = DeltaTable(str(path), version=version).to_pyarrow_table()
        df = table.to_pandas()
        if "source" not in df.columns:
            df = df.assign(source=None)
        df = normalize_view_frame(df, with_source=True)
        df = df.sort_values(["key", "window_start", "window_end"], kind="stable",
                            na_position="first").reset_index(drop=True)
        keys = df["key"].to_numpy(dtype=object)
        if len(keys):
            change = np.ones(len(keys), dtype=bool)
            change[1:] = keys[1:] != keys[:-1]
            starts = np.flatnonzero(change)
            ends = np.append(starts[1:], len(keys))
            ranges = {keys[s]: (int(s), int(e)) for s, e in zip(starts, ends)}
        else:
            ranges = {}
        return cls(spec=spec, version=version, frame=df, ranges=ranges, loaded_at=time.time())


def _int_or_none(v: Any) -> int | None:
    return None if v is None or v is pd.NA else int(v)


class ViewIndex:
    """Read index over ``<lake>/serving``.

    Args:
        lake: the lake root.
        refresh_interval_s: minimum seconds between two checks of the Delta versions
            (``0`` checks on every access).
        clock: monotonic clock in seconds (injectable for tests).

    The constructor loads every view once. Methods raise :class:`UnknownViewError` for a view
    not in the index and :class:`UnknownKeyError` for a key without rows.
    """

    def __init__(
        self,
        lake: Path | str,
        refresh_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lake = Path(lake)
        self.refresh_interval_s = refresh_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshots: dict[str, ViewSnapshot] = {}
        self._last_check: float | None = None
        self.refresh(force=True)

    # -- loading ---------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> bool:
        """Reload views whose Delta version (or catalogue entry) changed.

        Without ``force`` this is a no-op when the last check is younger than
        ``refresh_interval_s``. A view whose table cannot be read keeps its previous snapshot
        (the error is logged); views removed from the catalogue disappear.

        Returns:
            ``True`` if the set of snapshots changed.
        """
        if not force and self._check_is_fresh():
            return False
        # Readers never wait for a reload: while another thread reloads, they keep using the
        # current snapshots. A forced refresh waits for the running one.
        if not self._lock.acquire(blocking=force):
            return False
        try:
            if not force and self._check_is_fresh():
                return False
            self._last_check = self._clock()
            from deltalake import DeltaTable

            old = self._snapshots
            try:
                catalogue = load_catalogue(self.lake)
            except Exception:  # keep serving the previous state
                log.exception("cannot read the serving catalogue of %s", self.lake)
                return False
            new: dict[str, ViewSnapshot] = {}
            for name, spec in catalogue.items():
                path = self.lake / "serving" / name
                previous = old.get(name)
                try:
                    if not (path / "_delta_log").is_dir():
                        continue
                    version = DeltaTable(str(path)).version()
                    if previous is not None and previous.version == version and previous.spec == spec:
                        new[name] = previous
                    else:
                        new[name] = ViewSnapshot.load(spec, path, version)
                        log.info("loaded view %s version %d (%d rows)", name, version,
                                 new[name].rows)
                except Exception:
                    log.exception("cannot load view %s from %s", name, path)
                    if previous is not None:
                        new[name] = previous
            changed = new.keys() != old.keys() or any(new[k] is not old[k] for k in new)
            self._snapshots = new  # atomic swap
            return changed
        finally:
            self._lock.release()

    def _check_is_fresh(self) -> bool:
        last = self._last_check
        return last is not None and self._clock() - last < self.refresh_interval_s

    def _maybe_refresh(self) -> dict[str, ViewSnapshot]:
        self.refresh()
        return self._snapshots

    def snapshot(self, view: str) -> ViewSnapshot:
        """The current snapshot of ``view``.

        Raises:
            UnknownViewError: if the view is not served.
        """
        snaps = self._maybe_refresh()
        try:
            return snaps[view]
        except KeyError:
            raise UnknownViewError(view, snaps.keys()) from None

    # -- queries ---------------------------------------------------------------------------
    def views(self) -> list[str]:
        """Sorted names of the served views."""
        return sorted(self._maybe_refresh())

    def spec(self, view: str) -> ViewSpec:
        """The spec of ``view``. Raises :class:`UnknownViewError`."""
        return self.snapshot(view).spec

    def version(self, view: str) -> int:
        """The loaded Delta version of ``view``. Raises :class:`UnknownViewError`."""
        return self.snapshot(view).version

    def row_count(self, view: str) -> int:
        """Number of rows of ``view``. Raises :class:`UnknownViewError`."""
        return self.snapshot(view).rows

    def keys(self, view: str, limit: int | None = None, offset: int = 0) -> list[str]:
        """Sorted keys of ``view`` (``keys[offset:offset+limit]``).

        Raises:
            UnknownViewError: if the view is not served.
        """
        keys = list(self.snapshot(view).ranges)  # insertion order == sorted order
        end = None if limit is None else offset + limit
        return keys[offset:end]

    def key_count(self, view: str) -> int:
        """Number of distinct keys of ``view``. Raises :class:`UnknownViewError`."""
        return len(self.snapshot(view).ranges)

    def query(
        self,
        view: str,
        key: str,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of ``key`` in ``view`` whose window overlaps ``[from_ms, to_ms]`` (ms, inclusive;
        ``None`` = unbounded), ordered by ``window_start``.

        A time window ``[start, end)`` overlaps when ``start <= to_ms and end > from_ms``; a
        session ``[start, end]`` when ``start <= to_ms and end >= from_ms``. For a
        non-windowed view the bounds are ignored (a table has one current row per key).

        Returns:
            Dicts ``{"key", "window_start", "window_end", "value" (JSON text), "timestamp",
            "source"}`` (times in epoch ms, windows ``None`` when not windowed).

        Raises:
            UnknownViewError: if the view is not served.
            UnknownKeyError: if the key has no row in the view (regardless of the bounds).
        """
        snap = self.snapshot(view)
        bounds = snap.ranges.get(key)
        if bounds is None:
            raise UnknownKeyError(view, key)
        rows = snap.frame.iloc[bounds[0]:bounds[1]]
        if snap.spec.windowed:
            if to_ms is not None:
                rows = rows[rows["window_start"] <= to_ms]
            if from_ms is not None:
                if snap.spec.window_kind == "session":
                    rows = rows[rows["window_end"] >= from_ms]
                else:
                    rows = rows[rows["window_end"] > from_ms]
        return [
            {
                "key": r.key,
                "window_start": _int_or_none(r.window_start),
                "window_end": _int_or_none(r.window_end),
                "value": r.value,
                "timestamp": int(r.timestamp),
                "source": r.source,
            }
            for r in rows.itertuples(index=False)
        ]
