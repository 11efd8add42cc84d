"""The work of a caching window store's segment expiry, and of a cache flush that expires
segments (a commit, close()), does not depend on the history behind it: the entries the
cache still holds clean in dropped segments (``retained``) nor the live entries. Counted in
store operations (entries a segment or ``retained`` yields, gets, puts and deletes, calls of
the cache's ``is_clean``), not seconds, at a short and a long history; as Kafka's
``AbstractSegments#cleanupExpiredSegments``, which drops the expired segments whole and never
visits the others. Also: ``retained`` stays bounded by the cache's size. In-memory and
RocksDB, broker-free; about 5 s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from speed_layer import Serdes
from speed_layer.state.backends import InMemoryBytesStore
from speed_layer.state.segments import InMemorySegmentedBytesStore, RocksDBSegmentedBytesStore, SegmentedBytesStore
from speed_layer.state.stores import WindowStore

STR = Serdes.String()
LONG = Serdes.Long()
RETENTION = 100
INTERVAL = 50
SIZE = 10
KEYS = ("JFK", "LGA", "EWR")
#: larger than any history here: no clean entry ages out, so ``retained`` holds them all
MAX_ENTRIES = 20_000


class CountingBytesStore(InMemoryBytesStore):
    """An in-memory bytes store counting its operations (entries yielded by a range, gets,
    puts and deletes)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ops = 0

    def get(self, key: bytes) -> bytes | None:
        self.ops += 1
        return super().get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.ops += 1
        super().put(key, value)

    def range(self, lo: bytes | None, hi: bytes | None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        for kv in super().range(lo, hi, reverse):
            self.ops += 1
            yield kv


def _counting(base: type[SegmentedBytesStore]) -> type[SegmentedBytesStore]:
    class Counting(base):  # type: ignore[valid-type, misc]
        """``base`` counting the operations on its segments."""

        ops = 0

        def _get(self, segment: int, key: bytes) -> bytes | None:
            self.ops += 1
            return super()._get(segment, key)

        def _put(self, segment: int, key: bytes, value: bytes | None) -> None:
            self.ops += 1
            super()._put(segment, key, value)

        def _range(self, segment: int, lo: bytes | None, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
            for kv in super()._range(segment, lo, hi, reverse):
                self.ops += 1
                yield kv

    return Counting


class Counted:
    """A caching window store on a counting segmented store, with a counting ``retained``
    and ``is_clean``."""

    def __init__(self, kind: str, tmp: Path, max_entries: int = MAX_ENTRIES) -> None:
        if kind == "memory":
            self.seg: Any = _counting(InMemorySegmentedBytesStore)("w", RETENTION, INTERVAL, 8)
        else:
            self.seg = _counting(RocksDBSegmentedBytesStore)("w", tmp, RETENTION, INTERVAL, 8)
        self.store = WindowStore("w", self.seg, STR, LONG, window_size_ms=SIZE, retention_ms=RETENTION, caching=True,
                                 cache_max_entries=max_entries)
        assert self.store.cache is not None
        self.seg.retain_clean_entries_of(self.store.cache)
        self.seg.retained = self.retained = CountingBytesStore("w")
        is_clean = self.store.cache.is_clean
        self.clean_calls = 0

        def counted_is_clean(kb: bytes) -> bool:
            self.clean_calls += 1
            return is_clean(kb)

        self.seg.keep_if = counted_is_clean
        self.t = 0

    def ops(self) -> int:
        return int(self.seg.ops) + self.retained.ops + self.clean_calls

    def step(self) -> None:
        """One window of each key at the next window start."""
        for key in KEYS:
            self.store.put(key, self.t, self.t, self.t)
        self.t += SIZE

    def history(self, windows: int) -> None:
        """``windows`` windows per key, each committed (flushed, so kept clean)."""
        for _ in range(windows):
            self.step()
            self.store.flush_cache()


@pytest.fixture(params=["memory", "rocksdb"])
def kind(request: Any) -> str:
    return str(request.param)


def _expiry_ops(kind: str, tmp: Path, windows: int) -> tuple[int, int]:
    """(store operations of one commit that expires one segment, entries retained before it)
    after ``windows`` committed windows per key."""
    c = Counted(kind, tmp, MAX_ENTRIES)
    c.history(windows)
    # the next commit crosses a segment boundary: one segment (INTERVAL / SIZE windows a key) expires
    while (c.t // SIZE) % (INTERVAL // SIZE):
        c.history(1)
    dropped, retained = c.seg.segments_dropped, c.retained.approximate_num_entries()
    before = c.ops()
    c.history(1)
    assert c.seg.segments_dropped == dropped + 1
    ops = c.ops() - before
    c.store.close()
    return ops, retained


def test_one_segment_expiry_costs_the_same_after_a_long_history(kind: str, tmp_path: Path) -> None:
    short, short_retained = _expiry_ops(kind, tmp_path / "short", 30)
    long, long_retained = _expiry_ops(kind, tmp_path / "long", 3_000)
    assert long_retained > 50 * short_retained  # the long history kept its clean entries
    # the expired segment's own entries (5 windows x 3 keys) and the step's puts: ~40 operations
    assert long == short, (short, long)
    assert long < 100


def test_a_flush_expiring_many_segments_costs_per_entry_not_per_history(kind: str, tmp_path: Path) -> None:
    """A commit or close() flushing 200 windows of each key (40 segments expire in it)."""
    costs = []
    for windows in (30, 3_000):
        c = Counted(kind, tmp_path / str(windows))
        c.history(windows)
        for _ in range(200):
            c.step()
        before = c.ops()
        c.store.flush_cache()
        costs.append(c.ops() - before)
        c.store.close()
    assert costs[1] <= costs[0] + 20, costs  # the phase of the segment boundaries may differ by a segment
    assert costs[1] < 20 * 200 * len(KEYS), costs


def test_retained_entries_stay_within_the_cache(kind: str, tmp_path: Path) -> None:
    """Entries kept readable for the cache leave ``retained`` once no longer clean: it holds
    at most the cache's clean entries (2x its size) plus the puts not yet checked."""
    c = Counted(kind, tmp_path, max_entries=60)
    peak = 0
    for _ in range(2_000):
        c.history(1)
        peak = max(peak, c.retained.approximate_num_entries())
    assert 0 < peak <= 2 * 60, peak
    # every retained entry reads back through the store while clean; none once unclean
    cache = c.store.cache
    assert cache is not None
    for kb, _ in c.retained.range(None, None):
        assert kb in cache.clean
    c.store.close()


def test_rocksdb_stores_open_with_kafka_streams_table_options(tmp_path: Path) -> None:
    """As Kafka Streams' ``RocksDBStore#openDB``: Bloom filters (a get of an absent key, the
    first read of each new window, skips the files that cannot hold it), 16 MiB memtables,
    3 at most; read back from the OPTIONS file RocksDB writes for the open database."""
    seg = RocksDBSegmentedBytesStore("w", tmp_path, RETENTION, INTERVAL, 8)
    seg.close()
    text = "\n".join(p.read_text() for p in (tmp_path / "rocksdb" / "w").glob("OPTIONS-*"))
    assert "filter_policy=bloomfilter" in text
    assert "write_buffer_size=16777216" in text
    assert "max_write_buffer_number=3" in text


def test_windows_evicted_after_their_retention_never_enter_a_segment(kind: str, tmp_path: Path) -> None:
    """A cache holding more windows than the retention (the anchors' 10,000 entries against
    1 h of hourly windows) evicts windows that expired long before: the bytes store takes
    the cache's stream time first, so they go where expired writes go (``retained``, checked
    at the next drop) instead of into a live segment dropped at the next eviction (before:
    a segment put, a scan and a delete per evicted window)."""
    cached = 10 * RETENTION // SIZE  # windows per key the cache holds: ten retentions
    c = Counted(kind, tmp_path, max_entries=cached * len(KEYS))
    for _ in range(cached):  # fill the cache: nothing evicted, nothing written yet
        c.step()
    before = int(c.seg.ops)
    for _ in range(100):  # each step evicts one window per key, ten retentions old
        c.step()
    assert int(c.seg.ops) - before == 0
    # and a read of an evicted window still finds nothing (expired), as before
    assert c.store.fetch_one_with_timestamp("JFK", 0) is None
    c.store.close()
