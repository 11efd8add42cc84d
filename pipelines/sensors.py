"""Sensors: the speed layer's lag, and new Kafka data starting the batch recompute.

``new_kafka_data`` (every 30 s, once turned on in the UI): when an input topic holds records
the lake has not archived yet, it requests a run of ``recompute_job`` (ingest, batch views,
checks, publish), one per distinct set of end offsets (its ``run_key``), so a run is never
requested twice for the same data.

``speed_layer_lag`` observes the speed layer (a service, not an op). Every minute it reads the committed offsets of the speed layer's consumer group (its
``application.id``, default ``duet-flights-service`` as run by ``duet speed``) on the input
topics, compares them with the end offsets, and records an ``AssetObservation`` of the
``speed_layer`` asset with the lag per topic. Needs a configured cluster (``KafkaResource``
with ``bootstrap_servers`` or ``$KAFKA_BOOTSTRAP_SERVERS``); otherwise it skips.
"""

import os
import uuid

import dagster as dg

from pipelines.assets.publish import SPEED_LAYER_KEY
from pipelines.partitions import DAILY_2013
from pipelines.resources import KafkaResource, LakeResource
from pipelines.schedules import recompute_job
from pipelines.speed_service import SERVICE_APP_ID
from pipelines.topologies.flights import INPUT_TOPICS

__all__ = ["consumer_lag", "new_kafka_data", "pending_records", "speed_layer_lag"]

#: Environment variable naming the observed application id.
APP_ID_ENV = "DUET_SPEED_APPLICATION_ID"


def consumer_lag(bootstrap: str, group: str, topics: list[str]) -> dict[str, int]:
    """``{topic: end offset - committed offset}`` summed over partitions (a partition
    without a committed offset counts from its start)."""
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


@dg.sensor(
    name="speed_layer_lag",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Observes the speed layer's consumer lag on the input topics.",
)
def speed_layer_lag(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult | dg.SkipReason:
    """Record the lag of the speed layer as an observation of ``speed_layer``."""
    bootstrap = kafka.configured_bootstrap()
    if not bootstrap:
        return dg.SkipReason("no Kafka cluster configured (set KAFKA_BOOTSTRAP_SERVERS)")
    group = os.environ.get(APP_ID_ENV, SERVICE_APP_ID)
    try:
        lag = consumer_lag(bootstrap, group, list(INPUT_TOPICS))
    except Exception as exc:  # the cluster may be down: report, do not crash the daemon
        return dg.SkipReason(f"cannot read offsets from {bootstrap}: {exc}")
    metadata: dict[str, object] = {f"lag_{t}": dg.MetadataValue.int(n) for t, n in lag.items()}
    metadata["lag_total"] = dg.MetadataValue.int(sum(lag.values()))
    metadata["application_id"] = dg.MetadataValue.text(group)
    return dg.SensorResult(asset_events=[dg.AssetObservation(asset_key=SPEED_LAYER_KEY, metadata=metadata)])


def pending_records(bootstrap: str, lake: str, topics: list[str]) -> tuple[dict[str, int], dict[str, dict[int, int]]]:
    """``({topic: records in Kafka not archived in <lake>/raw/<topic>}, {topic: {partition:
    end offset}})``. A missing topic counts as empty.

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


@dg.sensor(
    name="new_kafka_data",
    job=recompute_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Starts recompute_job when the input topics hold records not yet archived in the lake.",
)
def new_kafka_data(context: dg.SensorEvaluationContext, kafka: KafkaResource,
                   lake: LakeResource) -> dg.RunRequest | dg.SkipReason:
    """Request a recompute when Kafka holds records the lake lacks (one run per end offsets)."""
    bootstrap = kafka.configured_bootstrap()
    if not bootstrap:
        return dg.SkipReason("no Kafka cluster configured (set KAFKA_BOOTSTRAP_SERVERS)")
    try:
        pending, ends = pending_records(bootstrap, str(lake.root()), list(INPUT_TOPICS))
    except Exception as exc:  # the cluster may be down: report, do not crash the daemon
        return dg.SkipReason(f"cannot read offsets from {bootstrap}: {exc}")
    new = {t: n for t, n in pending.items() if n}
    if not new:
        return dg.SkipReason("no new records in " + ", ".join(INPUT_TOPICS))
    run_key = ";".join(f"{t}:" + ",".join(f"{p}={o}" for p, o in sorted(ends[t].items())) for t in sorted(ends))
    last = DAILY_2013.get_last_partition_key()
    context.log.info(f"new records: {new}")
    return dg.RunRequest(run_key=run_key, partition_key=last,
                         tags={"duet/trigger": "new_kafka_data", "duet/new_records": str(sum(new.values()))})
