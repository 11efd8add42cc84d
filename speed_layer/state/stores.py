"""Typed state stores over a :class:`BytesStore`, with optional record cache and changelog.

The layering is Kafka Streams' (typed/metered -> caching -> change-logging -> bytes store)
folded into one class per store kind:

* :class:`KeyValueStore` (optionally timestamped: values kept with their timestamp),
* :class:`WindowStore` (keys with a window start; retention by stream time),
* :class:`SessionStore` (keys with a session window ``[start, end]``),
* :class:`VersionedKeyValueStore` (every version of a key within a history retention).

Read methods are the interactive-query API; processors also use the write methods.
Every write that reaches the bytes store is sent to ``logger(key_bytes, value_bytes,
timestamp_ms)``, which appends to the changelog topic; ``restore`` applies changelog
records without logging them again.
"""
from __future__ import annotations

import struct
from bisect import bisect_left, insort
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

from ..serde import Serde
from ..windows import Window, Windowed
from .backends import BytesStore

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

    def _evict(self) -> None:
        """Write the least recently updated cache entry through (caching stores)."""
        raise TypeError(f"store {self.name} has no record cache")

    def _flush_old(self, kb: bytes, deleted: bool) -> "ValueAndTimestamp | None":
        """The bytes store's value of ``kb`` before a cache flush writes over it, when the
        flush listener needs it (old values sent, or a delete); else None."""
        if self.flush_listener is None or not (deleted or self.send_old_values):
            return None
        return self._decode_value(self.backend.get(kb))

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


class _Cache:
    """The record cache of one store (Kafka's NamedCache): dirty entries, flushed in order
    of their last update, and the clean entries a commit flushed.

    ``entries`` is an ``OrderedDict``: taking the eldest entry is O(1)
    (``popitem(last=False)``); with a plain dict, ``next(iter(d))`` after popping from the
    front scans the deleted slots, so a full cache evicting on every put, or a flush of
    100,000 entries, was quadratic.

    ``clean``: as Kafka's ``NamedCache#flush`` marks the flushed entries clean and keeps them
    (deletes are dropped), a window or session store keeps serving reads from them, also
    after the window or session expired in the bytes store (Kafka's CachingWindowStore and
    CachingSessionStore filter the cache by key and time only, never by retention). Clean
    entries count against ``max_entries``; the eldest is dropped before a dirty entry is
    evicted, so keeping them never changes when a dirty entry is flushed. A key-value store
    keeps none: its bytes store holds the same values, so they would change no read."""

    def __init__(self, max_entries: int, on_drop: Callable[[Any], None] | None = None) -> None:
        # cache key -> (typed key, ValueAndTimestamp | None), eldest update first
        self.entries: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()
        # cache key -> (typed key, ValueAndTimestamp), eldest flush first
        self.clean: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()
        self.max_entries = max_entries
        #: called with the cache key of each clean entry dropped to make room
        self.on_drop = on_drop

    def __len__(self) -> int:
        return len(self.entries)

    def put(self, ck: Any, key: Any, vt: "ValueAndTimestamp | None") -> None:
        entries = self.entries
        entries[ck] = (key, vt)
        entries.move_to_end(ck)
        if self.clean:
            self.clean.pop(ck, None)

    def get(self, ck: Any) -> tuple[Any, Any] | None:
        """The ``(typed key, ValueAndTimestamp | None)`` cached under ``ck``, dirty or clean."""
        hit = self.entries.get(ck)
        return self.clean.get(ck) if hit is None else hit

    def must_evict(self) -> bool:
        """Make room after a put: drop clean entries, eldest first, while the cache holds
        more than ``max_entries``; True when only dirty entries are left and one must be
        evicted (flushed)."""
        clean = self.clean
        while len(self.entries) + len(clean) > self.max_entries:
            if not clean:
                return True
            ck, _ = clean.popitem(last=False)
            if self.on_drop is not None:
                self.on_drop(ck)
        return False

    def keep_clean(self, ck: Any, key: Any, value: Any) -> None:
        """Keep an entry just flushed (taken out of ``entries``) as clean: the cache holds
        no more entries than before the flush."""
        self.clean[ck] = (key, value)


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



