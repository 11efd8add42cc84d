"""The recomputation of a pipeline: ingest what is new, recompute the batch views, republish.

``<p>_recompute`` selects every materializable asset of ``p`` (groups ``<p>_ingest``,
``<p>_batch``, ``<p>_serving``; the GX checks of the views come with them). Every run
recomputes the views from all archived data (see :mod:`pipelines.dagster.partitions`).

``<p>_recompute_schedule`` ticks on ``p.partitions.schedule`` (cron, UTC) and, like the
``<p>_new_kafka_data`` sensor, asks for a run only when the source topics hold records the
lake has not archived, for the days they fall on (:func:`recompute_request`); else it skips.
Both skip while a run of ``<p>_recompute`` is queued or running (it would recompute the same
tables at the same time; the next tick looks again), while another writer holds the lake lock
of ``p``'s folder (a ``duet run``, or a backfill's run: a run now would fail at its first
writing step; :mod:`pipelines.lake.lock`), and without a configured Kafka cluster.
"""

# no `from __future__ import annotations`: Dagster reads the context and resource annotations
from typing import TYPE_CHECKING, Optional

import dagster as dg

from pipelines.dagster.keys import group, job_name, schedule_name
from pipelines.dagster.new_data import TOUCHED_DAYS_TAG, NewData, kafka_new_data
from pipelines.dagster.partitions import compact_days, day_blocks, days_in_partitions, partition_keys
from pipelines.dagster.resources import BOOTSTRAP_ENV, KafkaResource, LakeResource
from pipelines.declaration.pipeline import Pipeline

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

__all__ = ["AUTOMATION_ENV", "automation_running", "recompute_job", "recompute_schedule", "recompute_request", "request_for_new_data", "TOUCHED_DAYS_TAG",
           "RANGE_START_TAG", "RANGE_END_TAG", "context_instance"]

#: Dagster's run tags of a partition range (a single-run backfill's run has them too)
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"

#: ``running``: the recompute schedule and the new-data sensor start running (Dagster's
#: ``default_status``; ``duet up`` sets it for its ``dagster dev``); else they start stopped,
#: to be turned on in the UI. Either way a state set in the UI (stored in the instance) wins.
AUTOMATION_ENV = "DUET_AUTOMATION"


def automation_running() -> bool:
    """``$DUET_AUTOMATION`` is ``running`` (see :data:`AUTOMATION_ENV`)."""
    import os

    return os.environ.get(AUTOMATION_ENV, "").strip().lower() == "running"


_NO_CLUSTER = f"no Kafka cluster configured (set {BOOTSTRAP_ENV})"
_ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
           dg.DagsterRunStatus.STARTED]


def recompute_job(p: Pipeline) -> "UnresolvedAssetJobDefinition":
    """``<p>_recompute``: ingest every archived topic (incremental), recompute the batch views,
    check and publish them."""
    return dg.define_asset_job(
        job_name(p),
        selection=dg.AssetSelection.groups(group(p, "ingest"), group(p, "batch"), group(p, "serving")),
        description=f"`{p.name}`: ingest every topic (incremental), recompute the batch views, check and "
        "publish them." + (f"\n\n{p.description}" if p.description else ""),
    )


def recompute_request(p: Pipeline, new: NewData, keys: list[str], *, trigger: str,
                      run_key: Optional[str]) -> "dg.RunRequest | dg.SkipReason":
    """A run for ``new`` data of ``p``, or why none: nothing new, or no new record on a
    partition (``keys``). The run targets the last contiguous block of the days the records
    fall on (a day: ``partition_key``; several: Dagster's range tags); tag
    ``duet/touched_days`` names all of them (the run materializes the others as days its
    data touched), ``duet/new_records`` counts the records, ``duet/trigger`` names
    ``trigger``."""
    topics = ", ".join(new.records) or ", ".join(p.input_topics)
    if not new.total:
        return dg.SkipReason(f"no new records in {topics}")
    inside, outside = days_in_partitions(new.days, keys)
    if not inside:
        where = f"they fall on {compact_days(outside)}" if outside else "none has a usable timestamp"
        span = f"{keys[0]}..{keys[-1]}" if keys else f"none yet (from {p.partitions.start})"
        return dg.SkipReason(f"{new.total} new record{'' if new.total == 1 else 's'} in {topics}, none on a day of "
                             f"the partitions ({span}): {where}; launch a run from the UI to ingest them")
    first, last = day_blocks(inside)[-1]
    tags = {"duet/trigger": trigger, "duet/pipeline": p.name, "duet/new_records": str(new.total),
            TOUCHED_DAYS_TAG: compact_days(inside)}
    if first == last:
        return dg.RunRequest(run_key=run_key, partition_key=first, tags=tags)
    return dg.RunRequest(run_key=run_key, tags={**tags, RANGE_START_TAG: first, RANGE_END_TAG: last})


