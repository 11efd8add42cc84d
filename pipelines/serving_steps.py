"""The phases of the main job on the serving side: read the views of both layers, publish
the merged views, run the quality suites, compare speed and batch, find the busiest hours.

Plain functions (re-exported by :mod:`pipelines.main_job`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.progress import NullReporter, Reporter
from pipelines.speed_service import late_exclusions
from pipelines.topologies.flights import VIEWS
from pipelines.views import VIEW_NAMES, VIEW_SPECS, expectations

if TYPE_CHECKING:
    import pandas as pd

    from serving.quality.suite import QualityResult
    from serving.views.merge import AgreementReport

__all__ = [
    "read_speed_views",
    "read_batch_views",
    "publish_views",
    "run_checks",
    "compare_layers",
    "busiest_hours",
]


def read_speed_views(bootstrap: str, views: Iterable[str] = VIEW_NAMES) -> dict[str, pd.DataFrame]:
    """The speed layer's views: each view output topic read to its end."""
    from serving.views.speed import read_view_topic

    return {v: read_view_topic(bootstrap, v, VIEW_SPECS[v].windowed, timeout_s=300) for v in views}


def read_batch_views(lake: str | Path, views: Iterable[str] = VIEW_NAMES) -> dict[str, pd.DataFrame]:
    """The batch views ``<lake>/views/<view>`` (delta-rs)."""
    from serving.views.batch import read_batch_view

    return {v: read_batch_view(lake, v) for v in views}


def publish_views(
    lake: str | Path,
    batch_frames: Mapping[str, pd.DataFrame],
    speed_frames: Mapping[str, pd.DataFrame],
    views: Iterable[str] = VIEW_NAMES,
) -> dict[str, int]:
    """Merge batch and speed views at the batch watermark into ``<lake>/serving``;
    ``{view: rows}``."""
    from serving.views.batch import read_batch_watermark
    from serving.views.publish import publish

    specs = [VIEW_SPECS[v] for v in views]
    return publish(lake, specs, batch_frames, speed_frames, read_batch_watermark(lake))


def run_checks(
    lake: str | Path,
    views: Iterable[str] = VIEW_NAMES,
    reporter: Reporter | None = None,
    frames: Mapping[str, pd.DataFrame] | None = None,
) -> dict[str, QualityResult]:
    """Run each view's GX suite on its batch view and store the result
    (``<lake>/quality/<view>.json``)."""
    from serving.quality.suite import run_suite, save_result
    from serving.views.batch import read_batch_view

    views = list(views)
    rep = reporter or NullReporter()
    rep.start("checks", len(views))
    out: dict[str, QualityResult] = {}
    for i, view in enumerate(views):
        rep.update("checks", i, len(views), view)
        df = frames[view] if frames is not None and view in frames else read_batch_view(lake, view)
        out[view] = run_suite(view, df, expectations(view))
        save_result(lake, out[view])
    passed = sum(r.success for r in out.values())
    rep.finish("checks", f"{passed}/{len(out)} suites passed")
    return out


def compare_layers(
    batch_frames: Mapping[str, pd.DataFrame],
    speed_frames: Mapping[str, pd.DataFrame],
    watermark_ms: int | None,
    late: Iterable[Any] = (),
    views: Iterable[str] = VIEW_NAMES,
    late_windows: Mapping[str, Iterable[tuple[str, int]]] | None = None,
) -> tuple[dict[str, AgreementReport], dict[str, int]]:
    """Speed vs batch agreement per view over every window closed at ``watermark_ms``,
    excluding windows touched by ``late`` records (and the ``late_windows`` the runtime
    reports per store); returns ``(reports, excluded counts)``.

    When the runtime reports late windows, time-windowed views exclude exactly those (the
    windows that missed a record); session views also exclude every session touched by a
    late record's timestamp (see :func:`late_exclusions`)."""
    from serving.views.merge import agreement

    late = list(late)
    reports: dict[str, AgreementReport] = {}
    excluded: dict[str, int] = {}
    for view in views:
        spec = VIEW_SPECS[view]
        b, s = batch_frames.get(view), speed_frames.get(view)
        frames = [f for f in (b, s) if f is not None]
        reported = list((late_windows or {}).get(view, ()))
        records = late if (spec.window_kind == "session" or not late_windows) else []
        exclude = late_exclusions(spec, VIEWS[view].windows, records, frames, reported)
        excluded[view] = len(exclude)
        reports[view] = agreement(b, s, spec, watermark_ms, exclude=exclude)
    return reports, excluded


def busiest_hours(lake: str | Path, n: int = 5, view: str = "departures_hourly") -> list[dict[str, Any]]:
    """The ``n`` hours with the most departures (all origins) in the served ``view``:
    ``[{"hour": iso UTC, "window_start": ms, "departures": int, "cancelled": int,
    "by_origin": {origin: count}, "source": "batch|speed|mixed"}]``."""
    import json
    from datetime import datetime, timezone

    from deltalake import DeltaTable

    from serving.views.publish import served_view_path

    df = DeltaTable(str(served_view_path(lake, view))).to_pandas()
    if df.empty:
        return []
    values = [json.loads(v) for v in df["value"]]
    df = df.assign(
        count=[int(v.get("count", 0)) for v in values],
        cancelled=[int(v.get("cancelled", 0)) for v in values],
    )
    hours = []
    for start, g in df.groupby("window_start"):
        sources = set(g["source"])
        hours.append({
            "hour": datetime.fromtimestamp(int(start) / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
            "window_start": int(start),
            "departures": int(g["count"].sum()),
            "cancelled": int(g["cancelled"].sum()),
            "by_origin": {str(k): int(c) for k, c in sorted(zip(g["key"], g["count"]))},
            "source": sources.pop() if len(sources) == 1 else "mixed",
        })
    hours.sort(key=lambda h: (-h["departures"], h["window_start"]))
    return hours[:n]
