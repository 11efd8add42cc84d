"""Sensors of a pipeline: new Kafka data starting the recompute, and the speed layer's lag.

``<p>_new_kafka_data`` (every 30 s, once turned on in the UI): when a source topic holds
records ``<lake root>/<p>/raw`` has not archived yet, it requests a run of ``<p>_recompute``
(ingest, batch views, checks, publish), one per distinct set of end offsets (its
``run_key``, ``topic:partition=offset,...;...``), so a run is never requested twice for the
same data.

``<p>_speed_layer_lag`` observes the speed layer (a service, not an op). Every minute it
reads the committed offsets of the speed layer's consumer group on the source topics
(``p.service_app_id``, ``duet-<name>-service`` as run by ``duet speed``; override with
``$DUET_SPEED_APPLICATION_ID_<NAME>``, the pipeline's name upper-cased), compares them with
the end offsets, and records an ``AssetObservation`` of ``[<p>, speed_layer]`` with the lag
per topic (records).

Both need a configured cluster (``KafkaResource`` with ``bootstrap_servers`` or
``$KAFKA_BOOTSTRAP_SERVERS``); otherwise they skip (``SkipReason``), as when it is down.
"""

# no `from __future__ import annotations`: Dagster reads the context and resource annotations
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from pipelines.dagster.keys import sensor_name, speed_key
from pipelines.dagster.partitions import last_partition
from pipelines.dagster.resources import BOOTSTRAP_ENV, KafkaResource, LakeResource
from pipelines.pipeline import Pipeline

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

__all__ = ["consumer_lag", "pending_records", "new_kafka_data", "speed_layer_lag", "app_id_env"]

_NO_CLUSTER = f"no Kafka cluster configured (set {BOOTSTRAP_ENV})"


def app_id_env(p: Pipeline) -> str:
    """``DUET_SPEED_APPLICATION_ID_<NAME>``: overrides the consumer group the lag sensor of
    ``p`` observes."""
    return f"DUET_SPEED_APPLICATION_ID_{p.name.upper()}"


def consumer_lag(bootstrap: str, group: str, topics: list[str]) -> dict[str, int]:
    """``{topic: end offset - committed offset}`` (records) summed over partitions (a
    partition without a committed offset counts from its start)."""
    from confluent_kafka import Consumer, TopicPartition

    from speed_layer.runtime.admin import end_offsets

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "client.id": f"duet-lag-{uuid.uuid4().hex[:6]}"})
    try:
        out: dict[str, int] = {}
        for topic in topics:
            ends = end_offsets(bootstrap, topic)
            committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
            done = {tp.partition: max(0, tp.offset) for tp in committed}
            out[topic] = sum(max(0, end - done.get(p, 0)) for p, end in ends.items())
        return out
    finally:
        consumer.close()


def pending_records(bootstrap: str, lake: str | Path,
                    topics: list[str]) -> tuple[dict[str, int], dict[str, dict[int, int]]]:
    """``({topic: records in Kafka not archived in <lake>/raw/<topic>}, {topic: {partition:
    end offset}})``; ``lake`` is a pipeline's folder. A missing topic counts as empty.

    Raises:
        confluent_kafka.KafkaException: the cluster cannot be reached.
    """
    from batch_layer.ingest import archived_offsets
    from speed_layer.runtime.admin import TopicError, end_offsets

    pending: dict[str, int] = {}
    ends_by_topic: dict[str, dict[int, int]] = {}
    for topic in topics:
        try:
            ends = end_offsets(bootstrap, topic)
        except TopicError:
            ends = {}
        archived = archived_offsets(lake, topic)
        ends_by_topic[topic] = ends
        pending[topic] = sum(max(0, end - (archived.get(p, -1) + 1)) for p, end in ends.items())
    return pending, ends_by_topic


def speed_layer_lag(p: Pipeline) -> dg.SensorDefinition:
    """``<p>_speed_layer_lag``: records the lag of ``p``'s speed layer as an observation of
    ``[<p>, speed_layer]`` (metadata ``lag_<topic>``, ``lag_total``, ``application_id``)."""
    topics = list(p.input_topics)

    @dg.sensor(
        name=sensor_name(p, "speed_layer_lag"),
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Observes the consumer lag of the speed layer of `{p.name}` on {', '.join(topics)}.",
    )
    def _lag(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult | dg.SkipReason:
        bootstrap = kafka.configured_bootstrap()
        if not bootstrap:
            return dg.SkipReason(_NO_CLUSTER)
        group = os.environ.get(app_id_env(p), "").strip() or p.service_app_id
        try:
            lag = consumer_lag(bootstrap, group, topics)
        except Exception as exc:  # the cluster may be down: report, do not crash the daemon
            return dg.SkipReason(f"cannot read offsets from {bootstrap}: {exc}")
        metadata: dict[str, object] = {f"lag_{t}": dg.MetadataValue.int(n) for t, n in lag.items()}
        metadata["lag_total"] = dg.MetadataValue.int(sum(lag.values()))
        metadata["application_id"] = dg.MetadataValue.text(group)
        return dg.SensorResult(asset_events=[dg.AssetObservation(asset_key=speed_key(p), metadata=metadata)])

    return _lag


def new_kafka_data(p: Pipeline, job: "UnresolvedAssetJobDefinition") -> dg.SensorDefinition:
    """``<p>_new_kafka_data``: requests a run of ``job`` (for the last partition) when a source
    topic of ``p`` holds records its lake lacks, one run per set of end offsets; tags
    ``duet/new_records`` (records pending) and ``duet/pipeline``."""
    topics = list(p.input_topics)

    @dg.sensor(
        name=sensor_name(p, "new_kafka_data"),
        job=job,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Starts {job.name} when {', '.join(topics)} hold records not yet archived in the lake.",
    )
    def _new_data(context: dg.SensorEvaluationContext, kafka: KafkaResource,
                  lake: LakeResource) -> dg.RunRequest | dg.SkipReason:
        bootstrap = kafka.configured_bootstrap()
        if not bootstrap:
            return dg.SkipReason(_NO_CLUSTER)
        try:
            pending, ends = pending_records(bootstrap, p.lake(lake.root()), topics)
        except Exception as exc:  # the cluster may be down: report, do not crash the daemon
            return dg.SkipReason(f"cannot read offsets from {bootstrap}: {exc}")
        new = {t: n for t, n in pending.items() if n}
        if not new:
            return dg.SkipReason("no new records in " + ", ".join(topics))
        last = last_partition(p)
        if last is None:
            return dg.SkipReason(f"no partition yet: the first day ({p.partitions.start}) has not ended")
        run_key = ";".join(f"{t}:" + ",".join(f"{q}={o}" for q, o in sorted(ends[t].items())) for t in sorted(ends))
        context.log.info(f"new records: {new}")
        return dg.RunRequest(run_key=run_key, partition_key=last,
                             tags={"duet/trigger": "new_kafka_data", "duet/pipeline": p.name,
                                   "duet/new_records": str(sum(new.values()))})

    return _new_data
