"""Plotly figures (plain JSON, drawn by ``plotly.min.js`` in the page) of the views page.

Times on the x axes are ISO-8601 UTC strings; inputs are epoch ms. Colours: batch blue,
speed orange (Plotly's first two), the speed region shaded orange, the batch watermark a
dashed red line.
"""

from __future__ import annotations

from typing import Any

from serving.api.times import ms_to_iso
from serving.views.series import Series, SessionSeries, TopKeys

__all__ = ["COLOURS", "SPEED_REGION_LABEL", "series_figure", "sessions_figure", "top_keys_figure"]

#: Trace colours: Plotly's default blue for batch, orange for speed.
COLOURS = {"batch": "#1f77b4", "speed": "#ff7f0e", "unknown": "#7f7f7f"}
#: The legend of the shaded region holding the speed layer's rows.
SPEED_REGION_LABEL = "speed layer (not yet recomputed by batch)"
_WATERMARK_COLOUR = "#cf222e"
_ORDER = ("batch", "speed", "unknown")


def _sources(points: dict[str, Any]) -> list[str]:
    return sorted(points, key=lambda s: _ORDER.index(s) if s in _ORDER else len(_ORDER))


def _trace(source: str, pts: list[tuple[int, float]], *, bucketed: bool, yaxis: str = "y",
           showlegend: bool = True, kind: str = "scatter") -> dict[str, Any]:
    colour = COLOURS.get(source, COLOURS["unknown"])
    trace: dict[str, Any] = {
        "type": kind, "name": source, "legendgroup": source, "showlegend": showlegend, "yaxis": yaxis,
        "x": [ms_to_iso(x) for x, _ in pts], "y": [y for _, y in pts],
    }
    if kind == "scatter":
        # the speed part is a few points at the right edge of a long range: bigger markers
        trace.update(mode="lines+markers", line={"color": colour, "width": 1.5},
                     marker={"size": 7 if source == "speed" else (3 if bucketed else 4), "color": colour})
    else:
        trace["marker"] = {"color": colour}
    return trace


def _decorations(watermark_ms: int | None, speed_span: tuple[int, int] | None,
                 yref: str = "paper") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The shaded speed region (with its legend entry) and the watermark line."""
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    if speed_span is not None:
        shapes.append({"type": "rect", "xref": "x", "yref": yref, "x0": ms_to_iso(speed_span[0]),
                       "x1": ms_to_iso(speed_span[1]), "y0": 0, "y1": 1, "fillcolor": COLOURS["speed"],
                       "opacity": 0.15, "line": {"width": 0}, "layer": "below",
                       "showlegend": True, "name": SPEED_REGION_LABEL})
    if watermark_ms is not None:
        at = ms_to_iso(watermark_ms)
        shapes.append({"type": "line", "xref": "x", "yref": yref, "x0": at, "x1": at, "y0": 0, "y1": 1,
                       "line": {"color": _WATERMARK_COLOUR, "dash": "dash", "width": 1.5}})
        annotations.append({"xref": "x", "yref": yref, "x": at, "y": 1.02, "text": "batch watermark",
                            "showarrow": False, "font": {"color": _WATERMARK_COLOUR}, "xanchor": "right"})
    return shapes, annotations


def _layout(title: str, x_title: str, y_title: str, shapes: list[dict[str, Any]],
            annotations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "xaxis": {"title": {"text": x_title}, "type": "date"},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
        "shapes": shapes, "annotations": annotations,
        "legend": {"title": {"text": "source"}},
        "margin": {"t": 60, "r": 20, "b": 50, "l": 70},
    }


def series_figure(view: str, series: Series, watermark_ms: int | None, key: str | None,
                  speed_span: tuple[int, int] | None, step: str | None = None,
                  title: str | None = None) -> dict[str, Any]:
    """One trace per source; the speed region shaded; the watermark as a line.

    Args:
        view: the view name (title).
        series: the points (bucketed or not).
        watermark_ms: the batch watermark (epoch ms), ``None``: no line.
        key: the key charted (``None``: all keys).
        speed_span: ``(first, end)`` epoch ms of the speed layer's rows shown, ``None``: none.
        step: the view's window size for the y title (e.g. ``"24 h"``).
        title: overrides the title.
    """
    bucketed = series.bucket is not None
    data = [_trace(s, series.points[s], bucketed=bucketed) for s in _sources(series.points)]
    shapes, annotations = _decorations(watermark_ms, speed_span)
    what = f"key {key}" if key else "all keys"
    per_window = f"per {step} window" if step else "per window"
    if bucketed:
        assert series.bucket is not None
        default_title = f"{view}: {series.field}, {series.agg} per {series.bucket.name}, {what}"
        y_title = f"{series.field} ({series.agg} per {series.bucket.name})"
    else:
        default_title = f"{view}: {series.field} per window, {what}"
        y_title = series.field if series.x_kind == "timestamp" else f"{series.field} {per_window}"
    if series.x_kind == "window_start":
        x_title = f"{series.bucket.name} (UTC)" if bucketed and series.bucket else "window start (UTC)"
    else:
        x_title = "timestamp (UTC)"
    return {"data": data, "layout": _layout(title or default_title, x_title, y_title, shapes, annotations)}


def sessions_figure(view: str, series: SessionSeries, watermark_ms: int | None, key: str | None,
                    speed_span: tuple[int, int] | None) -> dict[str, Any]:
    """Two panels sharing the x axis: sessions started per bucket (top) and their mean duration
    in minutes (bottom), one trace per source in each; speed region and watermark across both."""
    bucket = series.bucket.name
    data = [_trace(s, series.sessions[s], bucketed=True) for s in _sources(series.sessions)]
    data += [_trace(s, series.duration_min[s], bucketed=True, yaxis="y2", showlegend=False)
             for s in _sources(series.duration_min)]
    shapes, annotations = _decorations(watermark_ms, speed_span)
    what = f"key {key}" if key else "all keys"
    layout = _layout(f"{view}: sessions per {bucket} and their mean duration, {what}",
                     f"session start, per {bucket} (UTC)", f"sessions per {bucket}", shapes, annotations)
    layout["xaxis"]["anchor"] = "y2"
    layout["yaxis"]["domain"] = [0.55, 1.0]
    layout["yaxis2"] = {"title": {"text": "mean duration (min)"}, "domain": [0.0, 0.45], "anchor": "x",
                        "rangemode": "tozero"}
    return {"data": data, "layout": layout}


def top_keys_figure(view: str, top: TopKeys) -> dict[str, Any]:
    """Horizontal bars of the top keys (largest first, at the top), coloured by source."""
    keys = [r["key"] for r in top.rows]
    by_source: dict[str, list[tuple[str, float]]] = {}
    for r in top.rows:
        by_source.setdefault(r["source"], []).append((r["key"], r["y"]))
    data = [{"type": "bar", "orientation": "h", "name": s, "legendgroup": s,
             "y": [k for k, _ in by_source[s]], "x": [v for _, v in by_source[s]],
             "marker": {"color": COLOURS.get(s, COLOURS["unknown"])}} for s in _sources(by_source)]
    layout = _layout(f"{view}: top {len(keys)} of {top.total:,} keys by {top.field}", str(top.field), "key",
                     [], [])
    layout["xaxis"] = {"title": {"text": str(top.field)}}
    layout["yaxis"] = {"type": "category", "categoryorder": "array", "categoryarray": keys[::-1],
                       "automargin": True}
    layout["barmode"] = "overlay"
    return {"data": data, "layout": layout}
