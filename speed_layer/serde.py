"""Serializers and deserializers (Kafka's ``Serdes``).

A :class:`Serde` turns a Python value into ``bytes`` and back. ``None`` always maps to
``None`` (a tombstone or a null key), as in Kafka.
"""
from __future__ import annotations

import json
import pickle
import struct
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

import orjson

from .errors import SerializationException
from .windows import Window, Windowed

T = TypeVar("T")


@dataclass(frozen=True)
class Serde(Generic[T]):
    """A pair of functions ``serialize(value) -> bytes`` and ``deserialize(bytes) -> value``.

    ``name`` appears in error messages. Build your own with ``Serde(name, ser, de)``.
    """

    name: str
    serializer: Callable[[T], bytes]
    deserializer: Callable[[bytes], T]
    #: windowed serdes: the serde of the base key (a sink partitions windowed keys by it,
    #: as Kafka's WindowedStreamPartitioner); None otherwise
    inner: "Serde[Any] | None" = None

    def serialize(self, value: T | None) -> bytes | None:
        """Serialize; ``None`` stays ``None``.

        Raises:
            SerializationException: when the serializer fails.
        """
        if value is None:
            return None
        try:
            return self.serializer(value)
        except Exception as exc:  # noqa: BLE001 - re-raised with context
            raise SerializationException(f"{self.name} serde cannot serialize {value!r}: {exc}") from exc

    def deserialize(self, data: bytes | None) -> T | None:
        """Deserialize; ``None`` stays ``None``.

        Raises:
            SerializationException: when the bytes are not valid for this serde.
        """
        if data is None:
            return None
        try:
            return self.deserializer(data)
        except Exception as exc:  # noqa: BLE001 - re-raised with context
            raise SerializationException(f"{self.name} serde cannot deserialize {data[:64]!r}: {exc}") from exc


#: ``json.dumps(value, separators=(",", ":"), allow_nan=False)`` without building an
#: encoder per call
_json_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
#: values orjson would write otherwise than the standard library (subclasses of str, int,
#: dict, list; dataclasses; datetimes) raise instead, and go to the standard library
_ORJSON_OPTS = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
#: digits and "-" -> "0", "e" -> itself, everything else -> " ": in the translated bytes
#: "0e0" is a digit, "e", then a digit or "-": a float orjson writes with a negative
#: exponent ("1e-7"), where Python's repr pads the exponent ("1e-07"). (orjson 3.13 writes
#: positive exponents as repr does, "1e+16"; a string such as "9E", the carrier code, or
#: "one-way" keeps orjson's bytes)
_FLOAT_SHAPE = bytes(0x30 if 0x30 <= i <= 0x39 or i == 0x2D else i if i == 0x65 else 0x20 for i in range(256))
#: digits -> "0", everything else -> " ": a run of 19 "0"s in the translated bytes is a
#: run of 19 digits, an integer that may not fit in 64 bits, which orjson would read as a
#: float (the standard library reads it as an exact int); faster than a regex
_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_DIGITS = b"0" * 19
_JSONDecodeError = orjson.JSONDecodeError

# (the checks below use ``bytes.find`` and ``int in bytes``: CPython's ``bytes in bytes``
# first tries the needle as an int and raises and clears a TypeError, ~0.1 us a call)


def _json_dumps(value: Any) -> bytes:
    """``json.dumps(value, separators=(",", ":"), allow_nan=False).encode()``, byte for byte
    (keys are stored and partitioned by these bytes), with orjson where its output is
    provably the same: it is ASCII without DEL (the standard library escapes the rest as
    ``\\uXXXX``), has no ``null`` (orjson writes NaN and infinities as null, the
    standard library rejects them), no ``0.0000`` (orjson writes floats in [1e-5, 1e-4)
    so, repr as ``1e-05``) and no negative exponent after a digit (orjson's ``1e-7``,
    repr's ``1e-07``). Anything else, and anything orjson refuses (ints beyond 64 bits,
    non-string keys, subclasses, unknown types), is encoded by the standard library.
    orjson also writes ``uuid.UUID`` and ``enum.Enum`` members that the standard library
    rejects. The common value pays four C calls of a few tens of ns: the rare shapes are
    found by plain searches, a translation runs only when ``e-`` occurs."""
    try:
        out = orjson.dumps(value, option=_ORJSON_OPTS)
    except TypeError:
        return _json_encode(value).encode()
    if (out.isascii() and 0x7F not in out and out.find(b"null") < 0 and out.find(b"0.0000") < 0
            and (out.find(b"e-") < 0 or out.translate(_FLOAT_SHAPE).find(b"0e0") < 0)):
        return out
    return _json_encode(value).encode()


