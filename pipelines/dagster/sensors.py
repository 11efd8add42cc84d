"""Sensors of a pipeline: new Kafka data starting the recompute, and the speed layer observed.

``<p>_new_kafka_data`` (every 30 s, once turned on in the UI): when a source topic holds
records ``<lake root>/<p>/raw`` has not archived yet, it reads them to find the days they
fall on (event time, :mod:`pipelines.dagster.new_data`) and requests a run of
``<p>_recompute`` (ingest, batch views, checks, publish) for those days
(:func:`pipelines.dagster.schedules.recompute_request`; the model is in
:mod:`pipelines.dagster.partitions`), one per distinct set of end offsets (its ``run_key``,
``topic:partition=offset,...;...``), so a run is never requested twice for the same data. It
skips while a run of ``<p>_recompute`` is queued or running, and while another writer (a
``duet run``, a backfill's run) holds the pipeline's lake lock.

``<p>_speed_layer_lag`` observes the speed layer (a service, not an op). Every minute it reads
it (:mod:`pipelines.dagster.speed_probe`): the speed service's ``/metrics`` when
``$DUET_SPEED_SERVER_<NAME>`` names it (``duet speed --follow --server HOST:PORT``; the
pipeline's name upper-cased), else the committed offsets of the speed layer's consumer group
(``p.service_app_id``, ``duet-<name>-service`` as run by ``duet speed``; override with
``$DUET_SPEED_APPLICATION_ID_<NAME>``) against the end offsets of the source topics. It
records an ``AssetObservation`` of ``[<p>, speed_layer]`` (lag per topic and in total, in
records; from a service also its state, process rate in records/s, threads and when it was
last seen, kept in the sensor's cursor while it does not answer) and an evaluation of the
``speed_lag`` check (:func:`pipelines.dagster.checks.speed_lag_check`): failed when the
service is down or the lag is above ``$DUET_SPEED_MAX_LAG_<NAME>`` records (default 10,000).

The consumer-group reading and ``new_kafka_data`` need a configured cluster (``KafkaResource``
with ``bootstrap_servers`` or ``$KAFKA_BOOTSTRAP_SERVERS``); without one (and without a
service for the lag sensor) they skip (``SkipReason``), as when the cluster is down.
"""

# no `from __future__ import annotations`: Dagster reads the context and resource annotations
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.dagster.keys import sensor_name, speed_key
from pipelines.dagster.resources import BOOTSTRAP_ENV, KafkaResource, LakeResource
from pipelines.dagster.schedules import automation_running, context_instance, request_for_new_data
from pipelines.dagster.speed_probe import (
    SPEED_CHECK_NAME,
    app_id_env,
    as_cursor,
    consumer_lag,
    cursor_last_seen,
    lag_check,
    max_lag_records,
    observation_metadata,
    read_speed,
    server_env,
)
from pipelines.declaration.pipeline import Pipeline

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

__all__ = ["consumer_lag", "new_kafka_data", "speed_layer_lag", "app_id_env"]

_NO_CLUSTER = f"no Kafka cluster configured (set {BOOTSTRAP_ENV})"


def speed_layer_lag(p: Pipeline, max_lag: int | None = None) -> dg.SensorDefinition:
    """``<p>_speed_layer_lag``: an observation of ``[<p>, speed_layer]`` and an evaluation of
    its ``speed_lag`` check at each tick (see the module docstring). ``max_lag``: the lag bound
    (records) when ``$DUET_SPEED_MAX_LAG_<NAME>`` is unset (else 10,000)."""
    topics = list(p.input_topics)

    @dg.sensor(
        name=sensor_name(p, "speed_layer_lag"),
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Observes the speed layer of `{p.name}`: its service's /metrics (${server_env(p)}), else the "
        f"consumer lag on {', '.join(topics)}; evaluates its `{SPEED_CHECK_NAME}` check.",
    )
    def _lag(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult | dg.SkipReason:
        try:
            bound = max_lag_records(p, max_lag)
        except ValueError as exc:
            return dg.SkipReason(str(exc))
        try:
            reading = read_speed(p, kafka.configured_bootstrap())
        except Exception as exc:  # the cluster may be down: report, do not crash the daemon
            return dg.SkipReason(f"cannot read offsets from {kafka.configured_bootstrap()}: {exc}")
        if reading is None:
            return dg.SkipReason(f"{_NO_CLUSTER} and no speed service (set {server_env(p)})")
        last_seen = reading.seen_at if reading.seen_at is not None else cursor_last_seen(context.cursor)
        passed, why, check_md = lag_check(reading, bound)
        if not passed:
            context.log.warning(f"{p.name} speed layer: {why}")
        events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = [
            dg.AssetObservation(asset_key=speed_key(p), metadata=observation_metadata(reading, last_seen)),
            dg.AssetCheckEvaluation(asset_key=speed_key(p), check_name=SPEED_CHECK_NAME, passed=passed,
                                    metadata=check_md, description=why),
        ]
        return dg.SensorResult(asset_events=events,
                               cursor=as_cursor({"last_seen": last_seen}) if last_seen is not None else context.cursor)

    return _lag


def new_kafka_data(p: Pipeline, job: "UnresolvedAssetJobDefinition") -> dg.SensorDefinition:
    """``<p>_new_kafka_data``: requests a run of ``job`` for the days on which the records of
    ``p``'s source topics its lake lacks fall, one run per set of end offsets; tags
    ``duet/touched_days``, ``duet/new_records``, ``duet/trigger`` and ``duet/pipeline`` (see
    :func:`pipelines.dagster.schedules.recompute_request`)."""
    topics = list(p.input_topics)

    @dg.sensor(
        name=sensor_name(p, "new_kafka_data"),
        job=job,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING if automation_running() else dg.DefaultSensorStatus.STOPPED,
        description=f"Starts {job.name} for the days on which the records of {', '.join(topics)} not yet archived "
        "in the lake fall.",
    )
    def _new_data(context: dg.SensorEvaluationContext, kafka: KafkaResource,
                  lake: LakeResource) -> dg.RunRequest | dg.SkipReason:
        request = request_for_new_data(p, context_instance(context), kafka, lake, trigger="new_kafka_data")
        if isinstance(request, dg.RunRequest):
            context.log.info(f"{request.tags['duet/new_records']} new records on {request.tags['duet/touched_days']}")
        return request

    return _new_data
