"""Assemble ONE ``dagster.Definitions`` from one or several pipeline declarations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dagster as dg

from pipelines.dagster.assets import pipeline_assets
from pipelines.dagster.checks import speed_lag_check, view_checks
from pipelines.dagster.resources import LakeResource, default_resources
from pipelines.dagster.schedules import recompute_job, recompute_schedule
from pipelines.dagster.sensors import new_kafka_data, speed_layer_lag
from pipelines.lake.loaded import loaded_pipeline
from pipelines.declaration.pipeline import Pipeline, PipelineError

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

__all__ = ["definitions"]


def definitions(*pipelines: Pipeline, resources: dict[str, Any] | None = None) -> dg.Definitions:
    """The Dagster definitions of ``pipelines``: per pipeline its assets
    (:mod:`pipelines.dagster.assets`), GX checks and the speed layer's lag check,
    ``<p>_recompute`` job and schedule and two sensors, all named after the pipeline
    (:mod:`pipelines.dagster.keys`); one set of
    resources ``lake``, ``spark``, ``kafka`` for all of them (``resources`` replaces the
    defaults of the same key, see :func:`pipelines.dagster.resources.default_resources`);
    ``in_process_executor`` (one JVM per run).

    The daily partitions cover the data loaded: the declared ones stretched over the copies
    of the sample data that ``duet load --years N`` (or ``duet run``, ``duet ui --load``)
    recorded in the pipeline's folder of the ``lake`` resource's root
    (:func:`pipelines.lake.loaded.loaded_pipeline`), read when the definitions are built: reload
    the code location after loading more years into a running UI.

    Raises:
        PipelineError: no pipeline, or two pipelines with the same name.
    """
    if not pipelines:
        raise PipelineError("definitions(): give at least one pipeline")
    names = [p.name for p in pipelines]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PipelineError(f"definitions(): pipeline {dupes[0]!r} is given twice; pipeline names must differ")
    assets: list[Any] = []
    checks: list[dg.AssetChecksDefinition] = []
    jobs: list[UnresolvedAssetJobDefinition] = []
    schedules: list[dg.ScheduleDefinition] = []
    sensors: list[dg.SensorDefinition] = []
    every = {**default_resources(), **(resources or {})}
    lake = every["lake"]
    if isinstance(lake, LakeResource):
        pipelines = tuple(loaded_pipeline(p, lake.root()) for p in pipelines)
    for p in pipelines:
        job = recompute_job(p)
        assets.extend(pipeline_assets(p))
        checks.extend([*view_checks(p), speed_lag_check(p)])
        jobs.append(job)
        schedules.append(recompute_schedule(p, job))
        sensors.extend([new_kafka_data(p, job), speed_layer_lag(p)])
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources=every,
        executor=dg.in_process_executor,
    )
