"""The record collector's delivery reports on a real broker: a changelog's acknowledged
offsets are recorded (checkpoints write them), an output topic's are not (its sends get
the error-only callback), and a failed delivery to either kind of topic is raised at the
next ``flush`` naming the topic (Kafka's ``RecordCollectorImpl#checkForException``)."""
from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from speed_layer.errors import StreamsException
from speed_layer.runtime.record_collector import KafkaRecordCollector, PartitionCounts


def _create(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # max.message.bytes 2,000: a 10 kB record fails with MSG_SIZE_TOO_LARGE
    futures = admin.create_topics([NewTopic(t, 2, 1, config={"max.message.bytes": "2000"}) for t in topics])
    for f in futures.values():
        f.result(30)


@pytest.mark.parametrize("changelog", [True, False])
def test_delivery_reports_by_kind_of_topic(kafka_bootstrap: str, unique_name: str, changelog: bool) -> None:
    topic = f"{unique_name}-{'changelog' if changelog else 'output'}"
    _create(kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    collector = KafkaRecordCollector(producer, PartitionCounts(kafka_bootstrap, {topic: 2}))
    if changelog:
        collector.report_offsets(topic)
    for i in range(3):
        collector.send(topic, b"k", b"v%d" % i, 1_000 + i, [], 1)
    collector.flush()
    assert collector.acked_offsets == ({(topic, 1): 3} if changelog else {})

    collector.send(topic, b"k", b"x" * 10_000, 2_000, [], 0)
    with pytest.raises(StreamsException, match=f"Error encountered sending record to topic {topic}"):
        collector.flush()
    collector.flush()  # the error is raised once
    collector.close()


def test_a_topic_registered_after_sends_gets_its_reports_and_tracking(kafka_bootstrap: str, unique_name: str) -> None:
    """The collector caches per topic its callback and whether it is tracked: a topic
    registered as a changelog or tracked after sends to it (a task created later) gets
    the offsets and the pending timestamps from then on, and untracked, no longer."""
    topic = f"{unique_name}-late"
    _create(kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    collector = KafkaRecordCollector(producer, PartitionCounts(kafka_bootstrap, {topic: 2}))
    collector.send(topic, b"k", b"v", 1_000, [], 1)
    collector.flush()
    assert collector.acked_offsets == {}
    collector.track((topic, 0))
    collector.send(topic, b"k", b"v", 1_500, [], 0)
    assert collector.pending_timestamp((topic, 0), 0) == 1_500
    collector.flush()
    assert collector.acked_offsets == {(topic, 0): 1}
    collector.untrack((topic, 0))
    collector.send(topic, b"k", b"v", 1_700, [], 0)
    assert collector.pending_timestamp((topic, 0), 0) is None
    collector.report_offsets(topic)
    collector.send(topic, b"k", b"v", 1_800, [], 1)
    collector.flush()
    assert collector.acked_offsets == {(topic, 0): 2, (topic, 1): 2}
    collector.close()
