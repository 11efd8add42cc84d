"""``GET /views/{view}/edge``: the fresh edge of a view, as of the request (the views page
polls it every second, :data:`POLL_MS`).

The edge is every window not closed at the batch watermark ``W`` of the served snapshot:
with ``key``, that key's merged rows (:meth:`ServedViews.page` from the first window that can
still be open at ``W``); without, the speed layer's current rows of every key
(:class:`~serving.views.live.LiveViews`) combined per window: the number of keys and the sum
of a numeric ``field`` of their values. The body carries ``W`` and the speed layer's stream
time (ms and ISO-8601 UTC). Of a tumbling or hopping view only the rows of the latest
:data:`MAX_EDGE_WINDOWS` windows are read (:meth:`LiveViews.latest_rows
<serving.views.live.LiveViews.latest_rows>`): a view whose batch watermark lags holds
millions of live rows, and the page asks every second.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from serving.api.app import ErrorResponse

from serving.api.times import ms_to_iso
from serving.views.model import ViewSpec
from serving.views.served import ServedViews

__all__ = ["POLL_MS", "edge_router", "edge_from_ms"]

#: how often (ms) the views page asks for the fresh edge
POLL_MS = 1_000
#: the most windows an edge lists (the latest ones)
MAX_EDGE_WINDOWS = 500


def edge_from_ms(spec: ViewSpec, watermark_ms: int | None) -> int | None:
    """The earliest time (ms) a window open at ``watermark_ms`` can reach: a window whose end is
    before it is closed (``None``: no watermark, every window is open)."""
    if watermark_ms is None or not spec.windowed:
        return None
    return watermark_ms - spec.grace_ms - (spec.gap_ms or 0)  # open: end > it (a session: end >= it)


def _number(value: str | None, field: str) -> float | None:
    try:
        doc = json.loads(value) if value is not None else None
    except json.JSONDecodeError:
        return None
    v = doc.get(field) if isinstance(doc, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class EdgeRow(BaseModel):
    """A window of the fresh edge (ms)."""

    window_start: int | None
    window_end: int | None
    value: Any = Field(description="with key: the row's value (JSON text); without: the sum of the field")
    keys: int | None = Field(None, description="without key: the number of keys with the window")
    source: str = Field(description="the layer the row came from")


class EdgeResponse(BaseModel):
    """The fresh edge of a view as of the request."""

    view: str
    key: str | None
    field: str | None = Field(description="without key: the value field summed per window")
    version: int = Field(description="the Delta version of the served snapshot")
    batch_watermark_ms: int | None
    batch_watermark: str | None
    speed_stream_time_ms: int | None = Field(description="the largest record timestamp of the view topic")
    speed_stream_time: str | None
    live: bool = Field(description="whether the view topic has been read to its end once")
    rows: list[EdgeRow]


_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "unknown view or key"},
    422: {"model": ErrorResponse, "description": "invalid parameter"},
}


def edge_router(served: ServedViews) -> APIRouter:
    """The ``/views/{view}/edge`` route over ``served``."""
    router = APIRouter(tags=["views"])

    @router.get("/views/{view}/edge", response_model=EdgeResponse, responses=_ERRORS)
    def edge(view: str, key: str | None = Query(None, description="one key (default: every key combined)"),
             field: str = Query("count", description="without key: the numeric value field summed per window"),
             ) -> dict[str, Any]:
        """The fresh edge of ``view`` (windows not closed at the batch watermark), with the
        batch watermark and the speed layer's stream time. 404: unknown view or key."""
        snap = served.index.snapshot(view)
        w = snap.watermark_ms
        state = served.speed_state(view)
        rows: list[dict[str, Any]]
        if key is not None:
            page = served.page(view, key, from_ms=edge_from_ms(snap.spec, w))
            w, state = page.batch_watermark_ms, page.speed
            rows = [{"window_start": r["window_start"], "window_end": r["window_end"], "value": r["value"],
                     "source": r["source"]} for r in page.rows[-MAX_EDGE_WINDOWS:]]
        else:
            windows: dict[tuple[int | None, int | None], list[float]] = {}
            if served.live is None:
                live = []
            elif snap.spec.window_kind in ("tumbling", "hopping"):  # window order is end order
                live = served.live.latest_rows(view, MAX_EDGE_WINDOWS)
            else:
                live = served.live.view_rows(view)
            for r in live:
                if r.window_end is not None and snap.spec.is_closed(r.window_end, w):
                    continue
                if not snap.spec.windowed and w is not None and r.timestamp <= w:
                    continue
                acc = windows.setdefault((r.window_start, r.window_end), [0, 0.0])
                acc[0] += 1
                acc[1] += _number(r.value, field) or 0.0
            ordered = sorted(windows.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0))[-MAX_EDGE_WINDOWS:]
            rows = [{"window_start": ws, "window_end": we, "keys": int(n), "value": total, "source": "speed"}
                    for (ws, we), (n, total) in ordered]
        stream_ms = None if state is None else state.stream_time_ms
        return {"view": view, "key": key, "field": field if key is None else None, "version": snap.version,
                "batch_watermark_ms": w, "batch_watermark": ms_to_iso(w),
                "speed_stream_time_ms": stream_ms, "speed_stream_time": ms_to_iso(stream_ms),
                "live": state is not None and state.caught_up, "rows": rows}

    return router

