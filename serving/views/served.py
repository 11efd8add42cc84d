"""The served answer: the published batch snapshot merged, per request, with the speed layer's
current rows (lambda architecture's query-time merge).

Each request takes one immutable :class:`~serving.views.index.ViewSnapshot` (a Delta version
of ``<lake>/serving/<view>`` and the batch watermark ``W`` it was merged at) and the live rows
of the key (:class:`~serving.views.live.LiveViews`), and serves every window from exactly one
layer, with the rules of :func:`serving.views.merge.merge_view` at ``W``:

* time windows, identity ``(key, window_start)``: a window closed at ``W`` from the snapshot
  (its batch rows); an open window from the live table when it holds it, else from the
  snapshot (the speed rows of the last publish, or a batch row);
* sessions: the snapshot's closed sessions; the live open sessions that overlap none of them;
  the snapshot's open sessions that overlap no live session kept;
* tables: the live row when its timestamp is after ``W``, else the snapshot's.

A new snapshot (a recompute published) swaps in atomically: a request sees the old snapshot
with the old ``W`` or the new one with the new ``W``, never a mix; the live rows a request
needs (open at its ``W``) stay in the live table for
:data:`~serving.views.live.PRUNE_DELAY_S` after a newer snapshot appears.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.errors import UnknownKeyError
from serving.views.index import NULL_MS, RowPosition, ViewIndex, ViewSnapshot
from serving.views.live import LiveRow, LiveState, LiveViews
from serving.views.model import ViewSpec

__all__ = ["MergedPage", "ServedViews", "query_live"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergedPage:
    """A page of a key's merged rows (:meth:`ServedViews.page`).

    Attributes:
        rows: dicts ``{"key", "window_start", "window_end", "value" (JSON text), "timestamp",
            "source"}`` ordered by window start then end (ms).
        next: where the next page starts, ``None`` on the last page.
        version: the Delta version of the snapshot answered from.
        batch_watermark_ms: the batch watermark of that snapshot (``None``: no batch).
        speed: the live table's state (``None``: serving without a broker, snapshot only).
    """

    rows: list[dict[str, Any]]
    next: RowPosition | None
    version: int
    batch_watermark_ms: int | None
    speed: LiveState | None


def _bounds(row: dict[str, Any]) -> tuple[int, int]:
    ws, we = row["window_start"], row["window_end"]
    return (NULL_MS if ws is None else ws, NULL_MS if we is None else we)


def _overlaps(spec: ViewSpec, row: LiveRow, from_ms: int | None, to_ms: int | None) -> bool:
    if not spec.windowed or row.window_start is None or row.window_end is None:
        return True
    if to_ms is not None and row.window_start > to_ms:
        return False
    if from_ms is None:
        return True
    return row.window_end >= from_ms if spec.window_kind == "session" else row.window_end > from_ms


def _as_dict(row: LiveRow) -> dict[str, Any]:
    return {"key": row.key, "window_start": row.window_start, "window_end": row.window_end,
            "value": row.value, "timestamp": row.timestamp, "source": "speed"}


def _is_closed(spec: ViewSpec, row: dict[str, Any] | LiveRow, watermark_ms: int | None) -> bool:
    end = row["window_end"] if isinstance(row, dict) else row.window_end
    return end is not None and spec.is_closed(end, watermark_ms)


def merge_key_rows(spec: ViewSpec, snapshot_rows: list[dict[str, Any]], live: list[LiveRow],
                   watermark_ms: int | None) -> list[dict[str, Any]]:
    """One key's rows: ``snapshot_rows`` (served rows of a snapshot merged at
    ``watermark_ms``) merged with the ``live`` rows (rules in the module docstring), ordered by
    window start then end."""
    w = watermark_ms
    if not spec.windowed:
        fresh = [r for r in live if w is None or r.timestamp > w]
        return [_as_dict(fresh[0])] if fresh else snapshot_rows
    fresh = [r for r in live if not _is_closed(spec, r, w)]
    if not fresh:
        return snapshot_rows
    closed = [r for r in snapshot_rows if _is_closed(spec, r, w)]
    opened = [r for r in snapshot_rows if not _is_closed(spec, r, w)]
    if spec.window_kind == "session":
        fresh = [s for s in fresh if not any(s.window_start <= c["window_end"] and c["window_start"] <= s.window_end
                                             for c in closed)]
        opened = [o for o in opened if not any(s.window_start <= o["window_end"] and o["window_start"] <= s.window_end
                                               for s in fresh)]
    else:
        starts = {r.window_start for r in fresh}
        opened = [o for o in opened if o["window_start"] not in starts]
    out = closed + opened + [_as_dict(r) for r in fresh]
    out.sort(key=_bounds)
    return out


class ServedViews:
    """The views as served: a :class:`ViewIndex` over the published snapshots, merged per
    request with a :class:`LiveViews` when one is given (else the snapshots alone, as before
    the live merge). Read methods raise :class:`~serving.errors.UnknownViewError` for a view
    not served."""

    def __init__(self, index: ViewIndex, live: LiveViews | None = None) -> None:
        self.index = index
        self.live = live

    def served(self) -> dict[str, tuple[ViewSpec, int | None]]:
        """``{view: (spec, batch watermark ms)}`` of the snapshots loaded (what
        :class:`LiveViews` follows; it does not load new versions itself: requests do)."""
        return {name: (snap.spec, snap.watermark_ms) for name, snap in self.index.loaded().items()}

    def speed_state(self, view: str) -> LiveState | None:
        """The live table's state of ``view``; ``None`` without a live table."""
        return None if self.live is None else self.live.state(view)

    def keys(self, view: str) -> list[str]:
        """The sorted keys of ``view``: the snapshot's and the live table's."""
        snap = self.index.snapshot(view)
        keys = list(snap.ranges)
        if self.live is not None:
            extra = [k for k in self.live.keys(view) if k not in snap.ranges]
            if extra:
                keys = sorted(keys + extra)
        return keys

    def key_snapshot(self, view: str, key: str) -> ViewSnapshot:
        """Every merged row of ``key`` as a one-key :class:`ViewSnapshot` (the views page
        charts a key from it), with the version and watermark answered from.

        Raises:
            UnknownViewError, UnknownKeyError: as :meth:`page`.
        """
        import pandas as pd

        page = self.page(view, key)
        frame = pd.DataFrame(page.rows, columns=["key", "window_start", "window_end", "value", "timestamp", "source"])
        return ViewSnapshot.from_frame(self.index.snapshot(view).spec, page.version, frame, page.batch_watermark_ms)

    def page(self, view: str, key: str, from_ms: int | None = None, to_ms: int | None = None,
             after: RowPosition | None = None, limit: int | None = None) -> MergedPage:
        """The merged rows of ``key`` whose window overlaps ``[from_ms, to_ms]`` (as
        :meth:`ViewIndex.query`), after ``after``, at most ``limit``; the pages of a key,
        each started at the previous one's ``next``, concatenate to all of them while the
        snapshot stays the same.

        Raises:
            UnknownViewError: if the view is not served.
            UnknownKeyError: if neither the snapshot nor the live table has a row of the key.
        """
        snap = self.index.snapshot(view)  # one immutable snapshot for the whole request
        spec, w = snap.spec, snap.watermark_ms
        live_rows = [] if self.live is None else self.live.rows(view, key)
        speed = self.speed_state(view)
        if key not in snap.ranges and not live_rows:
            raise UnknownKeyError(view, key)
        fresh = [r for r in live_rows if _overlaps(spec, r, from_ms, to_ms)]
        if after is not None:  # a window's bounds are its identity in the merged rows: no ties
            fresh = [r for r in fresh if _bounds(_as_dict(r)) > _cursor_bounds(after)]
        if not fresh:  # nothing live in range: the snapshot's page as it is
            if key not in snap.ranges:
                return MergedPage([], None, snap.version, w, speed)
            page = self.index.page_of(snap, key, from_ms, to_ms, after, limit)
            return MergedPage(page.rows, page.next, snap.version, w, speed)
        # a live row replaces at most one snapshot row of a time window or a table; a session
        # may overlap any number of them: read them all
        want = None if limit is None or spec.window_kind == "session" else limit + len(fresh) + 1
        base = [] if key not in snap.ranges else self.index.page_of(snap, key, from_ms, to_ms, after, want).rows
        merged = merge_key_rows(spec, base, fresh, w)
        more = limit is not None and len(merged) > limit
        rows = merged[:limit] if limit is not None else merged
        nxt = None
        if more:
            bounds = _bounds(rows[-1])
            seen = sum(1 for r in rows if _bounds(r) == bounds)
            if after is not None and _cursor_bounds(after) == bounds:
                seen += after.seen
            nxt = RowPosition(rows[-1]["window_start"], rows[-1]["window_end"], seen)
        return MergedPage(rows, nxt, snap.version, w, speed)


