"""An in-memory read index over the published views ``<lake>/serving/<view>``.

Each view listed in ``<lake>/serving/_views.json`` whose Delta table exists is loaded (one
pinned Delta version) into a pandas frame sorted by ``key, window_start, window_end`` with a
per-key row range. :meth:`ViewIndex.page` reads a page of a key's rows by binary search on
the window bounds (keyset paging: a page costs its own rows, not the key's). The index
checks the Delta versions at most every ``refresh_interval_s`` seconds (on access) and swaps
a reloaded view in atomically: a query sees either the old or the new version of a view,
never a mix.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from batch_layer.delta.io import join_location, table_exists
from batch_layer.delta.layout import LakeLayout
from batch_layer.delta.storage import delta_uri, is_object_store, read_text, storage_options
from serving.errors import ServingError, UnknownKeyError, UnknownViewError
from serving.views.batch import read_batch_watermark
from serving.views.frames import normalize_view_frame
from serving.views.model import ViewSpec, load_catalogue

__all__ = ["KeyPage", "RowPosition", "ViewIndex", "ViewSnapshot"]

log = logging.getLogger(__name__)

#: a null window bound in :attr:`ViewSnapshot.starts` / ``ends`` (sorts first, as the frame's nulls)
NULL_MS = int(np.iinfo(np.int64).min)


@dataclass(frozen=True)
class ViewSnapshot:
    """One loaded version of a view (immutable once built).

    Attributes:
        spec: the view description from the catalogue.
        version: the Delta version loaded.
        frame: rows sorted by ``key, window_start, window_end`` (served columns).
        ranges: ``key -> (first row, end row)`` positions in ``frame``.
        loaded_at: wall-clock time of the load (epoch seconds).
        starts: ``frame.window_start`` as int64, a null as ``NULL_MS`` (sorted within a key).
        ends: ``frame.window_end`` likewise.
        watermark_ms: the batch watermark (epoch ms; ``None``: no batch) this version was
            merged at, from its Delta commit info (:data:`serving.views.publish.WATERMARK_KEY`);
            for a version written without it, ``<lake>/views/_batch.json``'s when loaded.
    """

    spec: ViewSpec
    version: int
    frame: pd.DataFrame
    ranges: dict[str, tuple[int, int]] = field(repr=False)
    loaded_at: float
    starts: np.ndarray = field(repr=False)
    ends: np.ndarray = field(repr=False)
    watermark_ms: int | None = None

    @property
    def rows(self) -> int:
        return len(self.frame)

    @classmethod
    def load(cls, spec: ViewSpec, path: Path | str, version: int,
             fallback_watermark: Callable[[], int | None] = lambda: None) -> ViewSnapshot:
        """Load ``version`` of the Delta table at ``path``; its watermark from the commit info,
        else ``fallback_watermark()``."""
        from deltalake import DeltaTable

        recorded, watermark_ms = _commit_watermark(path, version)
        if not recorded:
            watermark_ms = fallback_watermark()
        table = DeltaTable(delta_uri(path), version=version, storage_options=storage_options(path)).to_pyarrow_table()
        return cls.from_frame(spec, version, table.to_pandas(), watermark_ms)

    @classmethod
    def from_frame(cls, spec: ViewSpec, version: int, df: pd.DataFrame, watermark_ms: int | None) -> ViewSnapshot:
        """A snapshot of the served rows ``df`` (served columns; ``source`` may be missing)."""
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
        return cls(spec=spec, version=version, frame=df, ranges=ranges, loaded_at=time.time(),
                   starts=df["window_start"].to_numpy(dtype=np.int64, na_value=NULL_MS),
                   ends=df["window_end"].to_numpy(dtype=np.int64, na_value=NULL_MS),
                   watermark_ms=watermark_ms)


def _commit_watermark(path: Path | str, version: int) -> tuple[bool, int | None]:
    """``(recorded, watermark_ms)`` from the commit info of ``version`` of the Delta table at
    ``path`` (its ``_delta_log/<version>.json``); ``(False, None)`` when the commit does not
    record one (written before the watermark was recorded, or its log file cleaned up).

    Raises:
        ServingError: if the recorded watermark is not an integer or null.
    """
    from serving.views.publish import WATERMARK_KEY

    log_file = join_location(path, "_delta_log", f"{version:020d}.json")
    text = read_text(log_file)
    if text is None:
        return False, None
    lines = text.splitlines()
    for line in lines:
        info = json.loads(line).get("commitInfo") if line.strip() else None
        if info is not None and WATERMARK_KEY in info:
            value = info[WATERMARK_KEY]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ServingError(f"{log_file}: {WATERMARK_KEY} is {value!r}, not epoch ms")
            return True, value
    return False, None


def _int_or_none(v: Any) -> int | None:
    return None if v is None or v is pd.NA else int(v)


@dataclass(frozen=True)
class RowPosition:
    """Where a page of a key's rows ended: the window bounds of its last row (``None``: null,
    a table) and ``seen``, how many rows with exactly those bounds were returned up to there.
    The next page starts after them (keyset paging: rows added or removed elsewhere in the
    key neither shift nor repeat the ones after it)."""

    window_start: int | None
    window_end: int | None
    seen: int = 1


@dataclass(frozen=True)
class KeyPage:
    """A page of a key's rows (:meth:`ViewIndex.page`).

    Attributes:
        rows: the rows, in the order of :meth:`ViewIndex.query`.
        next: where the next page starts; ``None`` when this page is the last.
    """

    rows: list[dict[str, Any]]
    next: RowPosition | None


def _ms(v: int | None) -> int:
    return NULL_MS if v is None else v


def _select(snap: ViewSnapshot, lo: int, hi: int, from_ms: int | None, to_ms: int | None,
            after: RowPosition | None, limit: int | None) -> tuple[np.ndarray, bool]:
    """Positions (in ``snap.frame``) of the rows of the key range ``[lo, hi)`` that overlap
    ``[from_ms, to_ms]``, after ``after``, at most ``limit``; and whether more follow.

    Within a key the rows are sorted by ``(window_start, window_end)``, so the ``to`` bound
    (``window_start <= to``) and the cursor are binary searches. Every row starting after
    ``from`` passes the ``from`` bound (a window ends at or after its start); only those
    starting at or before it are tested one by one (numpy), and only from the cursor on.
    """
    starts, ends = snap.starts[lo:hi], snap.ends[lo:hi]
    begin, end = 0, hi - lo
    windowed = snap.spec.windowed
    if windowed and to_ms is not None:
        end = int(np.searchsorted(starts, to_ms, side="right"))
    if after is not None:
        first, last = _ties(starts, ends, _ms(after.window_start), _ms(after.window_end))
        begin = min(first + after.seen, last)
    if windowed and from_ms is not None:
        sure = max(begin, min(end, int(np.searchsorted(starts, from_ms, side="right"))))
        head = ends[begin:sure]
        keep = head >= from_ms if snap.spec.window_kind == "session" else head > from_ms
        tested = begin + np.flatnonzero(keep)
    else:
        sure, tested = begin, np.empty(0, dtype=np.int64)
    want = None if limit is None else limit + 1
    if want is not None and len(tested) >= want:
        picked = tested[:want]
    else:
        stop = end if want is None else min(end, sure + want - len(tested))
        picked = np.concatenate([tested, np.arange(sure, max(sure, stop), dtype=np.int64)])
    more = limit is not None and len(picked) > limit
    return lo + picked[:limit], more


def _ties(starts: np.ndarray, ends: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """``[first, last)``: the rows with bounds ``(start, end)`` (empty: where they would be)."""
    a = int(np.searchsorted(starts, start, side="left"))
    b = int(np.searchsorted(starts, start, side="right"))
    return (a + int(np.searchsorted(ends[a:b], end, side="left")),
            a + int(np.searchsorted(ends[a:b], end, side="right")))


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
        self.lake = lake if is_object_store(lake) else Path(lake)
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
                path = LakeLayout(self.lake).serving_view(name)
                previous = old.get(name)
                try:
                    if not (table_exists(path) if is_object_store(path) else (path / "_delta_log").is_dir()):
                        continue
                    version = DeltaTable(delta_uri(path), storage_options=storage_options(path)).version()
                    if previous is not None and previous.version == version and previous.spec == spec:
                        new[name] = previous
                    else:
                        new[name] = ViewSnapshot.load(spec, path, version,
                                                      lambda: read_batch_watermark(self.lake))
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

    def loaded(self) -> dict[str, ViewSnapshot]:
        """The snapshots as loaded now, without looking for new versions (for a thread that
        must not spend its time loading one: requests do that)."""
        return dict(self._snapshots)

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
        """Every row of ``key`` in ``view`` whose window overlaps ``[from_ms, to_ms]`` (ms,
        inclusive; ``None`` = unbounded), ordered by ``window_start`` then ``window_end``.

        A time window ``[start, end)`` overlaps when ``start <= to_ms and end > from_ms``; a
        session ``[start, end]`` when ``start <= to_ms and end >= from_ms``. For a
        non-windowed view the bounds are ignored (a table has one current row per key).
        :meth:`page` reads the same rows a page at a time.

        Returns:
            Dicts ``{"key", "window_start", "window_end", "value" (JSON text), "timestamp",
            "source"}`` (times in epoch ms, windows ``None`` when not windowed).

        Raises:
            UnknownViewError: if the view is not served.
            UnknownKeyError: if the key has no row in the view (regardless of the bounds).
        """
        return self.page(view, key, from_ms, to_ms).rows

    def page(
        self,
        view: str,
        key: str,
        from_ms: int | None = None,
        to_ms: int | None = None,
        after: RowPosition | None = None,
        limit: int | None = None,
    ) -> KeyPage:
        """The rows of :meth:`query` that come after ``after`` (``None``: from the first),
        at most ``limit`` of them (``None``: all).

        The pages of a key, each started at the previous one's ``next``, concatenate to
        :meth:`query`'s rows, none skipped or repeated, as long as the view's version does
        not change in between (across a new version a page continues after the same window
        bounds). A page costs binary searches plus its own rows (with ``from_ms``, a numpy
        test of the key's windows starting before it, from ``after`` on).

        Raises:
            UnknownViewError: if the view is not served.
            UnknownKeyError: if the key has no row in the view (regardless of the bounds).
        """
        return self.page_of(self.snapshot(view), key, from_ms, to_ms, after, limit)

    @staticmethod
    def page_of(snap: ViewSnapshot, key: str, from_ms: int | None = None, to_ms: int | None = None,
                after: RowPosition | None = None, limit: int | None = None) -> KeyPage:
        """:meth:`page` on a snapshot already taken (one snapshot for a whole request).

        Raises:
            UnknownKeyError: if the key has no row in the snapshot.
        """
        bounds = snap.ranges.get(key)
        if bounds is None:
            raise UnknownKeyError(snap.spec.name, key)
        picked, more = _select(snap, bounds[0], bounds[1], from_ms, to_ms, after, limit)
        if len(picked) and picked[-1] - picked[0] == len(picked) - 1:
            rows = snap.frame.iloc[int(picked[0]):int(picked[-1]) + 1]  # contiguous: a slice, no copy
        else:
            rows = snap.frame.iloc[picked]
        out = [
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
        nxt = None
        if more:
            last = int(picked[-1])
            start, end = int(snap.starts[last]), int(snap.ends[last])
            first, _ = _ties(snap.starts[bounds[0]:bounds[1]], snap.ends[bounds[0]:bounds[1]], start, end)
            nxt = RowPosition(None if start == NULL_MS else start, None if end == NULL_MS else end,
                              seen=last - bounds[0] - first + 1)
        return KeyPage(rows=out, next=nxt)
