"""Partitioning as the Java client does it: ``Utils.toPositive(Utils.murmur2(key)) % n``.

The speed layer computes the partition of every keyed record it sends (sinks, repartition
topics, changelogs are sent to the task's partition) instead of leaving it to librdkafka,
so that the partition of a key is the same as with any Java producer using the default
partitioner (``BuiltInPartitioner.partitionForKey``) and deterministic across runs.
Records with a null key are spread round-robin (Java's producer uses sticky partitioning
for them; any spread is correct for unkeyed data).
"""
from __future__ import annotations

import functools
import itertools
import struct
import threading

__all__ = ["murmur2", "to_positive", "partition_for_key", "RoundRobin"]

_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Java's ``org.apache.kafka.common.utils.Utils.murmur2``: a signed 32-bit hash.

    Seed ``0x9747b28c``; 4-byte little-endian blocks; the tail handled as Java's
    fall-through switch; returns the value as a Java ``int`` (may be negative).
    """
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    nblocks = length >> 2
    if nblocks:
        for k in struct.unpack_from(f"<{nblocks}I", data):
            k = (k * _M) & _MASK
            k ^= k >> _R
            h = ((h * _M) ^ ((k * _M) & _MASK)) & _MASK
    end = nblocks << 2
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's ``Utils.toPositive``: ``n & 0x7fffffff`` (not ``abs``)."""
    return n & 0x7FFFFFFF


@functools.lru_cache(maxsize=1 << 16)
def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition of a serialized key among ``num_partitions`` (Java's default
    partitioner for keyed records). Cached: keys repeat (every update of an aggregate).

    Raises:
        ValueError: if ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be > 0, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class RoundRobin:
    """Spreads null-key records over a topic's partitions, one counter per topic."""

    def __init__(self) -> None:
        self._counters: dict[str, "itertools.count[int]"] = {}
        self._lock = threading.Lock()

    def next(self, topic: str, num_partitions: int) -> int:
        with self._lock:
            c = self._counters.setdefault(topic, itertools.count())
            return next(c) % num_partitions