def _json_loads(data: bytes) -> Any:
    """``json.loads(data)``, the same values for every input, with orjson where it reads
    the same: anything orjson rejects (NaN, Infinity, 1e400, a BOM, UTF-16/32, lone
    surrogates) or may read differently (integers beyond 64 bits) goes to ``json.loads``."""
    if len(data) < 19 or data.translate(_DIGITS).find(_LONG_DIGITS) < 0:
        try:
            return orjson.loads(data)
        except _JSONDecodeError:
            pass
    return json.loads(data)


def _windowed_json_ser(inner: Serde[Any]) -> Callable[[Windowed[Any]], bytes]:
    def ser(w: Windowed[Any]) -> bytes:
        key = w.key
        if inner.name != "JSON":
            raw = inner.serialize(key)
            key = raw.decode() if raw is not None else None
        return _json_dumps({"key": key, "window_start": w.window.start, "window_end": w.window.end})

    return ser


def _windowed_json_de(inner: Serde[Any]) -> Callable[[bytes], Windowed[Any]]:
    def de(data: bytes) -> Windowed[Any]:
        obj = _json_loads(data)
        key = obj["key"]
        if inner.name != "JSON" and key is not None:
            key = inner.deserialize(key.encode())
        return Windowed(key, Window(int(obj["window_start"]), int(obj["window_end"])))

    return de


class Serdes:
    """Factories of the built-in serdes (Kafka's ``Serdes``)."""

    @staticmethod
    def String() -> Serde[str]:  # noqa: N802 - Kafka's name
        """UTF-8 text. (``str.encode`` and ``bytes.decode``, whose default is UTF-8, are C
        functions: no Python frame per key or value, as a lambda would cost.)"""
        return Serde("String", str.encode, bytes.decode)

    @staticmethod
    def Long() -> Serde[int]:  # noqa: N802
        """8-byte big-endian signed integer (Java long)."""
        return Serde("Long", lambda v: struct.pack(">q", v), lambda b: struct.unpack(">q", b)[0])

    @staticmethod
    def Integer() -> Serde[int]:  # noqa: N802
        """4-byte big-endian signed integer (Java int)."""
        return Serde("Integer", lambda v: struct.pack(">i", v), lambda b: struct.unpack(">i", b)[0])

    @staticmethod
    def Double() -> Serde[float]:  # noqa: N802
        """8-byte IEEE 754 big-endian (Java double)."""
        return Serde("Double", lambda v: struct.pack(">d", v), lambda b: struct.unpack(">d", b)[0])

    @staticmethod
    def Bytes() -> Serde[bytes]:  # noqa: N802
        """Raw bytes, unchanged."""
        return Serde("Bytes", bytes, bytes)

    @staticmethod
    def JSON() -> Serde[Any]:  # noqa: N802
        """Compact UTF-8 JSON; NaN is rejected (serialize ``None`` instead)."""
        return Serde("JSON", _json_dumps, _json_loads)

    @staticmethod
    def Pickle() -> Serde[Any]:  # noqa: N802
        """Python pickle: any Python value; only for state private to one application."""
        return Serde("Pickle", lambda v: pickle.dumps(v, protocol=5), pickle.loads)

    @staticmethod
    def WindowedJSON(inner: Serde[Any] | None = None) -> Serde[Windowed[Any]]:  # noqa: N802
        """A windowed key as JSON ``{"key": k, "window_start": ms, "window_end": ms}``; the
        inner key is kept as JSON (``inner`` None or JSON) or as the text of ``inner``."""
        inner = inner or Serdes.JSON()
        return Serde("WindowedJSON", _windowed_json_ser(inner), _windowed_json_de(inner), inner)

    @staticmethod
    def TimeWindowed(inner: Serde[Any], window_size_ms: int) -> Serde[Windowed[Any]]:  # noqa: N802
        """Kafka's binary TimeWindowedSerde: ``inner key bytes + 8-byte start``; the end is
        ``start + window_size_ms``."""

        def ser(w: Windowed[Any]) -> bytes:
            return (inner.serialize(w.key) or b"") + struct.pack(">q", w.window.start)

        def de(b: bytes) -> Windowed[Any]:
            start = struct.unpack(">q", b[-8:])[0]
            return Windowed(inner.deserialize(b[:-8]), Window(start, start + window_size_ms))

        return Serde("TimeWindowed", ser, de, inner)

    @staticmethod
    def SessionWindowed(inner: Serde[Any]) -> Serde[Windowed[Any]]:  # noqa: N802
        """Kafka's binary SessionWindowedSerde: ``inner key bytes + 8-byte end + 8-byte start``."""

        def ser(w: Windowed[Any]) -> bytes:
            return (inner.serialize(w.key) or b"") + struct.pack(">qq", w.window.end, w.window.start)

        def de(b: bytes) -> Windowed[Any]:
            end, start = struct.unpack(">qq", b[-16:])
            return Windowed(inner.deserialize(b[:-16]), Window(start, end))

        return Serde("SessionWindowed", ser, de, inner)
