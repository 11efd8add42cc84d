"""HTML pages of the serving app: what a person reads instead of JSON.

* ``GET /ui``: every view with its size and check status, and the batch watermark.
* ``GET /ui/views/{view}?key=&field=&agg=&from=&to=``: one view as a Plotly chart, the batch
  part and the speed part in two colours, the speed layer's region shaded, the batch
  watermark as a dashed line, and the view's Great Expectations results. What is charted
  depends on the view's window kind:

  - tumbling / hopping windows: ``field`` per window, summed over keys (or one ``key``);
    beyond :data:`MAX_POINTS` points, ``agg`` (sum / mean / max / min) per hour, day, week...
    (the bucket is named on the page), and a second chart of the fresh edge (the speed part
    and the :data:`EDGE_WINDOWS` windows before it) at full resolution;
  - session windows: sessions started per bucket and their mean duration (``field`` charts a
    value field per bucket instead);
  - tables (no window): the :data:`TOP_N` keys with the largest ``field`` as bars (with no
    numeric field, the most recently updated rows as a table).

  ``from`` / ``to`` (ISO-8601, naive = UTC, or epoch ms, as the JSON API) keep the windows
  starting in ``[from, to]``; the page offers presets relative to the view's last window (last
  day, week, month, all, the speed part). The key box searches the keys on the server
  (``GET /views/{view}/keys?q=``) instead of listing thousands.
* ``GET /ui/static/plotly.min.js``: Plotly's JavaScript, served from the ``plotly`` package
  (no CDN, no Node build step).

Errors: an unknown view or key gets a 404 page, an unknown field or aggregate or ``from``
after ``to`` a 400 page, a malformed time a 422 page; each names what exists or is accepted.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import numpy as np
import pandas as pd
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from serving.api.charts import series_figure, sessions_figure, top_keys_figure
from serving.api.edge import POLL_MS
from serving.api.keysearch import search_keys
from serving.api.times import ms_to_iso, parse_time_ms
from serving.errors import InvalidTimeError, ServingError, UnknownKeyError, UnknownViewError
from serving.quality.suite import QualityResult, load_results
from serving.views.batch import read_batch_watermark
from serving.views.index import ViewIndex, ViewSnapshot
from serving.views.served import ServedViews
from serving.views.series import (
    AGGREGATES,
    Series,
    UnknownFieldError,
    field_values,
    numeric_fields,
    resolve_field,
    session_series,
    top_keys,
    view_series,
)

__all__ = ["pages_router", "MAX_POINTS"]

log = logging.getLogger(__name__)

#: The most points a chart draws (all sources); beyond, the series is bucketed.
MAX_POINTS = 1000
#: Bars of a table view's chart.
TOP_N = 20
#: Keys the key box lists under it (the search returns as many).
KEY_RESULTS = 20
#: Windows before the first speed-layer window in the "fresh edge" chart.
EDGE_WINDOWS = 48
#: The session view's default chart (not a value field).
SESSIONS = "sessions"
_DAY = 86_400_000
#: Range presets: (id, label, length in ms), each ending at the view's last window.
PRESETS = (("day", "last day", _DAY), ("week", "last week", 7 * _DAY), ("month", "last month", 30 * _DAY))


@functools.cache
def _templates() -> Any:
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("serving.api", "templates"),
                              autoescape=jinja2.select_autoescape(["html"]))


@functools.cache
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_templates().get_template(name).render(**context), status_code=status)


def _error_page(request: Request, status: int, message: str) -> HTMLResponse:
    body = _templates().from_string(
        '{% extends "base.html" %}{% block body %}<h1>{{ status }}</h1><p id="error">{{ message }}</p>'
        "{% endblock %}")
    return HTMLResponse(body.render(root=request.scope.get("root_path", ""), status=status, message=message),
                        status_code=status)


def _watermark(lake: Path | str) -> tuple[int | None, str | None]:
    try:
        wm = read_batch_watermark(lake)
    except ServingError:
        log.exception("cannot read the batch watermark of %s", lake)
        return None, None
    return wm, ms_to_iso(wm)


def _short_iso(ms: int) -> str:
    """Epoch ms -> ``2013-01-01T05:00Z`` (seconds shown only when not zero); ``"<ms> ms"``
    outside the years datetime can hold."""
    try:
        dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ" if dt.second or dt.microsecond else "%Y-%m-%dT%H:%MZ")


def _step_name(ms: int) -> str:
    for unit, size in (("d", _DAY), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


class _ValuesCache:
    """``field_values`` of a snapshot's frame per field (parsing every row's JSON takes
    ~0.6 s per 700,000 rows), for the last frame charted of each view (``key=False``: its
    whole snapshot; ``key=True``: a key's merged rows): at most two frames per view, so a view
    republished many times does not keep its old versions' frames alive (it kept the last 16
    (frame, field) pairs, any versions)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, bool], tuple[pd.DataFrame, dict[str, np.ndarray]]] = {}

    def get(self, snap: ViewSnapshot, field: str, key: bool = False) -> np.ndarray:
        slot = (snap.spec.name, key)
        with self._lock:
            hit = self._entries.get(slot)
            if hit is not None and hit[0] is snap.frame and field in hit[1]:
                return hit[1][field]
        values = field_values(snap.frame, field)
        with self._lock:
            hit = self._entries.get(slot)
            if hit is None or hit[0] is not snap.frame:
                hit = self._entries[slot] = (snap.frame, {})
            hit[1][field] = values
        return values

    def slots(self) -> int:
        """The frames held."""
        with self._lock:
            return len(self._entries)


