"""The recomputation of a pipeline: ingest what is new, recompute the batch views, republish.

``<p>_recompute`` selects every materializable asset of ``p`` (groups ``<p>_ingest``,
``<p>_batch``, ``<p>_serving``; the GX checks of the views come with them). The batch views
are daily partitioned, so each run names a partition: the schedule asks for the last one,
and since the batch layer recomputes the whole history anyway (see
:mod:`pipelines.dagster.partitions`) every run refreshes all views from all archived data.
``<p>_recompute_schedule`` runs it on ``p.partitions.schedule`` (cron, UTC).
"""

# no `from __future__ import annotations`: Dagster reads the context and resource annotations
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.dagster.keys import group, job_name, schedule_name
from pipelines.dagster.partitions import last_partition
from pipelines.pipeline import Pipeline

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

__all__ = ["recompute_job", "recompute_schedule"]


def recompute_job(p: Pipeline) -> "UnresolvedAssetJobDefinition":
    """``<p>_recompute``: ingest every archived topic (incremental), recompute the batch views,
    check and publish them."""
    return dg.define_asset_job(
        job_name(p),
        selection=dg.AssetSelection.groups(group(p, "ingest"), group(p, "batch"), group(p, "serving")),
        description=f"`{p.name}`: ingest every topic (incremental), recompute the batch views, check and "
        "publish them." + (f"\n\n{p.description}" if p.description else ""),
    )


def recompute_schedule(p: Pipeline, job: "UnresolvedAssetJobDefinition") -> dg.ScheduleDefinition:
    """``<p>_recompute_schedule``: one run of ``job`` per tick of ``p.partitions.schedule``
    (UTC), for the last partition (the batch layer recomputes all history); ``run_key`` is
    the tick's time to the minute, ``YYYY-MM-DDTHH:MM``."""

    @dg.schedule(
        name=schedule_name(p),
        job=job,
        cron_schedule=p.partitions.schedule,
        execution_timezone="UTC",
        description=f"Recomputes the batch views of `{p.name}` over all archived data "
        f"(cron `{p.partitions.schedule}`, UTC).",
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        last = last_partition(p)
        if last is None:
            return dg.SkipReason(f"no partition yet: the first day ({p.partitions.start}) has not ended")
        tick = context.scheduled_execution_time
        return dg.RunRequest(
            run_key=tick.strftime("%Y-%m-%dT%H:%M") if tick else None,
            partition_key=last,
            tags={"duet/trigger": "schedule", "duet/pipeline": p.name},
        )

    return _schedule