def _hashable(key: Any) -> bool:
    if type(key) is str:  # the common case, without a hash call
        return True
    try:
        hash(key)
        return True
    except TypeError:
        return False


class WindowStore(_StoreBase):
    """A window store (Kafka's TimestampedWindowStore): values per ``(key, window start)``.

    Entries whose window start is ``<= observed stream time - retention`` are expired:
    puts are ignored and fetches skip them (Kafka's segmented stores). ``retain_duplicates``
    keeps every put (stream-stream join buffers) with a sequence number.
    """

    def __init__(
        self,
        name: str,
        backend: BytesStore,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        window_size_ms: int,
        retention_ms: int,
        retain_duplicates: bool = False,
        timestamped: bool = True,
        caching: bool = False,
        logger: Logger | None = None,
        cache_max_entries: int = 10_000,
    ) -> None:
        super().__init__(name, backend, key_serde, value_serde, logger)
        self.window_size_ms = window_size_ms
        self.retention_ms = retention_ms
        self.retain_duplicates = retain_duplicates
        self.timestamped = timestamped
        self.observed_stream_time = -1
        self._seq = 0
        self._kb_memo: dict[str, bytes] = {}
        self.cache: _Cache | None = _Cache(cache_max_entries) if caching and not retain_duplicates else None
        self.flush_listener: Callable[[Windowed[Any], ValueAndTimestamp | None, ValueAndTimestamp | None], None] | None = None

    def _suffix_len(self) -> int:
        return 12 if self.retain_duplicates else 8

    def _composite(self, kb: bytes, start: int, seq: int = 0) -> bytes:
        out = kb + _Q.pack(start)
        return out + _I.pack(seq) if self.retain_duplicates else out

    def _split(self, ck: bytes) -> tuple[bytes, int]:
        n = self._suffix_len()
        return ck[:-n], _Q.unpack_from(ck, len(ck) - n)[0]

    def _expired(self, start: int) -> bool:
        return self.observed_stream_time >= 0 and start <= self.observed_stream_time - self.retention_ms

    def restore(self, kb: bytes, vb: bytes | None) -> None:
        self.observed_stream_time = max(self.observed_stream_time, self._split(kb)[1])
        super().restore(kb, vb)

    # -- writes
    def put(self, key: Any, value: Any, window_start: int, timestamp: int = -1) -> None:
        """Put the value of ``key`` in the window starting at ``window_start`` (ms);
        ``value`` None deletes (not with retain_duplicates)."""
        if window_start > self.observed_stream_time:
            self.observed_stream_time = window_start
        if self.cache is not None:
            # Kafka's CachingWindowStore caches (and later flushes and forwards) even a put
            # older than the retention; the bytes store below is what drops expired windows
            vt = ValueAndTimestamp(value, timestamp)  # a cached delete keeps its timestamp
            self.cache.put((key, window_start) if _hashable(key) else (self.key_serde.serialize(key), window_start), (key, window_start), vt)
            if len(self.cache.entries) + len(self.cache.clean) > self.cache.max_entries and self.cache.must_evict():
                self._evict()
            return
        if self._expired(window_start):
            return
        vt = None if value is None else ValueAndTimestamp(value, timestamp)
        kb = self.key_serde.serialize(key) or b""
        if self.retain_duplicates:
            if value is None:
                return
            self._seq = (self._seq + 1) & 0xFFFFFFFF
            self._write(self._composite(kb, window_start, self._seq), self._encode_value(vt), timestamp)
        else:
            self._write(self._composite(kb, window_start), self._encode_value(vt), timestamp)

    def fold_windows(self, key: Any, starts: list[int], timestamp: int, value: Any,
                     initializer: Callable[[], Any] | None, aggregator: Callable[[Any, Any, Any], Any]) -> None:
        """Aggregate one record into each window of ``starts`` (ms), in order: for each, read
        the window's aggregate (cache, then bytes store), put ``aggregator(key, value, old)``
        stamped with the larger of ``timestamp`` and the old timestamp; a window with no
        aggregate starts from ``initializer()``, or from ``value`` itself when
        ``initializer`` is None (reduce). The read, put and cache eviction of each window
        are those of ``fetch_one_with_timestamp`` then ``put`` (Kafka's
        KStreamWindowAggregate loop), in one call for the 24 windows a record of a 24 h
        hopping window advancing by 1 h updates. Windows aggregated before the aggregator
        raised are put; the exception propagates."""
        if self.cache is None or self.retain_duplicates or not _hashable(key):
            for start in starts:
                old = self.fetch_one_with_timestamp(key, start)
                if old is None:
                    self.put(key, value if initializer is None else aggregator(key, value, initializer()), start, timestamp)
                else:
                    self.put(key, aggregator(key, value, old.value), start, max(timestamp, old.timestamp))
            return
        cache = self.cache
        entries, clean = cache.entries, cache.clean
        get = entries.get
        move = entries.move_to_end
        max_entries = cache.max_entries
        retention = self.retention_ms
        kb: bytes | None = None
        observed = self.observed_stream_time
        expired_to = observed - retention if observed >= 0 else _MIN
        for start in starts:
            ck = (key, start)
            # fetch_one_with_timestamp: the cache (dirty, then clean) first; an expired
            # window reads as absent from the bytes store
            hit = get(ck)
            if hit is None and clean:
                hit = clean.get(ck)
            if hit is not None:
                old = hit[1]
                if old is not None and old[0] is None:
                    old = None
            elif start <= expired_to:
                old = None
            else:
                if kb is None:
                    kb = self._key_bytes(key)
                old = self._decode_value(self.backend.get(kb + _Q.pack(start)))
            if old is None:
                vt = _vt(_VT, (value if initializer is None else aggregator(key, value, initializer()), timestamp))
            else:
                old_ts = old[1]
                vt = _vt(_VT, (aggregator(key, value, old[0]), timestamp if timestamp > old_ts else old_ts))
            # put: cached, even when expired (the bytes store drops it at the flush)
            if start > observed:
                observed = self.observed_stream_time = start
                expired_to = observed - retention
            entries[ck] = (ck, vt)
            move(ck)
            if clean:
                clean.pop(ck, None)  # now dirty
            if len(entries) + len(clean) > max_entries and cache.must_evict():
                self._evict()

    def _key_bytes(self, key: Any) -> bytes:
        """The serialized ``key``; text keys memoized (a window store flushes and reads
        many windows of each key)."""
        if type(key) is not str:
            return self.key_serde.serialize(key) or b""
        memo = self._kb_memo
        kb = memo.get(key)
        if kb is None:
            if len(memo) >= 4096:
                memo.clear()
            kb = memo[key] = self.key_serde.serialize(key) or b""
        return kb

    # -- cache
    def _flush_entry(self, key: Any, start: int, vt: ValueAndTimestamp | None) -> None:
        kb = self._key_bytes(key) + _Q.pack(start)  # cached stores never retain duplicates
        deleted = vt is None or vt.value is None
        old = self._flush_old(kb, deleted)
        ts = vt.timestamp if vt is not None else (old.timestamp if old is not None else -1)
        self._write(kb, self._encode_value(vt), ts)
        if self.flush_listener is not None and not (deleted and old is None):
            self.flush_listener(Windowed(key, Window(start, start + self.window_size_ms)), vt,
                                old if self.send_old_values else None)

    def _evict(self) -> None:
        assert self.cache is not None
        _, ((key, start), vt) = self.cache.entries.popitem(last=False)
        self._flush_entry(key, start, vt)

    def flush_cache(self) -> None:
        """Write dirty cache entries through (and to the flush listener) in update order;
        each flushed window stays cached as a clean entry (:class:`_Cache`)."""
        cache = self.cache
        if cache is None:
            return
        while cache.entries:
            ck, (key_start, vt) = cache.entries.popitem(last=False)
            self._flush_entry(key_start[0], key_start[1], vt)
            if vt is not None and vt.value is not None:
                cache.keep_clean(ck, key_start, vt)


    # -- reads
    def _rows(self, kb: bytes | None, time_from: int, time_to: int, retained_from_ms: int = 1) -> list[tuple[Any, int, ValueAndTimestamp]]:
        st = self.observed_stream_time
        lo_t = max(time_from, st - self.retention_ms + retained_from_ms, 0) if st >= 0 else max(time_from, 0)
        rows: dict[tuple[bytes, int, bytes], tuple[Any, ValueAndTimestamp | None]] = {}
        if time_to < lo_t:
            it: Any = ()
        elif kb is not None:
            lo = kb + _Q.pack(lo_t)
            hi = kb + _Q.pack(time_to) + (b"\xff" * 4 if self.retain_duplicates else b"")
            it = self.backend.range(lo, hi)
        else:
            it = self.backend.range(None, None)
        for ck, vb in it:
            k, start = self._split(ck)
            if (kb is not None and k != kb) or not (lo_t <= start <= time_to):
                continue
            rows[(k, start, ck)] = (None, self._decode_value(vb))
        if self.cache is not None:
            # Kafka's CachingWindowStore: cached windows are filtered by key and time only,
            # so a clean entry is returned after the window expired in the bytes store
            for entries in (self.cache.clean, self.cache.entries):  # a dirty entry wins
                for (key, start), vt in entries.values():
                    k = self.key_serde.serialize(key) or b""
                    if (kb is None or k == kb) and time_from <= start <= time_to:
                        rows[(k, start, self._composite(k, start))] = (key, vt)
        out = []
        for (k, start, _ck) in sorted(rows):
            key, vt = rows[(k, start, _ck)]
            if vt is not None and vt.value is not None:
                out.append((key if key is not None else self.key_serde.deserialize(k), start, vt))
        return out

    def fetch(self, key: Any, time_from: int | None = None, time_to: int | None = None) -> Any:
        """``fetch(key, t)``: the value of the window of ``key`` starting at ``t`` (or None);
        ``fetch(key, from, to)``: ``[(window_start, value)]`` for windows starting in
        ``[from, to]`` (ms), ascending."""
        kb = self.key_serde.serialize(key) or b""
        if time_to is None:
            assert time_from is not None
            rows = self._rows(kb, time_from, time_from)
            return rows[0][2].value if rows else None
        return [(start, vt.value) for _, start, vt in self._rows(kb, time_from or 0, time_to)]

    def fetch_with_timestamps(self, key: Any, time_from: int, time_to: int) -> list[tuple[int, ValueAndTimestamp]]:
        """``[(window_start, ValueAndTimestamp)]`` of ``key`` for starts in ``[from, to]`` (ms)."""
        if time_from == time_to and not self.retain_duplicates:
            vt = self.fetch_one_with_timestamp(key, time_from)
            return [] if vt is None else [(time_from, vt)]
        kb = self.key_serde.serialize(key) or b""
        return [(start, vt) for _, start, vt in self._rows(kb, time_from, time_to)]

    def fetch_one_with_timestamp(self, key: Any, window_start: int) -> ValueAndTimestamp | None:
        """The value of ``key``'s window starting at ``window_start`` (ms), or None. A
        cached window is returned even when expired (Kafka's CachingWindowStore#fetch)."""
        if self.cache is not None:
            hit = self.cache.get((key, window_start) if _hashable(key) else (self.key_serde.serialize(key), window_start))
            if hit is not None:
                vt = hit[1]
                return None if vt is None or vt.value is None else vt
        if self._expired(window_start):
            return None
        return self._decode_value(self.backend.get(self._composite(self.key_serde.serialize(key) or b"", window_start)))

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[Windowed[Any], Any]]:
        """``[(Windowed(key, window), value)]`` for every key and window starting in
        ``[from, to]`` (ms), by key then start."""
        return [(Windowed(k, Window(s, s + self.window_size_ms)), vt.value) for k, s, vt in self._rows(None, time_from, time_to)]

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        """Every unexpired ``(Windowed(key, window), value)``."""
        return self.fetch_all(0, _MAX)

    def window_rows(self, time_from: int, time_to: int) -> list[tuple[Any, int, ValueAndTimestamp]]:
        """``(key, window_start, ValueAndTimestamp)`` of every unexpired window starting in
        ``[time_from, time_to]`` (ms), by serialized key then start (:meth:`fetch_all`'s)."""
        return self._rows(None, time_from, time_to)

    def time_ordered_rows(self, time_from: int, time_to: int) -> list[tuple[Any, int, ValueAndTimestamp]]:
        """``(key, window_start, ValueAndTimestamp)`` of every window starting in
        ``[time_from, time_to]`` (ms), by start then serialized key, as Kafka's time-ordered
        window store (``TimeFirstWindowKeySchema``) iterates them. That store keeps windows
        down to ``observed stream time - retention`` inclusive, one ms more than the
        key-ordered one (:meth:`fetch_all`), so the window closing exactly at retention is
        still returned."""
        rows = self._rows(None, time_from, time_to, retained_from_ms=0)
        ser = self.key_serde.serialize
        return sorted(rows, key=lambda r: (r[1], ser(r[0]) or b""))

    def all_with_timestamps(self) -> list[tuple[Windowed[Any], ValueAndTimestamp]]:
        """Every unexpired ``(Windowed(key, window), ValueAndTimestamp)``, by key then
        window start (duplicates of a join buffer each appear)."""
        return [(Windowed(k, Window(s, s + self.window_size_ms)), vt) for k, s, vt in self._rows(None, 0, _MAX)]


