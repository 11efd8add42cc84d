"""Topic helpers against the session broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from speed_layer.admin import (
    TopicError,
    TopicMismatchError,
    TopicSpec,
    delete_topics,
    end_offsets,
    ensure_topics,
    topic_partitions,
)

pytestmark = pytest.mark.broker


def test_ensure_topics_is_idempotent(kafka_bootstrap: str, unique_name: str) -> None:
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    specs = [TopicSpec(a, 3, {"retention.ms": "-1"}), TopicSpec(b, 1, {"cleanup.policy": "compact"})]
    ensure_topics(kafka_bootstrap, specs)
    ensure_topics(kafka_bootstrap, specs)  # again: nothing to do
    assert topic_partitions(kafka_bootstrap, a) == 3
    assert topic_partitions(kafka_bootstrap, b) == 1

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, a)
    configs = admin.describe_configs([res])[res].result(timeout=10)
    assert configs["retention.ms"].value == "-1"
    res_b = ConfigResource(ConfigResource.Type.TOPIC, b)
    assert admin.describe_configs([res_b])[res_b].result(timeout=10)["cleanup.policy"].value == "compact"

    with pytest.raises(TopicMismatchError, match="3 partitions, expected 4"):
        ensure_topics(kafka_bootstrap, [TopicSpec(a, 4)])

    delete_topics(kafka_bootstrap, [a, b, f"{unique_name}-never-existed"])
    assert topic_partitions(kafka_bootstrap, a) is None
    assert topic_partitions(kafka_bootstrap, b) is None


def test_end_offsets(kafka_bootstrap: str, unique_name: str) -> None:
    topic = f"{unique_name}-t"
    ensure_topics(kafka_bootstrap, [TopicSpec(topic, 2)])
    assert end_offsets(kafka_bootstrap, topic) == {0: 0, 1: 0}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    assert end_offsets(kafka_bootstrap, topic) == {0: 3, 1: 2}
    assert end_offsets(kafka_bootstrap, topic, committed_only=True) == {0: 3, 1: 2}
    with pytest.raises(TopicError):
        end_offsets(kafka_bootstrap, f"{unique_name}-missing")
    delete_topics(kafka_bootstrap, [topic])
