"""Window and session stores on segmented bytes stores (Kafka's segmented stores) against
the same stores on one unsegmented in-memory bytes store, which never deletes: every read
answers the same (the stores filter expired data themselves), with and without the record
cache, whose clean entries keep serving windows and sessions of dropped segments; and the
segmented store holds only the live segments, so a store's data stops growing with the
stream time. Also: a RocksDB store written by an older duet without segments is moved
into segments when opened, and the segments are found again after a restart; and a
versioned store deletes the versions no read can return. In-memory and RocksDB; about 15 s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speed_layer import Serdes, Window, Windowed
from speed_layer.graph.nodes import StoreSpec
from speed_layer.state.backends import InMemoryBytesStore, RocksDBBytesStore
from speed_layer.state.factories import build_store
from speed_layer.state.segments import (InMemorySegmentedBytesStore, RocksDBSegmentedBytesStore, SegmentedBytesStore,
                                        default_segment_interval)
from speed_layer.state.stores import SessionStore, VersionedKeyValueStore, WindowStore

STR = Serdes.String()
LONG = Serdes.Long()
RETENTION = 100
SIZE = 20


def _segmented(kind: str, tmp: Path, name: str, interval: int, offset: int) -> SegmentedBytesStore:
    if kind == "memory":
        return InMemorySegmentedBytesStore(name, RETENTION, interval, offset)
    return RocksDBSegmentedBytesStore(name, tmp, RETENTION, interval, offset)


def _window_pair(kind: str, tmp: Path, interval: int, caching: bool, duplicates: bool, max_entries: int
                 ) -> tuple[WindowStore, WindowStore, SegmentedBytesStore]:
    seg = _segmented(kind, tmp, "w", interval, 12 if duplicates else 8)
    args: dict[str, Any] = dict(window_size_ms=SIZE, retention_ms=RETENTION, retain_duplicates=duplicates, caching=caching,
                                cache_max_entries=max_entries)
    store = WindowStore("w", seg, STR, LONG, **args)
    if store.cache is not None:
        seg.retain_clean_entries_of(store.cache)
    return store, WindowStore("w", InMemoryBytesStore("w"), STR, LONG, **args), seg


#: (op, key, time, value): puts mostly moving forward, some late, some deletes
_OPS = st.lists(st.tuples(st.sampled_from(["put", "put", "put", "delete", "flush", "fetch"]),
                          st.sampled_from(["a", "b", "c"]), st.integers(0, 40), st.integers(0, 9)),
                min_size=30, max_size=120)


def _window_reads(store: WindowStore, t: int) -> list[Any]:
    out: list[Any] = [store.fetch_all(0, 10_000), store.time_ordered_rows(0, 10_000)]
    for key in ("a", "b", "c"):
        out.append(store.fetch_with_timestamps(key, 0, 10_000))
        out.append(store.fetch_with_timestamps(key, max(t - 150, 0), t))
        out.append([store.fetch_one_with_timestamp(key, s) for s in range(max(t - 150, 0), t + 1, 10)])
    return out


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
@pytest.mark.parametrize("caching,duplicates", [(False, False), (True, False), (False, True)])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, interval=st.sampled_from([7, 50, 100]), max_entries=st.sampled_from([2, 50]))
def test_window_store_reads_equal_the_unsegmented_store(tmp_path_factory: Any, kind: str, caching: bool, duplicates: bool,
                                                        ops: list[tuple[str, str, int, int]], interval: int,
                                                        max_entries: int) -> None:
    store, ref, seg = _window_pair(kind, tmp_path_factory.mktemp("w"), interval, caching, duplicates, max_entries)
    now = 0
    for op, key, step, value in ops:
        # time moves forward by step, or (one op in three) a late put step behind it
        t = now + step if step % 3 else max(now - step * 4, 0)
        now = max(now, t)
        for s in (store, ref):
            if op == "put":
                s.put(key, value, t - t % 10, t)
            elif op == "delete" and not duplicates:
                s.put(key, None, t - t % 10, t)
            elif op == "flush":
                s.flush()
        if op == "fetch":
            assert _window_reads(store, now) == _window_reads(ref, now)
    store.flush()
    ref.flush()
    assert _window_reads(store, now) == _window_reads(ref, now)
    # only the live segments are kept: nothing older than the retention and one segment
    # (besides the entries the cache keeps readable, at most twice as many as it holds)
    observed = seg.observed_stream_time
    kept = [ref._split(k)[1] for s in seg.live_segments() for k, _ in seg._range(s, None, None, False)]
    assert all(start >= observed - RETENTION - interval for start in kept)
    store.close()


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
@pytest.mark.parametrize("caching", [False, True])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, interval=st.sampled_from([7, 50, 100]))
def test_session_store_reads_equal_the_unsegmented_store(tmp_path_factory: Any, kind: str, caching: bool,
                                                         ops: list[tuple[str, str, int, int]], interval: int) -> None:
    seg = _segmented(kind, tmp_path_factory.mktemp("s"), "s", interval, 16)
    store = SessionStore("s", seg, STR, LONG, retention_ms=RETENTION, caching=caching, cache_max_entries=3)
    if store.cache is not None:
        seg.retain_clean_entries_of(store.cache)
    ref = SessionStore("s", InMemoryBytesStore("s"), STR, LONG, retention_ms=RETENTION, caching=caching, cache_max_entries=3)

    def reads(s: SessionStore, t: int) -> list[Any]:
        out: list[Any] = [s.all()]
        for key in ("a", "b", "c"):
            out.append(s.find_sessions(key, max(t - 150, 0), t))
            out.append(s.fetch(key))
            out.append([s.fetch_session(key, e - 5, e) for e in range(max(t - 150, 5), t + 1, 5)])
        return out

    now = 0
    for op, key, step, value in ops:
        t = now + step if step % 3 else max(now - step * 4, 0)
        now = max(now, t)
        end = t - t % 5
        session = Windowed(key, Window(max(end - 5, 0), end))
        for s in (store, ref):
            if op == "put":
                s.put(session, value)
            elif op == "delete":
                s.remove(session)
            elif op == "flush":
                s.flush()
        if op == "fetch":
            assert reads(store, now) == reads(ref, now)
    store.flush()
    ref.flush()
    assert reads(store, now) == reads(ref, now)
    store.close()


@pytest.mark.parametrize("in_memory", [True, False])
def test_a_year_of_hourly_windows_keeps_only_the_live_segments(tmp_path: Path, in_memory: bool) -> None:
    """A 24 h window store (retention 26 h: window and 2 h grace), one window per key and
    hour for a year: the data kept stays at about three 13 h segments, not the year."""
    hour = 3_600_000
    spec = StoreSpec("w", "window", None, None, in_memory=in_memory, retention_ms=26 * hour, window_size_ms=24 * hour)
    store = build_store(spec, tmp_path, None)
    assert isinstance(store, WindowStore)
    seg = store.backend
    assert isinstance(seg, SegmentedBytesStore) and seg.segment_interval_ms == default_segment_interval(26 * hour) == 13 * hour
    for h in range(24 * 365):
        for key in ("JFK", "LGA", "EWR"):
            store.put(key, h, h * hour, h * hour)
    assert len(seg.live_segments()) <= 3
    kept = list(seg.range(None, None))
    assert 3 * 26 <= len(kept) <= 3 * (26 + 13)
    assert store.fetch("JFK", 0, 365 * 24 * hour) == [(h * hour, h) for h in range(24 * 365 - 26, 24 * 365)]
    assert seg.segments_dropped >= 365 * 24 // 13 - 3
    store.close()
    if not in_memory:  # reopened: the segments are found again, the first put drops the old ones
        store = build_store(spec, tmp_path, None)
        seg = store.backend
        assert isinstance(seg, RocksDBSegmentedBytesStore)
        assert len(seg.live_segments()) == len({k for k in seg._live})
        assert [k for k, _ in seg.range(None, None)] == [k for k, _ in kept]
        store.put("JFK", 0, 400 * 24 * hour, 400 * 24 * hour)
        assert len(list(seg.range(None, None))) == 1
        store.close()


def test_an_unsegmented_rocksdb_window_store_of_an_older_duet_is_moved_into_segments(tmp_path: Path) -> None:
    day = 86_400_000
    spec = StoreSpec("w", "window", Serdes.String(), Serdes.Long(), retention_ms=2 * day, window_size_ms=day)
    # written as duet did before segments: one RocksDB, keys ending with the window start
    legacy = WindowStore("w", RocksDBBytesStore("w", tmp_path), Serdes.String(), Serdes.Long(), window_size_ms=day,
                         retention_ms=2 * day)
    for d in range(10):
        legacy.put("k", d, d * day, d * day)
    expected = legacy.fetch("k", 0, 100 * day)
    legacy.close()
    store = build_store(spec, tmp_path, None)
    assert isinstance(store, WindowStore) and isinstance(store.backend, RocksDBSegmentedBytesStore)
    # a reopened store knows no stream time until its first put, so it filters nothing
    # (with or without segments): day 7, expired at day 9, is still in the live segments
    assert expected == [(8 * day, 8), (9 * day, 9)]
    assert store.fetch("k", 0, 100 * day) == [(7 * day, 7)] + expected
    assert not (tmp_path / "rocksdb" / "w.unsegmented").exists()
    assert len(store.backend.live_segments()) <= 3  # the older days were dropped on the way
    store.close()
    reopened = build_store(spec, tmp_path, None)  # now in the segmented layout: opened as is
    assert reopened.fetch("k", 0, 100 * day) == [(7 * day, 7)] + expected
    reopened.close()


@pytest.mark.parametrize("in_memory", [True, False])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 40), st.one_of(st.none(), st.integers(0, 9))),
                    min_size=20, max_size=150))
def test_versioned_store_drops_versions_no_read_returns(tmp_path_factory: Any, in_memory: bool,
                                                       ops: list[tuple[str, int, int | None]]) -> None:
    """Against a store that keeps every version: every read as of any time answers the
    same, and a key keeps only its versions within the history retention, plus the one
    valid at its start."""
    history = 50
    spec = StoreSpec("v", "versioned", STR, LONG, in_memory=in_memory, history_ms=history)
    store = build_store(spec, tmp_path_factory.mktemp("v"), None)
    keep_all = VersionedKeyValueStore("v", InMemoryBytesStore("v"), STR, LONG, history_ms=history)
    keep_all._drop_unreadable = lambda kb, stamps: None  # type: ignore[method-assign]
    now = 0
    for key, step, value in ops:
        t = now + step if step % 3 else max(now - step, 0)
        now = max(now, t)
        assert store.put(key, value, t) == keep_all.put(key, value, t)
        for k in ("a", "b"):
            for as_of in [None, *range(max(now - 80, 0), now + 1, 5)]:
                assert store.get(k, as_of) == keep_all.get(k, as_of)
    assert list(store.all()) == list(keep_all.all())
    # the key put last was pruned at that put (the other one at its own last put)
    cutoff = store.observed_stream_time - history
    stamps = [ts for ts, _ in store._versions(STR.serialize(ops[-1][0]))]
    assert sum(1 for ts in stamps if ts <= cutoff) <= 1
    store.close()