def _cursor_bounds(after: RowPosition) -> tuple[int, int]:
    return (NULL_MS if after.window_start is None else after.window_start,
            NULL_MS if after.window_end is None else after.window_end)


def query_live(lake: Path | str, bootstrap: str | None, view: str, key: str, from_ms: int | None = None,
               to_ms: int | None = None, timeout_s: float = 30.0) -> MergedPage:
    """One merged answer (``duet query``): every row of ``key`` in ``view`` overlapping
    ``[from_ms, to_ms]``, the published snapshot merged with the view topic read to its end
    (``bootstrap`` ``None``: the snapshot alone). When the topic is not read to its end within
    ``timeout_s`` seconds, or does not exist, the answer holds what was read
    (``speed.caught_up`` false; logged).

    Raises:
        UnknownViewError, UnknownKeyError: as :meth:`ServedViews.page`.
    """
    served = ServedViews(ViewIndex(lake, refresh_interval_s=0))
    served.index.snapshot(view)  # an unknown view fails before any broker is asked
    if bootstrap is None:
        return served.page(view, key, from_ms, to_ms)
    with LiveViews(bootstrap, served.served) as live:
        served.live = live
        if not live.wait_caught_up(timeout_s, [view]):
            log.warning("the view topic %s was not read to its end in %.0f s (or does not exist on %s): the answer "
                        "holds what was read", view, timeout_s, bootstrap)
        return served.page(view, key, from_ms, to_ms)
