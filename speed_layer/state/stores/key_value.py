"""The key-value store (Kafka's KeyValueStore / TimestampedKeyValueStore).
"""
from __future__ import annotations

from typing import Any, Iterator

from ...serde import Serde
from ..backends import BytesStore
from .base import Logger, FlushListener, ValueAndTimestamp, _prefix_end, _StoreBase, _hashable
from .cache import _Cache


class KeyValueStore(_StoreBase):
    """A key-value store (Kafka's KeyValueStore / TimestampedKeyValueStore).

    ``get``/``all``/``range`` return plain values (the IQ view); ``get_with_timestamp``
    returns :class:`ValueAndTimestamp` for timestamped stores. With caching, ``put`` keeps
    the update in the cache and the flush listener receives ``(key, new, old)`` at
    :meth:`flush_cache` (on commit) or on eviction.
    """

    def __init__(
        self,
        name: str,
        backend: BytesStore,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        timestamped: bool = False,
        caching: bool = False,
        logger: Logger | None = None,
        cache_max_entries: int = 10_000,
    ) -> None:
        super().__init__(name, backend, key_serde, value_serde, logger)
        self.timestamped = timestamped
        self.cache: _Cache | None = _Cache(cache_max_entries) if caching else None
        self.flush_listener: FlushListener | None = None

    # -- encoding
    def _kb(self, key: Any) -> bytes:
        kb = self.key_serde.serialize(key)
        if kb is None:
            raise ValueError(f"store {self.name}: key must not be None")
        return kb

    # -- reads
    def get_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        """The value and its timestamp, or None when absent."""
        if self.cache is not None:
            hit = self.cache.entries.get(key if _hashable(key) else self._kb(key))
            if hit is not None:
                return None if hit[1] is None or hit[1].value is None else hit[1]
        return self._decode_value(self.backend.get(self._kb(key)))

    def get(self, key: Any) -> Any:
        """The value of ``key``, or None when absent."""
        vt = self.get_with_timestamp(key)
        return None if vt is None else vt.value

    def _merged(self, lo: bytes | None, hi: bytes | None) -> list[tuple[bytes, Any, ValueAndTimestamp]]:
        rows: dict[bytes, tuple[Any, ValueAndTimestamp | None]] = {}
        for kb, vb in self.backend.range(lo, hi):
            rows[kb] = (None, self._decode_value(vb))
        if self.cache is not None:
            for key, vt in self.cache.entries.values():
                kb = self._kb(key)
                if (lo is None or kb >= lo) and (hi is None or kb <= hi):
                    rows[kb] = (key, vt)
        out = []
        for kb in sorted(rows):
            key, vt = rows[kb]
            if vt is not None and vt.value is not None:
                out.append((kb, key if key is not None else self.key_serde.deserialize(kb), vt))
        return out

    def range(self, from_key: Any = None, to_key: Any = None) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` with ``from_key <= key <= to_key`` in serialized-key order
        (None bounds are open)."""
        lo = None if from_key is None else self._kb(from_key)
        hi = None if to_key is None else self._kb(to_key)
        for _, key, vt in self._merged(lo, hi):
            yield key, vt.value

    def prefix_scan(self, prefix: Any) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` of the keys whose serialized form starts with the serialized
        ``prefix``, in serialized-key order (Kafka's ``ReadOnlyKeyValueStore#prefixScan``):
        the bytes store is read from the prefix to its end only, not to the store's end."""
        lo = self._kb(prefix)
        for kb, key, vt in self._merged(lo, _prefix_end(lo)):
            if kb.startswith(lo):
                yield key, vt.value

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` in serialized-key order."""
        return self.range(None, None)

    def range_with_key_bytes(self, from_key: Any = None, to_key: Any = None) -> list[tuple[bytes, Any, Any]]:
        """``(serialized key, key, value)`` of :meth:`range`: what a view over several
        stores merges in serialized-key order."""
        lo = None if from_key is None else self._kb(from_key)
        hi = None if to_key is None else self._kb(to_key)
        return [(kb, key, vt.value) for kb, key, vt in self._merged(lo, hi)]

    def all_with_timestamps(self) -> Iterator[tuple[Any, ValueAndTimestamp]]:
        for _, key, vt in self._merged(None, None):
            yield key, vt

    # -- writes
    def put(self, key: Any, value: Any, timestamp: int = -1) -> None:
        """Insert or update (``value`` None deletes). ``timestamp`` in ms.

        A cached delete keeps its timestamp (``ValueAndTimestamp(None, ts)``) so that the
        flushed tombstone carries the deleting record's timestamp, as Kafka's cache entries
        keep their record context."""
        vt = None if value is None else ValueAndTimestamp(value, timestamp)
        if self.cache is not None:
            vt = ValueAndTimestamp(value, timestamp)
            ck = key if _hashable(key) else self._kb(key)
            self.cache.put(ck, key, vt)
            if len(self.cache.entries) > self.cache.max_entries:
                self._evict()
            return
        self._write(self._kb(key), self._encode_value(vt), timestamp)

    def put_if_absent(self, key: Any, value: Any, timestamp: int = -1) -> Any:
        old = self.get(key)
        if old is None:
            self.put(key, value, timestamp)
        return old

    def put_all(self, entries: list[tuple[Any, Any]], timestamp: int = -1) -> None:
        for k, v in entries:
            self.put(k, v, timestamp)

    def delete(self, key: Any, timestamp: int = -1) -> Any:
        """Remove ``key``; returns the old value."""
        old = self.get(key)
        self.put(key, None, timestamp)
        return old

    # -- cache
    def _flush_entry(self, key: Any, vt: ValueAndTimestamp | None) -> None:
        kb = self._kb(key)
        deleted = vt is None or vt.value is None
        old = self._flush_old(kb, deleted)
        ts = vt.timestamp if vt is not None else (old.timestamp if old is not None else -1)
        self._write(kb, self._encode_value(vt), ts)
        if self.flush_listener is not None and not (deleted and old is None):
            self.flush_listener(key, vt, old if self.send_old_values else None)

    def _evict(self) -> None:
        assert self.cache is not None
        _, (key, vt) = self.cache.entries.popitem(last=False)
        self._flush_entry(key, vt)
