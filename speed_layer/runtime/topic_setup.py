"""The topics a streams client checks and creates when it starts (Kafka's
``InternalTopicManager#setup``/``#makeReady``, with the source-topic check of
``StreamsPartitionAssignor``, which fails on missing source topics, and
``CopartitionedTopicsEnforcer`` through :func:`.internal_topics.plan_topology`).

:func:`setup_topics` reads the metadata of the topology's topics, plans the tasks and the
internal topics (:mod:`.internal_topics`), checks the global source and output topics
exist (Kafka Streams does not create them), creates the internal topics, and seeds the
client's :class:`.record_collector.PartitionCounts` with the partition counts and
``max.message.bytes`` of the topics the stream threads write to. Its broker calls follow
Kafka's timeout model (:mod:`.task_timeout`): retriable errors are retried every
``retry.backoff.ms`` until ``task.timeout.ms`` (ms).
"""
from __future__ import annotations

import logging
from typing import Any

from ..config import StreamsConfig
from ..errors import StreamsException, TaskTimeoutException, TopologyException
from ..graph.ops import SinkOp
from ..topology import Topology
from .admin import TopicError, admin_client, ensure_topics, max_message_bytes
from .client_configs import client_overrides
from .internal_topics import TopologyPlan, plan_topology
from .record_collector import PartitionCounts
from .task_timeout import TaskTimeout, retry_broker_call

log = logging.getLogger("speed_layer.streams")

__all__ = ["setup_topics"]


def setup_topics(topology: Topology, config: StreamsConfig, partition_counts: PartitionCounts) -> TopologyPlan:
    """Check and create the topics of ``topology`` for application ``config.application_id``
    (see the module docstring) and return its plan; ``partition_counts`` learns the
    partition counts of the sink, dead-letter and internal topics (as Kafka fetches the sink
    topics' metadata before processing, the first send after a broker restart needs no
    metadata request; topics named by a topic extractor are looked up on their first send).

    Raises:
        TaskTimeoutException: a broker call kept failing with retriable errors for
            ``task.timeout.ms``; the message names the call.
        StreamsException: an output topic is missing, an internal topic cannot be created,
            or a broker call fails with a non-retriable error.
        TopologyException: missing source or global source topics, or co-partitioned
            topics with different partition counts.
    """
    timeouts = TaskTimeout.of(config)
    admin = admin_client(config.bootstrap_servers, client_overrides(config, "admin."))
    md = retry_broker_call("metadata of the topology's topics (KafkaStreams.start)",
                           lambda request_s: admin.list_topics(timeout=request_s), timeouts, hint="check the brokers")

    def count(t: str) -> int | None:
        meta = md.topics.get(t)
        return len(meta.partitions) if meta is not None and meta.error is None and meta.partitions else None

    internal = set(topology.internal_topics)
    user_sources = {t for sub in topology.subtopologies() for t in sub.source_topics if t not in internal}
    plan = plan_topology(topology, config.application_id, {t: count(t) for t in user_sources})
    missing_globals = sorted(s.global_topic for s in topology.global_stores().values() if s.global_topic and count(s.global_topic) is None)
    if missing_globals:
        raise TopologyException(f"Missing global source topic(s) {missing_globals}: create them before starting the application")
    sinks = {n.op.topic for n in topology.nodes.values() if isinstance(n.op, SinkOp) and n.op.topic and not n.op.repartition}
    if config.dead_letter_queue_topic:
        sinks.add(config.dead_letter_queue_topic)
    missing_sinks = sorted(t for t in sinks if count(t) is None)
    if missing_sinks:
        raise StreamsException(f"Output topic(s) {missing_sinks} do not exist: create them before starting the application (Kafka Streams does not create them)")
    for t in sinks:
        partition_counts.set(t, count(t))  # type: ignore[arg-type]
    try:
        ensure_topics(config.bootstrap_servers, plan.topic_specs(config.replication_factor), timeouts=timeouts)
    except TopicError as exc:
        raise StreamsException(f"cannot create the internal topics: {exc}") from exc
    for t, n in plan.partitions.items():
        partition_counts.set(t, n)
    for spec in plan.changelogs.values():
        partition_counts.set(spec.name, spec.partitions)
    _seed_message_limits(config, admin, sinks | set(plan.repartition) | {s.name for s in plan.changelogs.values()},
                         partition_counts, timeouts)
    return plan


def _seed_message_limits(config: StreamsConfig, admin: Any, topics: set[str], partition_counts: PartitionCounts,
                         timeouts: TaskTimeout) -> None:
    """Look up the ``max.message.bytes`` of the topics the stream threads write to (the
    topology's sinks, the dead-letter topic, the internal topics): the record collectors
    fail a record larger than that before producing it, so that it fails alone (the
    broker rejects a whole batch and librdkafka, unlike Kafka's producer, does not
    split it). Skipped when the producer compresses (the broker checks the compressed
    batch) or the brokers refuse ``DescribeConfigs`` (the broker's check remains).

    Raises:
        TaskTimeoutException: the brokers did not answer within ``task.timeout.ms``.
    """
    producer = client_overrides(config, "producer.")
    if str(producer.get("compression.type", producer.get("compression.codec", "none"))).lower() != "none":
        return
    try:
        limits = retry_broker_call("max.message.bytes of the output topics (KafkaStreams.start)",
                                   lambda request_s: max_message_bytes(admin, topics, request_s), timeouts)
    except TaskTimeoutException:
        raise
    except StreamsException as exc:
        log.warning("%s: a record too large for its topic fails at the broker, with the records batched with it", exc)
        return
    partition_counts.set_max_message_bytes(limits)
