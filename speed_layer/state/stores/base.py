"""What every store kind shares: the value types, the key encodings' structs, and
:class:`_StoreBase` (bytes store, serdes, changelog logger, the cache's flush/persist/close).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from ...serde import Serde
from ..backends import BytesStore


Logger = Callable[[bytes, bytes | None, int], None]
FlushListener = Callable[[Any, "ValueAndTimestamp | None", "ValueAndTimestamp | None"], None]

_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_I = struct.Struct(">I")
_MAX = 2**63 - 1
_MIN = -(2**63)
#: the largest timestamp (ms): Java's ``Long.MAX_VALUE``
MAX_TIMESTAMP = _MAX


class ValueAndTimestamp(NamedTuple):
    """A value with the timestamp (ms) of the record that last updated it (immutable; a
    named tuple: one is created per store access)."""

    value: Any
    timestamp: int


#: ``ValueAndTimestamp(value, timestamp)`` without the named tuple's Python ``__new__``
#: frame: ``_vt(_VT, (value, timestamp))`` (hot paths)
_VT = ValueAndTimestamp
_vt = tuple.__new__


@dataclass(frozen=True)
class VersionedRecord:
    """One version of a key: valid from ``timestamp`` (ms) until ``valid_to`` (exclusive;
    None for the latest)."""

    value: Any
    timestamp: int
    valid_to: int | None = None


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix`` (None
    when there is none: ``prefix`` is empty or all ``0xff``)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class _StoreBase:
    def __init__(self, name: str, backend: BytesStore, key_serde: Serde[Any], value_serde: Serde[Any], logger: Logger | None) -> None:
        self.name = name
        self.backend = backend
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.logger = logger
        self.open = True

    def _write(self, kb: bytes, vb: bytes | None, timestamp: int) -> None:
        self.backend.put(kb, vb)
        if self.logger is not None:
            self.logger(kb, vb, timestamp)

    #: values are stored as ``8-byte timestamp + value bytes`` (Kafka's ValueAndTimestamp)
    timestamped = False

    def _decode_value(self, vb: bytes | None) -> ValueAndTimestamp | None:
        if vb is None:
            return None
        if self.timestamped:
            return _vt(_VT, (self.value_serde.deserialize(vb[8:]), _Q.unpack_from(vb)[0]))
        return _vt(_VT, (self.value_serde.deserialize(vb), -1))

    def _encode_value(self, vt: ValueAndTimestamp | None) -> bytes | None:
        if vt is None or vt.value is None:
            return None
        vb = self.value_serde.serialize(vt.value) or b""
        return _Q.pack(vt.timestamp) + vb if self.timestamped else vb

    def restore(self, kb: bytes, vb: bytes | None) -> None:
        """Apply one changelog record (no logging)."""
        self.backend.put(kb, vb)

    #: the record cache of a caching store (a ``_Cache`` or a dict), None without caching
    cache: Any = None
    #: Kafka's sendOldValues for the flush listener: when off, a flushed update is passed
    #: without its old value, and the old value is read from the bytes store only for a
    #: delete (to skip deletes of absent keys), as Kafka's caching stores
    send_old_values = True

    def _clean_keys(self) -> "Callable[[bytes], bool] | None":
        """The record cache's ``is_clean`` while it holds clean entries (a read through the
        cache then also returns an expired entry still cached clean), else None."""
        cache = self.cache
        return cache.is_clean if cache is not None and cache.clean else None

    def _evict(self) -> None:
        """Write the least recently updated cache entry through (caching stores)."""
        raise TypeError(f"store {self.name} has no record cache")

    def _flush_old(self, kb: bytes, deleted: bool) -> "ValueAndTimestamp | None":
        """The bytes store's value of ``kb`` before a cache flush writes over it, when the
        flush listener needs it (old values sent, or a delete); else None."""
        if self.flush_listener is None or not (deleted or self.send_old_values):
            return None
        return self._decode_value(self.backend.get(kb))

    #: writes the processor that owns this store defers to the commit (a suppress buffer's
    #: keys changed since the last commit, as Kafka's InMemoryTimeOrderedKeyValueChangeBuffer
    #: logs its dirty keys in ``flush``); the task calls it after every store's
    #: :meth:`flush`, so the updates caches forward at the commit are written too
    pending_writer: "Callable[[], None] | None" = None

    def flush_cache(self) -> None:
        """Write dirty cache entries through (and to the flush listener) in update order."""
        while self.cache:
            self._evict()

    def flush(self) -> None:
        """Flush the record cache (if any) downstream and into the bytes store. Cheap:
        RocksDB's memtable is not written to disk (see :meth:`persist`)."""
        self.flush_cache()

    def persist(self) -> None:
        """Flush the cache and make the bytes store durable on disk (RocksDB memtable
        flush); called before a checkpoint file is written."""
        self.flush()
        self.backend.flush()

    def close(self) -> None:
        self.open = False
        self.backend.close()

    @property
    def persistent(self) -> bool:
        return self.backend.persistent

    def approximate_num_entries(self) -> int:
        """Approximate number of entries in the bytes store (RocksDB's estimate)."""
        return self.backend.approximate_num_entries()

    def state_metrics(self) -> dict[str, int]:
        """The bytes store's KIP-607 property metrics (``BytesStore.state_metrics``)."""
        return self.backend.state_metrics()


def _hashable(key: Any) -> bool:
    if type(key) is str:  # the common case, without a hash call
        return True
    try:
        hash(key)
        return True
    except TypeError:
        return False
