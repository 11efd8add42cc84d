"""The hourly recomputation: ingest what is new, recompute the batch views, republish.

``recompute_job`` selects every materializable asset (ingest, batch views, serving publish).
The batch views are daily partitioned, so each run names a partition: the schedule asks for
the latest day of 2013, and since the batch layer recomputes the whole history anyway (see
:mod:`pipelines.partitions`) every hourly run refreshes all views from all archived data.
"""

import dagster as dg

from pipelines.partitions import DAILY_2013

__all__ = ["recompute_job", "hourly_recompute"]

#: Ingest every topic, recompute the batch views, run their checks, publish.
recompute_job = dg.define_asset_job(
    "recompute_job",
    selection=dg.AssetSelection.groups("ingest", "batch", "serving"),
    description="Ingest every topic (incremental), recompute the batch views, check and publish them.",
)


@dg.schedule(
    job=recompute_job,
    cron_schedule="0 * * * *",
    execution_timezone="UTC",
    description="Hourly recomputation of the batch views over all archived data.",
)
def hourly_recompute(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """One run per hour, for the last partition (the batch layer recomputes all history)."""
    last = DAILY_2013.get_last_partition_key()
    assert last is not None
    tick = context.scheduled_execution_time
    return dg.RunRequest(
        run_key=tick.strftime("%Y-%m-%dT%H") if tick else None,
        partition_key=last,
        tags={"duet/trigger": "hourly"},
    )
