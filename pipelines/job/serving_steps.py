"""The phases of the main job on the serving side: read the views of both layers, publish
the merged views, run the quality suites, compare speed and batch.

Plain functions of a :class:`~pipelines.declaration.pipeline.Pipeline` (``views=None``: all of its views),
called by :mod:`pipelines.job.main_job`, the CLI and the Dagster assets; ``lake`` is the
pipeline's folder of the lake.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.declaration.pipeline import Pipeline
from pipelines.progress import NullReporter, Reporter
from pipelines.speed.service import late_exclusions

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
]


def _selected(pipeline: Pipeline, views: Iterable[str] | None) -> list[str]:
    """``views`` as a list, or every view of ``pipeline`` when ``None``."""
    return list(views) if views is not None else list(pipeline.view_names)


def read_speed_views(pipeline: Pipeline, bootstrap: str, views: Iterable[str] | None = None,
                     timeout_s: float = 300.0, merge_at_ms: int | None = None) -> dict[str, pd.DataFrame]:
    """The speed layer's views: each view output topic read to its end; from the beginning,
    or, with ``merge_at_ms`` (a batch watermark), from where a merge at it needs them
    (:func:`serving.views.merge.speed_read_start`: the frames then hold what the merge keeps,
    not the history).

    Raises:
        serving.errors.SpeedSourceError: a topic is missing or cannot be read in ``timeout_s``.
    """
    from serving.views.merge import speed_read_start
    from serving.views.speed import read_view_topic

    specs = pipeline.view_specs
    return {v: read_view_topic(bootstrap, v, specs[v].windowed, timeout_s=timeout_s,
                               from_timestamp_ms=speed_read_start(specs[v], merge_at_ms))
            for v in _selected(pipeline, views)}


def read_batch_views(pipeline: Pipeline, lake: str | Path, views: Iterable[str] | None = None) -> dict[str, pd.DataFrame]:
    """The batch views ``<lake>/views/<view>`` (delta-rs)."""
    from serving.views.batch import read_batch_view

    return {v: read_batch_view(lake, v) for v in _selected(pipeline, views)}


def publish_views(
    pipeline: Pipeline,
    lake: str | Path,
    batch_frames: Mapping[str, pd.DataFrame],
    speed_frames: Mapping[str, pd.DataFrame],
    views: Iterable[str] | None = None,
    *,
    watermark_ms: int | None,
) -> dict[str, int]:
    """Merge batch and speed views at the batch watermark ``watermark_ms`` (ms; None: no
    batch yet) into ``<lake>/serving``; ``{view: rows}``. The caller passes the watermark it
    read the speed views at (``read_speed_views(merge_at_ms=...)``), so both use one value."""
    from serving.views.publish import publish

    specs = [pipeline.view_specs[v] for v in _selected(pipeline, views)]
    return publish(lake, specs, batch_frames, speed_frames, watermark_ms)


def run_checks(
    pipeline: Pipeline,
    lake: str | Path,
    views: Iterable[str] | None = None,
    reporter: Reporter | None = None,
    frames: Mapping[str, pd.DataFrame] | None = None,
) -> dict[str, QualityResult]:
    """Run each view's GX suite on its batch view and store the result
    (``<lake>/quality/<view>.json``)."""
    from serving.quality.suite import run_suite, save_result
    from serving.views.batch import read_batch_view

    views = _selected(pipeline, views)
    rep = reporter or NullReporter()
    rep.start("checks", len(views))
    out: dict[str, QualityResult] = {}
    for i, view in enumerate(views):
        rep.update("checks", i, len(views), view)
        df = frames[view] if frames is not None and view in frames else read_batch_view(lake, view)
        out[view] = run_suite(view, df, pipeline.expectations(view))
        save_result(lake, out[view])
    passed = sum(r.success for r in out.values())
    rep.finish("checks", f"{passed}/{len(out)} suites passed")
    return out


def compare_layers(
    pipeline: Pipeline,
    batch_frames: Mapping[str, pd.DataFrame],
    speed_frames: Mapping[str, pd.DataFrame],
    watermark_ms: int | None,
    late: Iterable[Any] = (),
    views: Iterable[str] | None = None,
    late_windows: Mapping[str, Iterable[tuple[str, int]]] | None = None,
    expired_join_ranges: Iterable[tuple[str, int, int]] = (),
) -> tuple[dict[str, AgreementReport], dict[str, int]]:
    """Speed vs batch agreement per view over every window closed at ``watermark_ms``,
    excluding windows touched by ``late`` records (and the ``late_windows`` the runtime
    reports per store); returns ``(reports, excluded counts)``.

    When the runtime reports late windows, time-windowed views exclude exactly those (the
    windows that missed a record); session views also exclude every session touched by a
    late record's timestamp (see :func:`late_exclusions`). A remaining difference whose
    window overlaps the lost results of an ``expired_join_ranges`` entry (``(join store,
    first ms, last ms)``, ``KafkaStreams.expired_join_ranges()``) is explained; the others
    are each report's ``unexplained``."""
    from serving.views.merge import agreement

    late = list(late)
    explained = [(lo, hi) for _, lo, hi in expired_join_ranges]
    reports: dict[str, AgreementReport] = {}
    excluded: dict[str, int] = {}
    for view in _selected(pipeline, views):
        spec = pipeline.view_specs[view]
        b, s = batch_frames.get(view), speed_frames.get(view)
        frames = [f for f in (b, s) if f is not None]
        reported = list((late_windows or {}).get(view, ()))
        records = late if (spec.window_kind == "session" or not late_windows) else []
        exclude = late_exclusions(spec, pipeline.windows_of(view), records, frames, reported)
        excluded[view] = len(exclude)
        reports[view] = agreement(b, s, spec, watermark_ms, exclude=exclude, explained=explained)
    return reports, excluded

