"""KIP-825: an ON_WINDOW_CLOSE aggregation keeps its last emit time in the processor
metadata committed with the task's offsets, so that a restarted task does not emit again
the windows it emitted before.

Ported as data from Apache Kafka's tests:
- ``KStreamWindowAggregateTest#shouldEmitFromLastEmitTime`` (streams/src/test/java/org/apache/
  kafka/streams/kstream/internals/KStreamWindowAggregateTest.java): a new processor on the
  same task context (same processor metadata and store) continues from the last emit time;
- ``TopicPartitionMetadataTest`` (streams/src/test/java/org/apache/kafka/streams/processor/
  internals/TopicPartitionMetadataTest.java): the commit metadata's encoding (version 2:
  partition time and ``ProcessorMetadata``), its version 1, empty, unknown and invalid forms;
- ``ProcessorMetadata#update`` (merge by key, the maximum wins), as ``StreamTask`` merges the
  metadata of the task's partitions.
The broker test runs the same windows through :class:`KafkaStreams`, closes it and starts a
new instance on the same application id and state (a restart).
"""
from __future__ import annotations

import base64
import struct
import time
from typing import Any

import pytest

from speed_layer import Materialized, Serdes, StreamsBuilder, TimeWindows
from speed_layer.config import EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION
from speed_layer.options import Consumed, Produced
from speed_layer.processor.factory import create_processor
from speed_layer.runtime.commit_metadata import UNKNOWN_PARTITION_TIME, decode_commit_metadata, encode_commit_metadata
from speed_layer.testing import TopologyTestDriver
from speed_layer.windows import EmitStrategy

STR = Serdes.String()


def _topology(strategy: str, topic: str = "topic1", out: str = "topic1-output") -> Any:
    """KStreamWindowAggregateTest#shouldEmitFromLastEmitTime: size 10, advance 5, grace 5,
    STRING_INIT ("0") and TOSTRING_ADDER (agg + "+" + value), a store kept one day (the
    test's ``Duration.ofDays(1)``), keys as ``Windowed#toString``."""
    b = StreamsBuilder()
    (b.stream(topic, Consumed.with_(STR, STR)).group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5).advance_by(5))
        .emit_strategy(EmitStrategy.on_window_close() if strategy == "ON_WINDOW_CLOSE" else EmitStrategy.on_window_update())
        .aggregate(lambda: "0", lambda k, v, agg: f"{agg}+{v}", Materialized.as_("store").with_value_serde(STR).with_caching_disabled()
                   .with_retention(86_400_000))
        .to_stream().map(lambda k, v: (str(k), v)).to(out, Produced.with_(STR, STR)))
    return b.build()