def _speed_span(frame: pd.DataFrame, from_ms: int | None, to_ms: int | None) -> tuple[int, int] | None:
    """``(first window start, last window end)`` of the speed rows whose window starts in
    ``[from_ms, to_ms]`` (epoch ms), ``None`` if there is none."""
    speed = frame[(frame["source"] == "speed") & frame["window_start"].notna()]
    if from_ms is not None:
        speed = speed[speed["window_start"] >= from_ms]
    if to_ms is not None:
        speed = speed[speed["window_start"] <= to_ms]
    if speed.empty:
        return None
    end = speed["window_end"].fillna(speed["window_start"]).max()
    return int(speed["window_start"].min()), int(end)


def _sources_table(points: dict[str, list[tuple[int, float]]]) -> list[dict[str, Any]]:
    return [{"name": s, "points": len(p), "first": ms_to_iso(p[0][0]), "last": ms_to_iso(p[-1][0])}
            for s, p in sorted(points.items()) if p]


@dataclass(frozen=True)
class About:
    """What the pages say about the views beyond the lake: the pipeline's name and
    description, and each view's description (``{view: text}``), from its declaration
    (:class:`pipelines.Pipeline`'s ``description`` and ``View.description``)."""

    name: str = ""
    description: str = ""
    views: Mapping[str, str] = field(default_factory=dict)