def request_for_new_data(p: Pipeline, instance: Optional[dg.DagsterInstance], kafka: KafkaResource,
                         lake: LakeResource, *, trigger: str,
                         run_key: Optional[str] = None) -> "dg.RunRequest | dg.SkipReason":
    """What the sensor and the schedule ask for (see the module docstring): a skip while a
    ``<p>_recompute`` run is active in ``instance``, without a cluster, while another writer
    holds ``p``'s lake lock, or when the cluster does not answer; else
    :func:`recompute_request` on the records not yet archived (``run_key`` ``None``: their end
    offsets)."""
    from pipelines.lake.locking import lock_holder

    if instance is not None:
        active = instance.get_run_records(dg.RunsFilter(job_name=job_name(p), statuses=_ACTIVE), limit=1)
        if active:
            return dg.SkipReason(f"run {active[0].dagster_run.run_id} of {job_name(p)} is "
                                 f"{active[0].dagster_run.status.value.lower()}: the next tick looks again")
    bootstrap = kafka.configured_bootstrap()
    if not bootstrap:
        return dg.SkipReason(_NO_CLUSTER)
    folder = p.lake(lake.root())
    holder = lock_holder(folder)
    if holder is not None:
        return dg.SkipReason(f"{folder} is in use by {holder.describe()}: the next tick looks again")
    try:
        new = kafka_new_data(p, bootstrap, folder)
    except Exception as exc:  # the cluster may be down: report, do not crash the daemon
        return dg.SkipReason(f"cannot read the new records from {bootstrap}: {exc}")
    return recompute_request(p, new, partition_keys(p), trigger=trigger,
                             run_key=new.run_key if run_key is None else run_key)


def recompute_schedule(p: Pipeline, job: "UnresolvedAssetJobDefinition") -> dg.ScheduleDefinition:
    """``<p>_recompute_schedule``: at each tick of ``p.partitions.schedule`` (UTC), a run of
    ``job`` for the days the records not yet archived fall on, or a skip
    (:func:`request_for_new_data`); ``run_key`` is the tick's time to the minute,
    ``YYYY-MM-DDTHH:MM``."""

    @dg.schedule(
        name=schedule_name(p),
        job=job,
        cron_schedule=p.partitions.schedule,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING if automation_running() else dg.DefaultScheduleStatus.STOPPED,
        description=f"Recomputes the batch views of `{p.name}` when its topics hold records the lake lacks, for "
        f"the days they fall on (cron `{p.partitions.schedule}`, UTC).",
    )
    def _schedule(context: dg.ScheduleEvaluationContext, kafka: KafkaResource,
                  lake: LakeResource) -> "dg.RunRequest | dg.SkipReason":
        tick = context.scheduled_execution_time
        return request_for_new_data(p, context_instance(context), kafka, lake, trigger="schedule",
                                    run_key=tick.strftime("%Y-%m-%dT%H:%M") if tick else None)

    return _schedule


def context_instance(
        context: "dg.ScheduleEvaluationContext | dg.SensorEvaluationContext") -> Optional[dg.DagsterInstance]:
    """The context's instance; ``None`` for a context built in a test without one."""
    try:
        return context.instance
    except dg.DagsterInvariantViolationError:
        return None