# (first three records, then D@25 on the new processor): expected forwards
_FIRST = {
    "ON_WINDOW_CLOSE": [("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 5)],
    "ON_WINDOW_UPDATE": [("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 5), ("[B@5/15]", "0+2", 5), ("[C@10/20]", "0+3", 15),
                         ("[C@15/25]", "0+3", 15)],
}
_AFTER = {
    # "Don't output old windows for new processor"
    "ON_WINDOW_CLOSE": [("[B@5/15]", "0+2", 5), ("[C@10/20]", "0+3", 15)],
    "ON_WINDOW_UPDATE": [("[D@20/30]", "0+4", 25), ("[D@25/35]", "0+4", 25)],
}


@pytest.mark.parametrize("strategy", ["ON_WINDOW_CLOSE", "ON_WINDOW_UPDATE"])
def test_new_processor_emits_from_the_last_emit_time(strategy: str) -> None:
    # Kafka: KStreamWindowAggregateTest#shouldEmitFromLastEmitTime (interval 0: the driver's default)
    topology = _topology(strategy)
    with TopologyTestDriver(topology) as d:
        t, out = d.create_input_topic("topic1", STR, STR), d.create_output_topic("topic1-output", STR, STR)
        for k, v, ts in [("A", "1", 0), ("B", "2", 5), ("C", "3", 15)]:
            t.pipe_input(k, v, ts)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == _FIRST[strategy]
        # a new processor on the same task (Kafka: processorSupplier.get() then init(context))
        (task,) = d.tasks
        task.processors = {n: create_processor(topology.nodes[n]) for n in task.processors}
        task.initialize()
        if strategy == "ON_WINDOW_CLOSE":
            assert task.processor_metadata == {"store": 10}
        t.pipe_input("D", "4", 25)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == _AFTER[strategy]


def test_commit_metadata_encodes_partition_time_and_processor_metadata() -> None:
    # Kafka: TopicPartitionMetadataTest#shouldGetPartitionTimeAndProcessorMeta and
    # #shouldEncodeDecodeVersionTwo; the bytes are ProcessorMetadata#serialize's
    encoded = encode_commit_metadata(100, {"some_key": 100})
    assert base64.b64decode(encoded) == struct.pack(">bqii", 2, 100, 1, 8) + b"some_key" + struct.pack(">q", 100)
    assert decode_commit_metadata(encoded) == (100, {"some_key": 100})


def test_commit_metadata_edge_forms() -> None:
    # Kafka: TopicPartitionMetadataTest#shouldEncodeDecodeEmptyMetaVersionTwo
    assert base64.b64decode(encode_commit_metadata(100, {})) == struct.pack(">bq", 2, 100)
    assert decode_commit_metadata(encode_commit_metadata(100, {})) == (100, {})
    # #shouldDecodeVersionOne
    assert decode_commit_metadata(base64.b64encode(struct.pack(">bq", 1, 100)).decode()) == (100, {})
    # #shouldDecodeEmptyStringVersionTwo (RecordQueue.UNKNOWN = -1)
    assert decode_commit_metadata("") == (UNKNOWN_PARTITION_TIME, {}) == (-1, {})
    assert decode_commit_metadata(None) == (-1, {})
    # #shouldReturnUnknownTimestampIfUnknownVersion (LATEST_MAGIC_BYTE + 1)
    assert decode_commit_metadata(base64.b64encode(bytes([3])).decode()) == (-1, {})
    # #shouldReturnUnknownTimestampIfInvalidMetadata
    assert decode_commit_metadata("{}") == (-1, {})


def test_task_merges_the_metadata_of_its_partitions_by_maximum() -> None:
    # Kafka: ProcessorMetadata#update ("Existing key's value will be updated to max"), as
    # StreamTask#initializeMetadata merges the metadata committed with each partition; the
    # task's stream time is the maximum of the partition times
    with TopologyTestDriver(_topology("ON_WINDOW_CLOSE")) as d:
        (task,) = d.tasks
        task.restore_metadata({("topic1", 0): encode_commit_metadata(30, {"store": 20, "a": 5}),
                               ("topic1", 1): encode_commit_metadata(40, {"store": 10, "b": 7}),
                               ("topic1", 2): None})
        assert task.processor_metadata == {"store": 20, "a": 5, "b": 7}
        assert task.stream_time == 40
        # the aggregation read its last emit time again
        agg = next(p for p in task.processors.values() if hasattr(p, "last_emit_window_close_time"))
        assert agg.last_emit_window_close_time == 20


def _records(kit: Any, topic: str) -> list[tuple[str, str, int]]:
    return [(m.key().decode(), m.value().decode(), m.timestamp()[1]) for m in kit.read(topic)]


def _wait_for(kit: Any, topic: str, n: int, streams: Any, timeout_s: float = 60) -> list[tuple[str, str, int]]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = _records(kit, topic)
        if len(got) >= n:
            return got
        assert time.monotonic() < deadline and not streams.errors, (got, streams.errors)
        time.sleep(0.1)


#: the broker test's timestamps are shifted by this much (a producer's timestamp 0 means "now")
BASE = 1_000_000


def _uninterrupted(rows: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """What one uninterrupted run emits (the driver): each closed window exactly once."""
    with TopologyTestDriver(_topology("ON_WINDOW_CLOSE")) as d:
        t, out = d.create_input_topic("topic1", STR, STR), d.create_output_topic("topic1-output", STR, STR)
        for k, v, ts in rows:
            t.pipe_input(k, v, ts)
        return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


@pytest.mark.broker
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_restarted_instance_does_not_emit_closed_windows_again(runtime_kit: Any, guarantee: str) -> None:
    # Kafka: KStreamWindowAggregateTest#shouldEmitFromLastEmitTime's records through a real
    # restart: the last emit time goes to the broker with the committed offsets (KIP-825)
    from confluent_kafka import Consumer, Producer, TopicPartition

    kit = runtime_kit
    t = kit.topics(inp=1, out=1)
    cfg = kit.config("app", **{EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION: 0, "processing.guarantee": guarantee})

    def produce(rows: list[tuple[str, str, int]]) -> None:
        p = Producer({"bootstrap.servers": kit.bootstrap})
        for k, v, ts in rows:
            p.produce(t["inp"], key=k.encode(), value=v.encode(), timestamp=ts)
        assert p.flush(30) == 0

    rows = [("A", "1", BASE), ("B", "2", BASE + 5), ("C", "3", BASE + 15), ("D", "4", BASE + 25)]
    first_three, everything = _uninterrupted(rows[:3]), _uninterrupted(rows)
    assert len(first_three) == 3 and len(everything) == 5  # (A in the window starting at BASE - 5 too)
    produce(rows[:3])
    first = kit.run(_topology("ON_WINDOW_CLOSE", t["inp"], t["out"]), cfg)
    assert _wait_for(kit, t["out"], len(first_three), first) == first_three
    assert first.close(30)
    # the last emit close time went to the broker with the offsets
    c = Consumer({"bootstrap.servers": kit.bootstrap, "group.id": cfg["application.id"], "enable.auto.commit": False})
    try:
        (committed,) = c.committed([TopicPartition(t["inp"], 0)], timeout=30)
    finally:
        c.close()
    assert committed.offset == 3
    assert decode_commit_metadata(committed.metadata) == (BASE + 15, {"store": BASE + 10})

    second = kit.run(_topology("ON_WINDOW_CLOSE", t["inp"], t["out"]), cfg)
    produce(rows[3:])
    got = _wait_for(kit, t["out"], len(everything), second)
    time.sleep(0.5)  # nothing more comes
    # without the restored last emit time, the restarted task emitted the first three again
    assert _records(kit, t["out"]) == got == everything
