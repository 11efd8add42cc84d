"""The metadata committed with each input partition's offset (Kafka's
``TopicPartitionMetadata``, KIP-825): the partition time and the processor metadata."""
from __future__ import annotations

import base64
import binascii
import struct

__all__ = ["UNKNOWN_PARTITION_TIME", "decode_commit_metadata", "encode_commit_metadata"]

#: Kafka's ``RecordQueue.UNKNOWN``: no partition time
UNKNOWN_PARTITION_TIME = -1


def encode_commit_metadata(partition_time: int, processor_metadata: dict[str, int]) -> str:
    """Kafka's ``TopicPartitionMetadata#encode`` (version 2, KIP-825), the metadata string
    committed with each input partition's offset: base64 of the magic byte 2, the partition
    time (8 bytes, big endian), then ``ProcessorMetadata#serialize`` (nothing when empty,
    else the entry count, and per entry the key's UTF-8 length, the key and the value)."""
    out = [struct.pack(">bq", 2, partition_time)]
    if processor_metadata:
        out.append(struct.pack(">i", len(processor_metadata)))
        for key, value in processor_metadata.items():
            kb = key.encode()
            out.append(struct.pack(">i", len(kb)) + kb + struct.pack(">q", value))
    return base64.b64encode(b"".join(out)).decode("ascii")


def decode_commit_metadata(encoded: str | None) -> tuple[int, dict[str, int]]:
    """Kafka's ``TopicPartitionMetadata#decode``: ``(partition time, processor metadata)``;
    version 1 has the partition time only; an empty, unknown-version or invalid string
    gives ``(UNKNOWN_PARTITION_TIME, {})``."""
    if not encoded:
        return UNKNOWN_PARTITION_TIME, {}
    try:
        raw = base64.b64decode(encoded, validate=True)
        if not raw or raw[0] not in (1, 2):
            return UNKNOWN_PARTITION_TIME, {}
        (partition_time,) = struct.unpack_from(">q", raw, 1)
        meta: dict[str, int] = {}
        if raw[0] == 2 and len(raw) > 9:
            (n,) = struct.unpack_from(">i", raw, 9)
            pos = 13
            for _ in range(n):
                (klen,) = struct.unpack_from(">i", raw, pos)
                key = raw[pos + 4:pos + 4 + klen].decode()
                (value,) = struct.unpack_from(">q", raw, pos + 4 + klen)
                meta[key] = value
                pos += 12 + klen
        return partition_time, meta
    except (binascii.Error, struct.error, UnicodeDecodeError, ValueError):
        return UNKNOWN_PARTITION_TIME, {}
