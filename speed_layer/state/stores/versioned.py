"""The versioned key-value store (Kafka's VersionedKeyValueStore, KIP-889).
"""
from __future__ import annotations

from typing import Any, Iterator

from ...serde import Serde
from ..backends import BytesStore
from .base import Logger, _Q, _MAX, VersionedRecord, _StoreBase


_TOMBSTONE = b"\x00"


class VersionedKeyValueStore(_StoreBase):
    """A versioned key-value store (KIP-889): every version of a key within
    ``history_ms`` of the observed stream time (older versions are deleted when their key
    is put again, see :meth:`_drop_unreadable`). ``get(key)`` is the latest value,
    ``get(key, as_of_timestamp)`` the value valid at that time (None if deleted or older
    than the history retention)."""

    def __init__(self, name: str, backend: BytesStore, key_serde: Serde[Any], value_serde: Serde[Any], *, history_ms: int, logger: Logger | None = None) -> None:
        super().__init__(name, backend, key_serde, value_serde, logger)
        self.history_ms = history_ms
        self.observed_stream_time = -1

    def _decode(self, vb: bytes) -> Any:
        return None if vb == _TOMBSTONE else self.value_serde.deserialize(vb[1:])

    #: ``put`` return codes (Kafka's VersionedKeyValueStore): the put record is the latest
    #: version (no validTo), or it was older than the history retention and not put
    PUT_RETURN_CODE_VALID_TO_UNDEFINED = -1
    PUT_RETURN_CODE_NOT_PUT = -(2**63)

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        """Add the version of ``key`` valid from ``timestamp`` ms (``value`` None: a
        tombstone), as KIP-889's ``put``: returns the new version's validTo (the timestamp
        of the next newer version), ``PUT_RETURN_CODE_VALID_TO_UNDEFINED`` (-1) when it is
        the latest version, or ``PUT_RETURN_CODE_NOT_PUT`` (Long.MIN_VALUE) when
        ``timestamp`` is older than observed stream time - history retention (nothing is
        stored)."""
        if self.observed_stream_time >= 0 and timestamp < self.observed_stream_time - self.history_ms:
            return self.PUT_RETURN_CODE_NOT_PUT
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        kb = self.key_serde.serialize(key) or b""
        stamps = [ts for ts, _ in self._versions(kb)]
        newer = [ts for ts in stamps if ts > timestamp]
        vb = _TOMBSTONE if value is None else b"\x01" + (self.value_serde.serialize(value) or b"")
        self._write(kb + _Q.pack(timestamp), vb, timestamp)
        self._drop_unreadable(kb, stamps)
        return min(newer) if newer else self.PUT_RETURN_CODE_VALID_TO_UNDEFINED

    def _drop_unreadable(self, kb: bytes, stamps: list[int]) -> None:
        """Delete (and log the deletes of) the versions of ``kb`` no read can return any
        more: those older than its newest version at or before ``observed stream time -
        history retention``, which is the version valid at that time (a read as of an
        earlier time returns None). Kafka's RocksDBVersionedStore drops them by segments;
        duet per key, when the key is put, so a key's versions stop growing with time."""
        cutoff = self.observed_stream_time - self.history_ms
        floor = max((ts for ts in stamps if ts <= cutoff), default=None)
        if floor is None:
            return
        for ts in stamps:
            if ts < floor:
                self._write(kb + _Q.pack(ts), None, ts)

    def delete(self, key: Any, timestamp: int) -> VersionedRecord | None:
        old = self.get(key, timestamp)
        self.put(key, None, timestamp)
        return old

    def _versions(self, kb: bytes) -> list[tuple[int, bytes]]:
        return [(_Q.unpack_from(ck, len(ck) - 8)[0], vb) for ck, vb in self.backend.range(kb + _Q.pack(0), kb + _Q.pack(_MAX)) if ck[:-8] == kb]

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord | None:
        """The version of ``key`` valid at ``as_of_timestamp`` (latest when None)."""
        kb = self.key_serde.serialize(key) or b""
        versions = self._versions(kb)
        if as_of_timestamp is None:
            as_of_timestamp = _MAX
        elif self.observed_stream_time >= 0 and as_of_timestamp < self.observed_stream_time - self.history_ms:
            return None
        chosen = None
        valid_to = None
        for ts, vb in reversed(versions):
            if ts <= as_of_timestamp:
                chosen = (ts, vb)
                break
            valid_to = ts
        if chosen is None or chosen[1] == _TOMBSTONE:
            return None
        return VersionedRecord(self._decode(chosen[1]), chosen[0], valid_to)

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Latest non-deleted value of every key."""
        latest: dict[bytes, bytes] = {}
        for ck, vb in self.backend.range(None, None):
            latest[ck[:-8]] = vb
        for kb in sorted(latest):
            if latest[kb] != _TOMBSTONE:
                yield self.key_serde.deserialize(kb), self._decode(latest[kb])