def pages_router(index: ViewIndex, lake: Path | str, about: About | None = None,
                 served: ServedViews | None = None) -> APIRouter:
    """The ``/ui`` routes over ``index`` (the app's view index) and ``lake``; ``about``
    titles the index and describes its views; with ``served`` live (a broker), a key's charts
    are drawn from its merged rows (batch + the speed layer's current rows), the whole view's
    from the published snapshot."""
    about = about or About()
    router = APIRouter(prefix="/ui", include_in_schema=False)
    values_cache = _ValuesCache()

    def quality() -> dict[str, QualityResult]:
        try:
            return load_results(lake)
        except ServingError:
            log.exception("cannot read the quality results of %s", lake)
            return {}

    @router.get("", response_class=HTMLResponse)
    def index_page(request: Request) -> HTMLResponse:
        checks = quality()
        views = []
        for name in index.views():
            snap = index.snapshot(name)
            result = checks.get(name)
            views.append({"name": name, "description": about.views.get(name, ""),
                          "kind": snap.spec.window_kind or "table", "rows": snap.rows,
                          "key_count": len(snap.ranges), "checks": None if result is None else result.success})
        return _render("index.html", root=request.scope.get("root_path", ""), views=views,
                       watermark=_watermark(lake)[1], about=about)

    @router.get("/static/plotly.min.js")
    def plotly_js() -> Response:
        return Response(_plotly_js(), media_type="application/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    @router.get("/views/{view}", response_class=HTMLResponse)
    def view_page(
        request: Request,
        view: str,
        key: str | None = Query(None, description="one key (default: all keys)"),
        field: str | None = Query(None, description="the value field charted (default: count)"),
        agg: str | None = Query(None, description="per bucket: sum, mean, max or min"),
        from_: str | None = Query(None, alias="from", description="first window start: ISO-8601 or epoch ms"),
        to: str | None = Query(None, description="last window start: ISO-8601 or epoch ms"),
    ) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        key, field, agg, from_, to = (v or None for v in (key, field, agg, from_, to))
        try:
            snap = whole = index.snapshot(view)
            if key is not None and served is not None and served.live is not None:
                with contextlib.suppress(UnknownKeyError):  # unknown: the 404 below, with near keys
                    snap = served.key_snapshot(view, key)
            from_ms = None if from_ is None else parse_time_ms(from_, "from")
            to_ms = None if to is None else parse_time_ms(to, "to")
        except UnknownViewError as exc:
            return _error_page(request, 404, str(exc))
        except InvalidTimeError as exc:
            return _error_page(request, 422, str(exc))
        if from_ms is not None and to_ms is not None and from_ms > to_ms:
            return _error_page(request, 400, f"'from' ({_short_iso(from_ms)}) is after 'to' ({_short_iso(to_ms)})")
        if agg is not None and agg not in AGGREGATES:
            return _error_page(request, 400, f"unknown aggregate {agg!r}; expected one of {', '.join(AGGREGATES)}")
        frame = snap.frame
        if key is not None:
            bounds = snap.ranges.get(key)
            if bounds is None:
                hint = _near_keys(list(snap.ranges), key)
                return _error_page(request, 404, f"{UnknownKeyError(view, key)}{hint}")
            frame = frame.iloc[bounds[0]:bounds[1]]
        spec = snap.spec
        kind = spec.window_kind or "table"
        wm_ms, wm_iso = _watermark(lake)
        try:
            if kind == "session" and field in (None, SESSIONS):
                chart = _session_chart(view, frame, key, from_ms, to_ms, wm_ms)
            elif kind == "table":
                chart = _table_chart(view, frame, field, snap, values_cache, key, snap is not whole)
            else:
                chart = _window_chart(view, frame, key, field, agg, from_ms, to_ms, snap, values_cache, wm_ms,
                                      snap is not whole)
        except UnknownFieldError as exc:
            return _error_page(request, 400, str(exc))
        fields = numeric_fields(frame) or (["rows"] if kind != "table" else [])
        if kind == "session":
            fields = [SESSIONS, *fields]
        params = {"key": key, "field": field, "agg": agg, "from": from_, "to": to}

        def url(**changes: str | None) -> str:
            query = {k: v for k, v in {**params, **changes}.items() if v}
            return f"{root}/ui/views/{quote(view, safe='')}" + (f"?{urlencode(query)}" if query else "")

        presets = _presets(frame, spec.windowed, url, from_, to)
        listed = list(whole.ranges)[:KEY_RESULTS] if len(whole.ranges) <= KEY_RESULTS else []
        return _render(
            "view.html", root=root, view=view, description=about.views.get(view, ""), kind=kind, rows=whole.rows,
            keys_total=len(whole.ranges),
            version=snap.version, watermark=wm_iso, key=key or "", fields=fields,
            aggregates=AGGREGATES,
            from_text=from_ or "", to_text=to or "", presets=presets,
            listed_keys=[{"key": k, "url": url(key=k)} for k in listed], all_keys_url=url(key=None),
            key_results=KEY_RESULTS, quality=quality().get(view),
            max_points=MAX_POINTS, edge_windows=EDGE_WINDOWS, poll_ms=POLL_MS,
            edge_url=f"{root}/views/{quote(view, safe='')}/edge?"
            + urlencode({k: v for k, v in {"key": key, "field": field}.items() if v}),
            speed_span_iso=[ms_to_iso(t) for t in chart["speed_span"]] if chart["speed_span"] else None, **chart,
        )

    return router


def _window_chart(view: str, frame: pd.DataFrame, key: str | None, field: str | None, agg: str | None,
                  from_ms: int | None, to_ms: int | None, snap: ViewSnapshot, cache: _ValuesCache,
                  watermark_ms: int | None, key_frame: bool = False) -> dict[str, Any]:
    """Context of a tumbling / hopping view (or a session view's value field): the main chart
    (bucketed beyond MAX_POINTS) and, when bucketed, the fresh edge at full resolution."""
    spec = snap.spec
    field = resolve_field(view, frame, field)
    values = cache.get(snap, field, key_frame)
    if key is not None:
        start, end = snap.ranges[key]
        values = values[start:end]
    step_ms = spec.advance_ms or 0  # windows start every advance: buckets start coarser
    step = _step_name(spec.size_ms) if spec.size_ms else None  # "per 24 h window" (y title)

    def series(lo: int | None, hi: int | None) -> Series:
        return view_series(view, frame, True, field, window_kind=spec.window_kind, step_ms=step_ms,
                           from_ms=lo, to_ms=hi, max_points=MAX_POINTS, agg=agg, values=values)

    main = series(from_ms, to_ms)
    span = _speed_span(frame, from_ms, to_ms)
    edge_figure = None
    if main.bucket is not None and span is not None:
        edge_from = span[0] - EDGE_WINDOWS * (step_ms or 3_600_000)
        edge = series(max(edge_from, from_ms) if from_ms is not None else edge_from, to_ms)
        what = f"key {key}" if key else "all keys"
        res = f"{edge.agg} per {edge.bucket.name}" if edge.bucket else "per window"
        edge_figure = series_figure(view, edge, watermark_ms, key, span, step,
                                    title=f"the fresh edge at full resolution: {edge.field} {res}, {what}")
        edge_figure["layout"]["showlegend"] = True
    if main.bucket is not None:
        combine = "" if key else f"; keys combined by {main.key_agg}"
        resolution = (f"{main.windows:,} windows in this range, more than the {MAX_POINTS:,} points a chart draws: "
                      f"one point per {main.bucket.name}, the {main.agg} of its windows{combine}.")
    else:
        resolution = f"One point per window ({main.windows:,} windows in this range)."
    return {"figure": series_figure(view, main, watermark_ms, key, span, step), "edge_figure": edge_figure,
            "bucket": main.bucket.name if main.bucket else "window", "points": main.n_points,
            "resolution": resolution, "sources": _sources_table(main.points), "speed_span": span,
            "x_label": main.bucket.name if main.bucket else "window start", "field": field, "agg": main.agg,
            "top": None}


def _session_chart(view: str, frame: pd.DataFrame, key: str | None, from_ms: int | None, to_ms: int | None,
                   watermark_ms: int | None, key_frame: bool = False) -> dict[str, Any]:
    """Context of a session view's default chart: sessions and mean duration per bucket."""
    series = session_series(view, frame, from_ms=from_ms, to_ms=to_ms, max_points=MAX_POINTS)
    span = _speed_span(frame, from_ms, to_ms)
    resolution = (f"{series.total:,} sessions in this range, counted per {series.bucket.name} by their start "
                  f"(the finest of hour, day, week leaving at most {MAX_POINTS:,} points), with their mean "
                  f"duration (last record - first record).")
    return {"figure": sessions_figure(view, series, watermark_ms, key, span), "edge_figure": None,
            "bucket": series.bucket.name, "points": series.n_points, "resolution": resolution,
            "sources": _sources_table(series.sessions), "speed_span": span,
            "x_label": f"session start {series.bucket.name}", "field": SESSIONS, "agg": None, "top": None}


def _table_chart(view: str, frame: pd.DataFrame, field: str | None, snap: ViewSnapshot, cache: _ValuesCache,
                 key: str | None, key_frame: bool = False) -> dict[str, Any]:
    """Context of a table view: the top keys by ``field`` (bars), or the latest rows."""
    fields = numeric_fields(frame)
    values = None
    if field is not None and field not in fields:
        raise UnknownFieldError(view, field, fields)
    chosen = field or ("count" if "count" in fields else (fields[0] if fields else None))
    if chosen is not None:
        values = cache.get(snap, chosen, key_frame)
        if key is not None:
            start, end = snap.ranges[key]
            values = values[start:end]
    top = top_keys(view, frame, chosen, TOP_N, values=values)
    if key is not None:
        resolution = f"The current row of key {key}."
    elif top.field is not None:
        resolution = f"The {len(top.rows)} keys with the largest {top.field} (current value per key)."
    else:
        resolution = f"No numeric field in the values: the {len(top.rows)} most recently updated rows."
    return {"figure": top_keys_figure(view, top) if top.field else None, "edge_figure": None,
            "bucket": "key", "points": len(top.rows), "resolution": resolution, "sources": [], "speed_span": None,
            "x_label": "key", "field": top.field or "", "agg": None,
            "top": [{**r, "y": _number(r["y"]), "timestamp": ms_to_iso(r["timestamp"])} for r in top.rows]}


def _number(y: float | None) -> str:
    """A value for a table cell: ``347`` rather than ``347.0``, ``""`` for none."""
    if y is None:
        return ""
    return f"{int(y):,}" if float(y).is_integer() else f"{y:,.4g}"


def _near_keys(keys: list[str], key: str, limit: int = 5) -> str:
    """``"; keys like it: A, B"``: the keys starting like ``key`` (its longest prefix that some
    key contains), or ``""``."""
    for n in range(min(len(key), 20), 0, -1):
        near = search_keys(keys, key[:n], limit=limit)[1]
        if near:
            return f"; keys like it: {', '.join(near)}"
    return ""


def _presets(frame: pd.DataFrame, windowed: bool, url: Any, from_text: str | None,
             to_text: str | None) -> list[dict[str, Any]]:
    """Range links ending at the last window of ``frame`` (the selected key's, or the view's),
    and one from a day before its first speed-layer window to the end."""
    if not windowed or frame.empty or frame["window_start"].isna().all():
        return []
    last = int(frame["window_start"].max())
    out = []
    for pid, label, length in PRESETS:
        lo, hi = _short_iso(last - length), _short_iso(last)
        out.append({"id": pid, "label": label, "url": url(**{"from": lo, "to": hi}),
                    "active": (from_text, to_text) == (lo, hi)})
    out.append({"id": "all", "label": "all", "url": url(**{"from": None, "to": None}),
                "active": not from_text and not to_text})
    speed_starts = frame.loc[frame["source"] == "speed", "window_start"].dropna()
    if not speed_starts.empty:
        lo = _short_iso(int(speed_starts.min()) - _DAY)
        out.append({"id": "speed", "label": "the speed part", "url": url(**{"from": lo, "to": None}),
                    "active": from_text == lo and not to_text})
    return out
