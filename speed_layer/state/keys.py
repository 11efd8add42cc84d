"""Order-preserving key encoding used by stores and internal topics when no serde is given.

A ``str`` key is its UTF-8 bytes, exactly as ``Serdes.String()`` writes it, so a
repartition topic partitions text keys like any Kafka client (murmur2 of the same bytes)
and stays co-partitioned with user topics keyed by text. Other types start with a NUL
byte and a one-byte tag: ``int`` sorts numerically (sign-flipped big-endian), ``bytes`` as
bytes, anything else is pickled. (A text key that itself starts with NUL is tagged too.)
"""
from __future__ import annotations

import pickle
import struct
from typing import Any

from ..serde import Serde

_NUL = b"\x00"


def encode_key(key: Any) -> bytes:
    if isinstance(key, str):
        b = key.encode("utf-8")
        return b if not b.startswith(_NUL) else b"\x00S" + b
    if isinstance(key, bool):
        return b"\x00P" + pickle.dumps(key, protocol=5)
    if isinstance(key, int) and -(2**63) <= key < 2**63:
        return b"\x00I" + struct.pack(">Q", key + 2**63)
    if isinstance(key, bytes):
        return b"\x00B" + key
    return b"\x00P" + pickle.dumps(key, protocol=5)


def decode_key(data: bytes) -> Any:
    if not data.startswith(_NUL):
        return data.decode("utf-8")
    tag, body = data[1:2], data[2:]
    if tag == b"S":
        return body.decode("utf-8")
    if tag == b"I":
        return struct.unpack(">Q", body)[0] - 2**63
    if tag == b"B":
        return bytes(body)
    return pickle.loads(body)


#: the default key serde of stores and internal topics
ORDERED_KEY = Serde("OrderedKey", encode_key, decode_key)
#: the default value serde of stores and internal topics
PICKLE = Serde("Pickle", lambda v: pickle.dumps(v, protocol=5), pickle.loads)
