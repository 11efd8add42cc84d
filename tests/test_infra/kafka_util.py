"""Helpers for the infra tests: read a whole topic back, Java's murmur2 partitioner."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from speed_layer.admin import end_offsets


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30) -> list[Message]:
    """Every record of ``topic`` up to its current end offsets, partition by partition."""
    ends = end_offsets(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        positions = {p: 0 for p in ends}
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while any(positions[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"timed out reading {topic}: {positions} {ends}"
            for msg in consumer.consume(10_000, timeout=0.5):
                assert msg.error() is None, msg.error()
                out.append(msg)
                positions[msg.partition()] = msg.offset() + 1
        return out
    finally:
        consumer.close()


def java_murmur2_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % partitions`` as in the Java client."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= key[tail + 2] << 16
    if rest >= 2:
        h ^= key[tail + 1] << 8
    if rest >= 1:
        h ^= key[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions
