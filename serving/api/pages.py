"""HTML pages of the serving app: what a person reads instead of JSON.

* ``GET /ui``: every view with its size and check status, and the batch watermark.
* ``GET /ui/views/{view}?key=&field=``: the merged series of one value field over time (the
  sum over keys, or one key) as a Plotly chart, the batch part and the speed part in two
  colours, the batch watermark as a vertical line, and the view's Great Expectations results.
* ``GET /ui/static/plotly.min.js``: Plotly's JavaScript, served from the ``plotly`` package
  (no CDN, no Node build step).

Errors: an unknown view, key or field gets a 404 / 400 page whose text names what exists.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from serving.api.times import ms_to_iso
from serving.errors import ServingError, UnknownKeyError, UnknownViewError
from serving.quality.suite import QualityResult, load_results
from serving.views.batch import read_batch_watermark
from serving.views.index import ViewIndex
from serving.views.series import Series, UnknownFieldError, numeric_fields, view_series

__all__ = ["pages_router"]

log = logging.getLogger(__name__)

#: Keys offered in the page's key selector (the API pages through all of them).
MAX_KEYS_LISTED = 2000
#: Trace colours: Plotly's default blue for batch, orange for speed.
COLOURS = {"batch": "#1f77b4", "speed": "#ff7f0e", "unknown": "#7f7f7f"}


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


def _watermark(lake: Path) -> tuple[int | None, str | None]:
    try:
        wm = read_batch_watermark(lake)
    except ServingError:
        log.exception("cannot read the batch watermark of %s", lake)
        return None, None
    return wm, ms_to_iso(wm)


def _figure(view: str, series: Series, watermark_ms: int | None, key: str | None) -> dict[str, Any]:
    """A Plotly figure (plain JSON): one trace per source, the watermark as a line."""
    data = []
    for source in sorted(series.points, key=lambda s: ("batch", "speed", "unknown").index(s)
                         if s in COLOURS else 9):
        pts = series.points[source]
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": source,
            "x": [ms_to_iso(x) for x, _ in pts], "y": [y for _, y in pts],
            "line": {"color": COLOURS.get(source, "#7f7f7f"), "width": 1.5},
            "marker": {"size": 4},
        })
    shapes, annotations = [], []
    if watermark_ms is not None:
        at = ms_to_iso(watermark_ms)
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": at, "x1": at, "y0": 0, "y1": 1,
                       "line": {"color": "#cf222e", "dash": "dash", "width": 1.5}})
        annotations.append({"xref": "x", "yref": "paper", "x": at, "y": 1.02, "text": "batch watermark",
                            "showarrow": False, "font": {"color": "#cf222e"}})
    what = f"key {key}" if key else "all keys"
    x_title = "window start (UTC)" if series.x_kind == "window_start" else "timestamp (UTC)"
    return {
        "data": data,
        "layout": {
            "title": {"text": f"{view}: {series.field} per window, {what}"},
            "xaxis": {"title": {"text": x_title}, "type": "date"},
            "yaxis": {"title": {"text": series.field}},
            "shapes": shapes, "annotations": annotations,
            "legend": {"title": {"text": "source"}},
            "margin": {"t": 60, "r": 20, "b": 50, "l": 60},
        },
    }


def pages_router(index: ViewIndex, lake: Path) -> APIRouter:
    """The ``/ui`` routes over ``index`` (the app's view index) and ``lake``."""
    router = APIRouter(prefix="/ui", include_in_schema=False)

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
            views.append({"name": name, "kind": snap.spec.window_kind or "table", "rows": snap.rows,
                          "key_count": len(snap.ranges), "checks": None if result is None else result.success})
        return _render("index.html", root=request.scope.get("root_path", ""), views=views,
                       watermark=_watermark(lake)[1])

    @router.get("/static/plotly.min.js")
    def plotly_js() -> Response:
        return Response(_plotly_js(), media_type="application/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    @router.get("/views/{view}", response_class=HTMLResponse)
    def view_page(
        request: Request,
        view: str,
        key: str | None = Query(None, description="one key (default: the sum over all keys)"),
        field: str | None = Query(None, description="the value field charted (default: count)"),
    ) -> HTMLResponse:
        try:
            snap = index.snapshot(view)
            series = view_series(view, snap.frame, snap.spec.windowed, field=field, key=key or None)
        except UnknownViewError as exc:
            return _error_page(request, 404, str(exc))
        except UnknownKeyError as exc:
            return _error_page(request, 404, str(exc))
        except UnknownFieldError as exc:
            return _error_page(request, 400, str(exc))
        wm_ms, wm_iso = _watermark(lake)
        sources = [{"name": s, "points": len(p), "first": ms_to_iso(p[0][0]), "last": ms_to_iso(p[-1][0])}
                   for s, p in sorted(series.points.items())]
        fields = numeric_fields(snap.frame) or ["rows"]
        return _render(
            "view.html", root=request.scope.get("root_path", ""), view=view,
            kind=snap.spec.window_kind or "table", rows=snap.rows, keys_total=len(snap.ranges),
            version=snap.version, watermark=wm_iso, keys=list(snap.ranges)[:MAX_KEYS_LISTED], key=key or "",
            fields=fields, field=series.field, sources=sources,
            x_label="window start" if series.x_kind == "window_start" else "timestamp",
            quality=quality().get(view), figure=_figure(view, series, wm_ms, key or None),
        )

    return router
