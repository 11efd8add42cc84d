"""The session store (Kafka's SessionStore and its caching layer).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from typing import Any, Callable

from ...serde import Serde
from ...windows import Window, Windowed
from ..backends import BytesStore
from .base import Logger, _QQ, _MAX, ValueAndTimestamp, _StoreBase
from .cache import _Cache


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
        self.cache: _Cache | None = _Cache(cache_max_entries) if caching else None
        #: serialized key -> its composite keys among the dirty cache entries, sorted (by
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
            if ck not in cache.entries:
                insort(self._cached_by_key.setdefault(kb, []), ck)
            cache.put(ck, session, aggregate)
            if len(cache.entries) > cache.max_entries:
                self._evict()
            return
        self._put_bytes(ck, None if aggregate is None else self.value_serde.serialize(aggregate), session.window.end)

    def _expired(self, end: int) -> bool:
        """Whether a session ending at ``end`` (ms) is expired in the bytes store (Kafka's
        segmented store: ``end < observed stream time - retention + 1``)."""
        return self.observed_stream_time >= 0 and end <= self.observed_stream_time - self.retention_ms

    def _put_bytes(self, ck: bytes, vb: bytes | None, end: int, keep_expired: bool = False) -> None:
        """Put into the bytes store (Kafka's segmented store's put): the session end
        advances the observed stream time; an expired session is dropped, unless
        ``keep_expired`` (a cache flush: a clean cache entry reads its value there; reads
        filter by retention, so nothing else sees it; a segmented bytes store keeps it only
        while the cache holds it clean, see :mod:`..segments`)."""
        if end > self.observed_stream_time:
            self.observed_stream_time = end
        if self._expired(end) and not keep_expired:
            return
        self._write(ck, vb, end)

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
        old_vb = self.backend.get(ck) if need_old and not self._expired(end) else None
        if aggregate is None and old_vb is None:
            return
        vb = None if aggregate is None else self.value_serde.serialize(aggregate)
        self._put_bytes(ck, vb, end, keep_expired=True)
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
        if aggregate is None:  # a removal of an expired session writes nothing: forget it
            self.cache.forget(ck)
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
            self._uncache(ck)
            self._flush_session(ck, session, aggregate)
            if aggregate is None:
                cache.forget(ck)
            else:
                cache.keep_clean(ck)

    def _cached(self, kb: bytes | None, lo_end: int = 0) -> list[tuple[bytes, Windowed[Any], Any]]:
        """``(composite key, session, aggregate or None)`` of the dirty cached sessions of
        ``kb`` (None: of every key) whose end is ``>= lo_end`` (ms), by end then start."""
        if not self.cache:
            return []
        entries = self.cache.entries
        if kb is None:
            return [(ck, sess, agg) for ck, (sess, agg) in entries.items() if sess.window.end >= lo_end]
        cks = self._cached_by_key.get(kb)
        if not cks:
            return []
        return [(ck, *entries[ck]) for ck in cks[bisect_left(cks, kb + _QQ.pack(max(lo_end, 0), 0)):]]

    def _live_from(self, earliest_session_end: int) -> int:
        """The smallest session end the bytes store returns (ms), Kafka's ``observed stream
        time - retention + 1``."""
        if self.observed_stream_time < 0:
            return earliest_session_end
        return max(earliest_session_end, self.observed_stream_time - self.retention_ms + 1)

    # -- reads
    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> list[tuple[Windowed[Any], Any]]:
        """Sessions of ``key`` with ``end >= earliest_session_end`` and
        ``start <= latest_session_start`` (ms), ordered by end then start. The bytes store
        returns unexpired sessions only; the cache every session it holds (Kafka's
        CachingSessionStore#findSessions merges the two)."""
        kb = self.key_serde.serialize(key) or b""
        lo_end = self._live_from(earliest_session_end)
        is_clean = self._clean_keys()
        scan_from = earliest_session_end if is_clean is not None else lo_end
        rows: dict[bytes, tuple[Windowed[Any], Any]] = {}
        for ck, vb in self.backend.scan(kb + _QQ.pack(max(scan_from, 0), 0), kb + _QQ.pack(_MAX, _MAX), max(scan_from, 0)):
            if ck[:-16] != kb:
                continue
            end, start = _QQ.unpack_from(ck, len(ck) - 16)
            if start <= latest_session_start and (end >= lo_end or (is_clean is not None and is_clean(ck))):
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
            hit = self.cache.entries.get(ck)
            if hit is not None:
                return hit[1]
        if self._expired(end) and (self.cache is None or not self.cache.is_clean(ck)):
            return None  # expired (Kafka's segmented store's get), and not cached
        vb = self.backend.get(ck)
        return None if vb is None else self.value_serde.deserialize(vb)

    def fetch(self, key: Any) -> list[tuple[Windowed[Any], Any]]:
        """Every session of ``key``: unexpired, or still cached."""
        return self.find_sessions(key, 0, _MAX)

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        """Every session (unexpired, or still cached), by serialized key, then end, then start."""
        rows: dict[bytes, tuple[Windowed[Any], Any]] = {}
        is_clean = self._clean_keys()
        for ck, vb in self.backend.scan(None, None):
            end, start = _QQ.unpack_from(ck, len(ck) - 16)
            if self._expired(end) and (is_clean is None or not is_clean(ck)):
                continue
            rows[ck] = (Windowed(self.key_serde.deserialize(ck[:-16]), Window(start, end)), self.value_serde.deserialize(vb))
        for ck, sess, agg in self._cached(None):
            rows[ck] = (sess, agg)
        return [rows[ck] for ck in sorted(rows) if rows[ck][1] is not None]
