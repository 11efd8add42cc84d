"""Segmented bytes stores: the bottom of window and session stores, dropping expired data
by whole time segments (Kafka's ``AbstractRocksDBSegmentedBytesStore`` over
``KeyValueSegments``, and ``InMemoryWindowStore``'s segment map).

A key ends with its time: the window start (window stores, followed by a 4-byte sequence
number when duplicates are retained) or the session end (session stores, followed by the
start), big-endian. Its segment is ``time / segment_interval_ms`` (Java's division, as
Kafka's ``Segments#segmentId``). A put advances the store's observed stream time (the
largest time put); segments older than ``segment_id(observed stream time - retention)``
are then dropped, and a put into one of them is skipped, as Kafka's segmented store.
Every window or session a drop removes is expired by the stores' finer filter
(``time <= observed stream time - retention``) already.

The record cache of a caching store keeps serving a clean entry after its window or
session expired (:class:`~.stores.cache._Cache`); its value is read from the bytes
store. ``keep_if`` (the cache's ``is_clean``) keeps those entries readable: a drop moves
the entries of the dropped segments that are still cached clean into an in-memory
``retained`` store, and a put into a dropped segment goes there too. Entries leave it
when the cache says they stopped being clean (:meth:`SegmentedBytesStore.release_retained`,
the cache's ``on_unclean``), and a put into a dropped segment that the cache did not keep
clean (an eviction) at the next drop. No step walks ``retained`` or the live segments: a
drop costs the entries of the dropped segments plus the puts into dropped segments since
the previous one, whatever the history kept (Kafka's ``AbstractSegments#cleanupExpiredSegments``
drops whole segments and never visits the survivors).

RocksDB: one database per store at ``<task dir>/rocksdb/<store>``; a segment is a key
prefix (its id, 8 bytes big-endian) and a drop a batch of point deletes of its keys:
creating and dropping a RocksDB instance or column family per segment costs 5-7 ms here,
about 10,000 times a year of flights; range deletes slow every later read (see
:meth:`RocksDBSegmentedBytesStore._drop`). A database written by an older duet
without segments is moved into the segmented layout when opened (nothing is lost).
"""
from __future__ import annotations

import heapq
import logging
import shutil
import struct
from abc import abstractmethod
from operator import itemgetter
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

from .backends import BytesStore, InMemoryBytesStore, RdictOwner, open_rdict, rdict_range

log = logging.getLogger(__name__)

_Q = struct.Struct(">q")
_SEG = struct.Struct(">Q")
#: Kafka's smallest segment interval (``Stores.persistentWindowStore``: max(retention / 2, 60 s)), ms
MIN_SEGMENT_INTERVAL_MS = 60_000
#: a key no segment prefix can be (a prefix is the segment id + 2**63, so 0x7f or 0x80 for
#: any time of this era):
#: marks a RocksDB database written in the segmented layout
_LAYOUT_MARKER = b"\xff" + b"duet.segmented.v1"
_NO_SEGMENT = -(2**63)
#: added to a segment id in its key prefix, so that the prefixes sort as the ids
_BIAS = 2**63
#: puts into dropped segments kept in ``retained`` before the cache's verdict on them is read
_MAX_UNCONFIRMED = 1_000


class CleanEntries(Protocol):
    """What a segmented bytes store needs of a record cache (:class:`~.stores.cache._Cache`)."""

    on_unclean: Callable[[list[bytes]], None] | None

    def is_clean(self, kb: bytes) -> bool: ...


