"""Order-preserving key encoding used by stores and internal topics when no serde is given.

``str`` sorts as UTF-8 text, ``int`` numerically (sign-flipped big-endian), ``bytes`` as
bytes; anything else is pickled (tag ``P``). A one-byte tag keeps types apart.
"""
from __future__ import annotations

import pickle
import struct
from typing import Any

from ..serde import Serde


def encode_key(key: Any) -> bytes:
    if isinstance(key, str):
        return b"S" + key.encode("utf-8")
    if isinstance(key, bool):
        return b"P" + pickle.dumps(key, protocol=5)
    if isinstance(key, int) and -(2**63) <= key < 2**63:
        return b"I" + struct.pack(">Q", key + 2**63)
    if isinstance(key, bytes):
        return b"B" + key
    return b"P" + pickle.dumps(key, protocol=5)


def decode_key(data: bytes) -> Any:
    tag, body = data[:1], data[1:]
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
