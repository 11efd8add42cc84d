"""The window store (Kafka's TimestampedWindowStore and its caching layer).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ...serde import Serde
from ...windows import Window, Windowed
from ..backends import BytesStore
from .base import Logger, _Q, _I, _MAX, ValueAndTimestamp, _VT, _vt, _StoreBase, _hashable
from .cache import _Cache


class WindowStore(_StoreBase):
    """A window store (Kafka's TimestampedWindowStore): values per ``(key, window start)``.

    Entries whose window start is ``<= observed stream time - retention`` are expired:
    puts of them are ignored and fetches skip them; ``build_store`` puts the store on a
    segmented bytes store (:mod:`..segments`), which deletes them by whole segments, as
    Kafka's segmented stores, so the data kept does not grow with stream time. With caching (Kafka's CachingWindowStore) a put is cached even when expired,
    and a cached window, dirty or clean, is returned by fetches until the cache drops it
    (:class:`~.cache._Cache`). ``retain_duplicates`` keeps every put (stream-stream join
    buffers) with a sequence number; such a store is never cached.
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
        #: a segmented bytes store's ``observe``: told this store's stream time before the
        #: cache writes windows through, so it drops what expired first
        self._observe: Callable[[int], None] | None = getattr(backend, "observe", None) if self.cache is not None else None

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
            if len(self.cache.entries) > self.cache.max_entries:
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

    def fold_windows(self, key: Any, starts: Sequence[int], timestamp: int, value: Any,
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
        entries = cache.entries
        get = entries.get
        for start in starts:
            ck = (key, start)
            # fetch_one_with_timestamp: a dirty entry, else below the cache
            hit = get(ck)
            if hit is not None:
                old = hit[1]
                if old is not None and old[0] is None:
                    old = None
            else:
                old = self._read_uncached(key, start)
            if old is None:
                vt = _vt(_VT, (value if initializer is None else aggregator(key, value, initializer()), timestamp))
            else:
                old_ts = old[1]
                vt = _vt(_VT, (aggregator(key, value, old[0]), timestamp if timestamp > old_ts else old_ts))
            # put: cached, even when expired (the bytes store drops it at the flush)
            if start > self.observed_stream_time:
                self.observed_stream_time = start
            entries[ck] = (ck, vt)
            entries.move_to_end(ck)
            if len(entries) > cache.max_entries:
                self._evict()

    def _read_uncached(self, key: Any, start: int) -> ValueAndTimestamp | None:
        """The window of ``key`` starting at ``start`` (ms) that the cache holds no dirty
        entry of, as ``fetch_one_with_timestamp`` reads it: from the bytes store; an expired
        window (start ``<=`` observed stream time - retention) reads as absent unless the
        cache still holds it clean (:meth:`_Cache.is_clean`)."""
        observed = self.observed_stream_time
        if observed >= 0 and start <= observed - self.retention_ms:
            cache = self.cache
            if cache is None or not cache.clean:
                return None
            composite = self._key_bytes(key) + _Q.pack(start)
            return self._decode_value(self.backend.get(composite)) if cache.is_clean(composite) else None
        return self._decode_value(self.backend.get(self._key_bytes(key) + _Q.pack(start)))

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
    def _flush_entry(self, key: Any, start: int, vt: ValueAndTimestamp | None) -> bytes:
        """Write one dirty window through, and to the flush listener; returns its
        serialized store key. An expired window is written too: reads filter it by
        retention, and a segmented bytes store skips it or, while the cache holds it clean,
        keeps it readable (:mod:`..segments`)."""
        kb = self._key_bytes(key) + _Q.pack(start)  # cached stores never retain duplicates
        deleted = vt is None or vt.value is None
        old = self._flush_old(kb, deleted)
        ts = vt.timestamp if vt is not None else (old.timestamp if old is not None else -1)
        self._write(kb, self._encode_value(vt), ts)
        if self.flush_listener is not None and not (deleted and old is None):
            self.flush_listener(Windowed(key, Window(start, start + self.window_size_ms)), vt,
                                old if self.send_old_values else None)
        return kb

    def _evict(self) -> None:
        assert self.cache is not None
        if self._observe is not None:
            self._observe(self.observed_stream_time)
        _, ((key, start), vt) = self.cache.entries.popitem(last=False)
        # not forgotten if it was clean before: a clean entry reads the bytes store, which
        # now holds this newer value (Kafka would no longer serve it once expired: a
        # difference only for an expired read of a window evicted dirty after it had been
        # flushed clean, within max entries flushes)
        self._flush_entry(key, start, vt)

    def flush_cache(self) -> None:
        """Write dirty cache entries through (and to the flush listener) in update order;
        each flushed window stays cached as a clean entry (:class:`_Cache`)."""
        cache = self.cache
        if cache is None:
            return
        entries = cache.entries
        if entries and self._observe is not None:
            self._observe(self.observed_stream_time)
        while entries:
            _, ((key, start), vt) = entries.popitem(last=False)
            kb = self._flush_entry(key, start, vt)
            if vt is not None and vt.value is not None:  # a delete reads as absent from the bytes store
                cache.keep_clean(kb)

    # -- reads
    def _rows(self, kb: bytes | None, time_from: int, time_to: int, retained_from_ms: int = 1) -> list[tuple[Any, int, ValueAndTimestamp]]:
        st = self.observed_stream_time
        lo_t = max(time_from, st - self.retention_ms + retained_from_ms, 0) if st >= 0 else max(time_from, 0)
        rows: dict[tuple[bytes, int, bytes], tuple[Any, ValueAndTimestamp | None]] = {}
        # Kafka's CachingWindowStore: cached windows are filtered by key and time only, so a
        # window still cached clean is returned after it expired in the bytes store
        cache = self.cache
        is_clean = self._clean_keys()
        lo_scan = max(time_from, 0) if is_clean is not None else lo_t
        if time_to < lo_scan:
            it: Any = ()
        elif kb is not None:
            lo = kb + _Q.pack(lo_scan)
            hi = kb + _Q.pack(time_to) + (b"\xff" * 4 if self.retain_duplicates else b"")
            it = self.backend.scan(lo, hi, lo_scan, time_to)
        else:
            it = self.backend.scan(None, None, lo_scan, time_to)
        for ck, vb in it:
            k, start = self._split(ck)
            if (kb is not None and k != kb) or not (lo_scan <= start <= time_to):
                continue
            if start < lo_t and (is_clean is None or not is_clean(ck)):
                continue
            rows[(k, start, ck)] = (None, self._decode_value(vb))
        if cache is not None:
            for (key, start), vt in cache.entries.values():  # a dirty entry wins
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
            ck = (key, window_start) if _hashable(key) else (self.key_serde.serialize(key), window_start)
            hit = self.cache.entries.get(ck)
            if hit is not None:
                vt = hit[1]
                return None if vt is None or vt.value is None else vt
        composite = self._composite(self.key_serde.serialize(key) or b"", window_start)
        if self._expired(window_start) and (self.cache is None or not self.cache.is_clean(composite)):
            return None
        return self._decode_value(self.backend.get(composite))

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