def default_segment_interval(retention_ms: int) -> int:
    """Kafka's default segment interval of a window or session store: ``max(retention / 2,
    60,000)`` ms."""
    return max(retention_ms // 2, MIN_SEGMENT_INTERVAL_MS)


def _java_div(a: int, b: int) -> int:
    """``a / b`` as Java's long division (rounded toward zero)."""
    q = abs(a) // b
    return q if a >= 0 else -q


class SegmentedBytesStore(BytesStore):
    """A bytes store whose keys end with a time (see the module docstring), split into
    segments of ``segment_interval_ms`` of that time; segments older than the retention
    (ms) are dropped. ``time_offset`` is the position of the 8-byte time counted from the
    key's end (8: window start; 12: window start and sequence number; 16: session end
    and start).

    Subclasses store the segments: :class:`InMemorySegmentedBytesStore`,
    :class:`RocksDBSegmentedBytesStore`.
    """

    def __init__(self, name: str, retention_ms: int, segment_interval_ms: int, time_offset: int) -> None:
        if segment_interval_ms <= 0:
            raise ValueError(f"segment interval of store {name} must be positive, got {segment_interval_ms} ms")
        self.name = name
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms
        self.time_offset = time_offset
        #: the largest time put (ms), -1 before any
        self.observed_stream_time = -1
        #: segments below it are dropped
        self.min_live_segment = _NO_SEGMENT
        #: keys of dropped segments to keep readable (the record cache's ``is_clean``)
        self.keep_if: Callable[[bytes], bool] | None = None
        self.retained: BytesStore = InMemoryBytesStore(name)
        #: keys put into ``retained`` since the last drop, not yet checked with ``keep_if``
        self._unconfirmed: list[bytes] = []
        #: segments dropped so far (a metric, and for tests)
        self.segments_dropped = 0

    def retain_clean_entries_of(self, cache: "CleanEntries") -> None:
        """Keep the entries ``cache`` (the record cache of the store above) holds clean
        readable after their segment is dropped, until the cache stops holding them clean
        (see the module docstring)."""
        self.keep_if = cache.is_clean
        cache.on_unclean = self.release_retained

    # -- what subclasses store
    @abstractmethod
    def _segment_ids(self) -> list[int]:
        """The ids of the live segments holding data, ascending."""

    @abstractmethod
    def _get(self, segment: int, key: bytes) -> bytes | None: ...

    @abstractmethod
    def _put(self, segment: int, key: bytes, value: bytes | None) -> None: ...

    @abstractmethod
    def _range(self, segment: int, lo: bytes | None, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]: ...

    @abstractmethod
    def _drop(self, segments: list[int], visit: Callable[[bytes, bytes], None] | None) -> None:
        """Delete every entry of ``segments``, passing each to ``visit`` (when given) first,
        in one pass over them."""

    # -- the bytes store
    def get(self, key: bytes) -> bytes | None:
        time = _Q.unpack_from(key, len(key) - self.time_offset)[0]
        segment = time // self.segment_interval_ms if time >= 0 else _java_div(time, self.segment_interval_ms)
        if segment >= self.min_live_segment:
            return self._get(segment, key)
        return self.retained.get(key) if self.keep_if is not None else None

    def observe(self, time: int) -> None:
        """Advance the observed stream time to ``time`` (ms) if it is later, dropping the
        segments that expire. A put does it with its key's time; a caching store above calls
        it with its own stream time before it writes evicted or flushed windows, which lag
        it: without it, a window put a retention late went into a live segment and was
        dropped with it at the next write (a RocksDB put, a segment scan and a delete per
        evicted window in a cache that holds more than the retention)."""
        if time > self.observed_stream_time:
            self.observed_stream_time = time
            min_live = _java_div(time - self.retention_ms, self.segment_interval_ms)
            if min_live > self.min_live_segment:
                self._advance(min_live)

    def put(self, key: bytes, value: bytes | None) -> None:
        time = _Q.unpack_from(key, len(key) - self.time_offset)[0]
        if time > self.observed_stream_time:
            self.observe(time)
        segment = time // self.segment_interval_ms if time >= 0 else _java_div(time, self.segment_interval_ms)
        if segment >= self.min_live_segment:
            self._put(segment, key, value)
        elif self.keep_if is not None:
            # Kafka skips a put into an expired segment; the record cache may still read it.
            # Whether the cache keeps it clean is known after the put (the flush marks it
            # clean next), so it is checked later, before more than 1,000 wait
            if value is not None:
                if len(self._unconfirmed) >= _MAX_UNCONFIRMED:
                    self._confirm_retained()
                self._unconfirmed.append(key)
            self.retained.put(key, value)

    def _advance(self, min_live: int) -> None:
        """Drop the segments below ``min_live``, keeping what the cache still reads."""
        self.min_live_segment = min_live
        expired = [s for s in self._segment_ids() if s < min_live]
        if not expired:
            return
        keep = self.keep_if
        visit: Callable[[bytes, bytes], None] | None = None
        if keep is not None:
            put = self.retained.put

            def visit(k: bytes, v: bytes) -> None:
                if keep(k):
                    put(k, v)

            self._confirm_retained()
        self._drop(expired, visit)
        self.segments_dropped += len(expired)

    def _confirm_retained(self) -> None:
        """Remove the keys put into ``retained`` since the last check that the cache does
        not keep clean (a put evicted dirty, or a removal forgotten)."""
        keep = self.keep_if
        retained = self.retained
        for k in self._unconfirmed:
            if keep is None or not keep(k):
                retained.put(k, None)
        self._unconfirmed.clear()

    def release_retained(self, keys: Iterable[bytes]) -> None:
        """Forget ``keys`` (serialized store keys) in ``retained``: the record cache no
        longer holds them clean (its ``on_unclean``). Costs one delete per key, absent
        ones included."""
        retained = self.retained
        for k in keys:
            retained.put(k, None)

    def range(self, lo: bytes | None, hi: bytes | None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key <= hi`` of every live segment (and the retained ones),
        merged in key order (descending if ``reverse``)."""
        its = [self._range(s, lo, hi, reverse) for s in self._segment_ids() if s >= self.min_live_segment]
        if self.keep_if is not None and self.retained.approximate_num_entries():
            its.append(self.retained.range(lo, hi, reverse))
        if len(its) == 1:
            return its[0]
        return heapq.merge(*its, key=itemgetter(0), reverse=reverse)

    def scan(self, lo: bytes | None, hi: bytes | None, time_from: int | None = None,
             time_to: int | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key <= hi``, segment after segment (no merge), skipping the
        segments wholly outside ``[time_from, time_to]`` (ms); then the retained ones."""
        interval = self.segment_interval_ms
        first = self.min_live_segment if time_from is None else max(self.min_live_segment, _java_div(time_from, interval))
        last = None if time_to is None else _java_div(time_to, interval)
        for segment in self._segment_ids():
            if segment >= first and (last is None or segment <= last):
                yield from self._range(segment, lo, hi, False)
        if self.keep_if is not None and self.retained.approximate_num_entries():
            yield from self.retained.range(lo, hi)

    def live_segments(self) -> list[int]:
        """The ids of the live segments holding data, ascending."""
        return [s for s in self._segment_ids() if s >= self.min_live_segment]


class InMemorySegmentedBytesStore(SegmentedBytesStore):
    """Segments as sorted dicts in memory (Kafka's InMemoryWindowStore's segment map)."""

    def __init__(self, name: str, retention_ms: int, segment_interval_ms: int, time_offset: int) -> None:
        super().__init__(name, retention_ms, segment_interval_ms, time_offset)
        self._segments: dict[int, InMemoryBytesStore] = {}

    def _segment_ids(self) -> list[int]:
        return sorted(self._segments)

    def _get(self, segment: int, key: bytes) -> bytes | None:
        store = self._segments.get(segment)
        return None if store is None else store.get(key)

    def _put(self, segment: int, key: bytes, value: bytes | None) -> None:
        store = self._segments.get(segment)
        if store is None:
            if value is None:
                return
            store = self._segments[segment] = InMemoryBytesStore(self.name)
        store.put(key, value)

    def _range(self, segment: int, lo: bytes | None, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        return self._segments[segment].range(lo, hi, reverse)

    def _drop(self, segments: list[int], visit: Callable[[bytes, bytes], None] | None) -> None:
        for segment in segments:
            store = self._segments.pop(segment)
            if visit is not None:
                for k, v in store.range(None, None):
                    visit(k, v)
            store.close()

    def approximate_num_entries(self) -> int:
        return sum(s.approximate_num_entries() for s in self._segments.values())

    def close(self) -> None:
        for store in self._segments.values():
            store.close()
        self._segments.clear()


class RocksDBSegmentedBytesStore(RdictOwner, SegmentedBytesStore):
    """Segments as key prefixes of one RocksDB database at ``<directory>/rocksdb/<name>``
    (the module docstring says why not one instance per segment, as Kafka)."""

    def __init__(self, name: str, directory: Path, retention_ms: int, segment_interval_ms: int, time_offset: int) -> None:
        super().__init__(name, retention_ms, segment_interval_ms, time_offset)
        path = Path(directory) / "rocksdb" / name
        legacy = path.with_name(name + ".unsegmented")
        if legacy.exists():  # a move interrupted: start it again
            shutil.rmtree(path, ignore_errors=True)
        elif (path / "CURRENT").exists() and not self._has_marker(path):
            path.rename(legacy)
        self._db = open_rdict(path)
        self.path = path
        self._closed = False
        self._live: set[int] = set()
        it = self._db.iter()
        it.seek_to_first()
        while it.valid():  # one seek per segment
            k = it.key()
            if k == _LAYOUT_MARKER or len(k) < 8:
                break
            segment = _SEG.unpack_from(k)[0] - _BIAS
            self._live.add(segment)
            it.seek(self._prefix(segment + 1))
        if legacy.exists():
            self._move_in(legacy)
        self._db[_LAYOUT_MARKER] = b""

    @staticmethod
    def _has_marker(path: Path) -> bool:
        db = open_rdict(path)
        try:
            return db.get(_LAYOUT_MARKER) is not None or next(iter(db.keys()), None) is None
        finally:
            db.close()

    def _move_in(self, legacy: Path) -> None:
        """Put every entry of the unsegmented database at ``legacy`` (written by an older
        duet) into the segments, then delete it."""
        old = open_rdict(legacy)
        moved = 0
        try:
            for k, v in old.items():
                self.put(k, v)
                moved += 1
        finally:
            old.close()
        self._db.flush()
        shutil.rmtree(legacy)
        log.info("store %s: moved %d entries into time segments (%d segments live)", self.name, moved, len(self._live))

    @staticmethod
    def _prefix(segment: int) -> bytes:
        return _SEG.pack(segment + _BIAS)

    def _segment_ids(self) -> list[int]:
        return sorted(self._live)

    def get(self, key: bytes) -> bytes | None:
        # SegmentedBytesStore.get with _get inlined: one Python frame per read (hot path)
        time = _Q.unpack_from(key, len(key) - self.time_offset)[0]
        segment = time // self.segment_interval_ms if time >= 0 else _java_div(time, self.segment_interval_ms)
        if segment >= self.min_live_segment:
            return self._db.get(_SEG.pack(segment + _BIAS) + key)
        return self.retained.get(key) if self.keep_if is not None else None

    def _get(self, segment: int, key: bytes) -> bytes | None:
        return self._db.get(_SEG.pack(segment + _BIAS) + key)

    def _put(self, segment: int, key: bytes, value: bytes | None) -> None:
        if value is None:
            if segment in self._live:
                self._db.delete(_SEG.pack(segment + _BIAS) + key)
            return
        live = self._live
        if segment not in live:
            live.add(segment)
        self._db[_SEG.pack(segment + _BIAS) + key] = value

    def _range(self, segment: int, lo: bytes | None, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        prefix = self._prefix(segment)
        n = len(prefix)
        # no key is the next prefix itself (every key ends with 8 bytes of time after it)
        upper = prefix + hi if hi is not None else self._prefix(segment + 1)
        for k, v in rdict_range(self._db, prefix + (lo or b""), upper, reverse):
            yield k[n:], v

    def _drop(self, segments: list[int], visit: Callable[[bytes, bytes], None] | None) -> None:
        # one point delete per key, in a write batch: a RocksDB range delete per drop is
        # cheaper to write, but every read then checks the memtable's range tombstones, and
        # a backlog of short windows drops a segment a minute (measured here: a put and a
        # get cost 18 us after 5,000 range deletes, 700-1,000 us after 25,000). One
        # iterator per segment, for the deletes and ``visit``.
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        delete = batch.delete
        for segment in segments:
            for k, v in rdict_range(self._db, self._prefix(segment), self._prefix(segment + 1)):
                delete(k)
                if visit is not None:
                    visit(k[_SEG.size:], v)
        self._db.write(batch)
        self._live.difference_update(segments)