class SessionStore(_StoreBase):
    """A session store (Kafka's SessionStore): aggregates per ``Windowed(key, [start, end])``.

    Sessions whose end is ``<= observed stream time - retention`` are expired; the
    observed stream time is the bytes store's: the largest session end written to it (a
    cached put advances it only when flushed, as Kafka's segmented store). With
    caching (Kafka's CachingSessionStore), puts and removes stay in the cache until
    :meth:`flush_cache` (commit): a session removed and re-put within one commit reaches the
    flush listener once, as ``(session, new, old)`` with :class:`ValueAndTimestamp` values
    stamped with the session end; a removal of a session that never reached the store is
    not flushed at all. As Kafka's, the cache takes a put even of an expired session (the
    flush forwards it; the bytes store drops it), keeps flushed sessions as clean entries,
    and reads it without a retention filter: a cached store returns a session for as long
    as the cache holds it, also after it expired (:class:`_Cache`).
    """

    def __init__(self, name: str, backend: BytesStore, key_serde: Serde[Any], value_serde: Serde[Any], *, retention_ms: int,
                 logger: Logger | None = None, caching: bool = False, cache_max_entries: int = 10_000) -> None:
        super().__init__(name, backend, key_serde, value_serde, logger)
        self.retention_ms = retention_ms
        self.observed_stream_time = -1
        #: composite key -> (session, aggregate or None for a removal)
        self.cache: _Cache | None = _Cache(cache_max_entries, self._uncache) if caching else None
        #: serialized key -> its composite keys in the cache (dirty or clean), sorted (by
        #: end, then start: a lookup of one key's sessions bisects to the earliest end it wants)
        self._cached_by_key: dict[bytes, list[bytes]] = {}
        self.flush_listener: Callable[[Windowed[Any], ValueAndTimestamp | None, ValueAndTimestamp | None], None] | None = None

    def _ck(self, kb: bytes, start: int, end: int) -> bytes:
        return kb + _QQ.pack(end, start)

    def restore(self, kb: bytes, vb: bytes | None) -> None:
        end, _ = _QQ.unpack_from(kb, len(kb) - 16)
        self.observed_stream_time = max(self.observed_stream_time, end)
        super().restore(kb, vb)

    def put(self, session: Windowed[Any], aggregate: Any) -> None:
        """Store (``aggregate`` None: remove) the session ``session`` (ms bounds)."""
        kb = self.key_serde.serialize(session.key) or b""
        ck = self._ck(kb, session.window.start, session.window.end)
        cache = self.cache
        if cache is not None:
            if ck not in cache.entries and ck not in cache.clean:
                insort(self._cached_by_key.setdefault(kb, []), ck)
            cache.put(ck, session, aggregate)
            if len(cache.entries) + len(cache.clean) > cache.max_entries and cache.must_evict():
                self._evict()
            return
        self._put_bytes(ck, aggregate, session.window.end)

    def _put_bytes(self, ck: bytes, aggregate: Any, end: int) -> None:
        """Put into the bytes store (Kafka's segmented store's put): the session end
        advances the observed stream time; an expired session is dropped."""
        if end > self.observed_stream_time:
            self.observed_stream_time = end
        if end <= self.observed_stream_time - self.retention_ms:
            return
        self._write(ck, None if aggregate is None else self.value_serde.serialize(aggregate), end)

    def remove(self, session: Windowed[Any]) -> None:
        self.put(session, None)

    # -- cache
    def _uncache(self, ck: bytes) -> None:
        """Drop ``ck`` from the per-key index of cached sessions."""
        kb = ck[:-16]
        cks = self._cached_by_key[kb]
        del cks[bisect_left(cks, ck)]
        if not cks:
            del self._cached_by_key[kb]

    def _flush_session(self, ck: bytes, session: Windowed[Any], aggregate: Any) -> None:
        """Write one dirty session through, and to the flush listener."""
        # the old value is read only to skip the removal of an absent session, or when the
        # flush listener sends old values (Kafka's CachingSessionStore); the bytes store does
        # not return a session expired at its own observed stream time, which only its
        # writes advance (Kafka's segmented store's get), so the removal of a session
        # already expired there is not forwarded
        end = session.window.end
        need_old = aggregate is None or (self.flush_listener is not None and self.send_old_values)
        old_vb = self.backend.get(ck) if need_old and end > self.observed_stream_time - self.retention_ms else None
        if aggregate is None and old_vb is None:
            return
        self._put_bytes(ck, aggregate, end)
        if self.flush_listener is not None:
            new = ValueAndTimestamp(aggregate, end)  # a removal: value None, still stamped with the end
            send_old = old_vb is not None and self.send_old_values
            old = ValueAndTimestamp(self.value_serde.deserialize(old_vb), end) if send_old else None
            self.flush_listener(session, new, old)

    def _evict(self) -> None:
        """Flush the least recently updated dirty session (the cache is full); it leaves
        the cache."""
        assert self.cache is not None
        ck, (session, aggregate) = self.cache.entries.popitem(last=False)
        self._uncache(ck)
        self._flush_session(ck, session, aggregate)

    def flush_cache(self) -> None:
        """Flush every dirty session in update order; a flushed session stays cached as a
        clean entry, a flushed removal leaves the cache (Kafka's NamedCache#flush)."""
        cache = self.cache
        if cache is None:
            return
        while cache.entries:
            ck, (session, aggregate) = cache.entries.popitem(last=False)
            self._flush_session(ck, session, aggregate)
            if aggregate is None:
                self._uncache(ck)
            else:
                cache.keep_clean(ck, session, aggregate)

    def _cached(self, kb: bytes | None, lo_end: int = 0) -> list[tuple[bytes, Windowed[Any], Any]]:
        """``(composite key, session, aggregate or None)`` of the cached sessions (dirty
        or clean) of ``kb`` (None: of every key) whose end is ``>= lo_end`` (ms), by end
        then start."""
        cache = self.cache
        if cache is None or not self._cached_by_key:
            return []
        get = cache.get
        if kb is None:
            return [(ck, *get(ck)) for cks in self._cached_by_key.values() for ck in cks  # type: ignore[misc]
                    if _QQ.unpack_from(ck, len(ck) - 16)[0] >= lo_end]
        cks = self._cached_by_key.get(kb)
        if not cks:
            return []
        return [(ck, *get(ck)) for ck in cks[bisect_left(cks, kb + _QQ.pack(max(lo_end, 0), 0)):]]  # type: ignore[misc]

    # -- reads
    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> list[tuple[Windowed[Any], Any]]:
        """Sessions of ``key`` with ``end >= earliest_session_end`` and
        ``start <= latest_session_start`` (ms), ordered by end then start. The bytes store
        returns unexpired sessions only; the cache every session it holds (Kafka's
        CachingSessionStore#findSessions merges the two)."""
        kb = self.key_serde.serialize(key) or b""
        lo_end = max(earliest_session_end, self.observed_stream_time - self.retention_ms + 1) if self.observed_stream_time >= 0 else earliest_session_end
        rows: dict[bytes, tuple[Windowed[Any], Any]] = {}
        for ck, vb in self.backend.range(kb + _QQ.pack(max(lo_end, 0), 0), kb + _QQ.pack(_MAX, _MAX)):
            if ck[:-16] != kb:
                continue
            end, start = _QQ.unpack_from(ck, len(ck) - 16)
            if start <= latest_session_start:
                rows[ck] = (Windowed(key, Window(start, end)), self.value_serde.deserialize(vb))
        for ck, sess, agg in self._cached(kb, earliest_session_end):
            if sess.window.start <= latest_session_start:
                rows[ck] = (sess, agg)
        return [rows[ck] for ck in sorted(rows) if rows[ck][1] is not None]

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        """The aggregate of ``key``'s session ``[start, end]`` (ms), or None (also when
        expired in the bytes store and not cached)."""
        kb = self.key_serde.serialize(key) or b""
        ck = self._ck(kb, start, end)
        if self.cache is not None:
            hit = self.cache.get(ck)
            if hit is not None:
                return hit[1]
        if end <= self.observed_stream_time - self.retention_ms:  # expired (Kafka's segmented store's get)
            return None
        vb = self.backend.get(ck)
        return None if vb is None else self.value_serde.deserialize(vb)

    def fetch(self, key: Any) -> list[tuple[Windowed[Any], Any]]:
        """Every session of ``key``: unexpired, or still cached."""
        return self.find_sessions(key, 0, _MAX)

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        """Every session (unexpired, or still cached), by serialized key, then end, then start."""
        rows: dict[bytes, tuple[Windowed[Any], Any]] = {}
        for ck, vb in self.backend.range(None, None):
            end, start = _QQ.unpack_from(ck, len(ck) - 16)
            if self.observed_stream_time >= 0 and end <= self.observed_stream_time - self.retention_ms:
                continue
            rows[ck] = (Windowed(self.key_serde.deserialize(ck[:-16]), Window(start, end)), self.value_serde.deserialize(vb))
        for ck, sess, agg in self._cached(None):
            rows[ck] = (sess, agg)
        return [rows[ck] for ck in sorted(rows) if rows[ck][1] is not None]


_TOMBSTONE = b"\x00"


class VersionedKeyValueStore(_StoreBase):
    """A versioned key-value store (KIP-889): every version of a key within
    ``history_ms`` of the observed stream time. ``get(key)`` is the latest value,
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
        newer = [ts for ts, _ in self._versions(kb) if ts > timestamp]
        vb = _TOMBSTONE if value is None else b"\x01" + (self.value_serde.serialize(value) or b"")
        self._write(kb + _Q.pack(timestamp), vb, timestamp)
        return min(newer) if newer else self.PUT_RETURN_CODE_VALID_TO_UNDEFINED

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
