"""Clean cache entries of window and session stores (Kafka's NamedCache#flush marks the
flushed entries clean and keeps them; CachingWindowStore and CachingSessionStore read the
cache by key and time only, never by retention).

So with caching (Kafka's default) a window or session stays readable after it expired in
the bytes store, for as long as the cache holds it; a session aggregation then merges a
record with such a session; a session put at exactly the close time is forwarded (the cache
takes it, the bytes store drops it). Without caching neither happens. Stores are built on
the in-memory bytes store and, through the driver, on RocksDB.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Consumed, Materialized, Produced, Serdes, SessionWindows, StreamsBuilder, TimeWindows, Window, Windowed
from speed_layer.state.backends import InMemoryBytesStore
from speed_layer.state.stores import SessionStore, WindowStore
from speed_layer.testing import TopologyTestDriver

STR = Serdes.String()
LONG = Serdes.Long()


def _sessions(caching: bool, max_entries: int = 100) -> SessionStore:
    return SessionStore("s", InMemoryBytesStore("s"), STR, LONG, retention_ms=10, caching=caching, cache_max_entries=max_entries)


def _windows(caching: bool, max_entries: int = 100) -> WindowStore:
    return WindowStore("w", InMemoryBytesStore("w"), STR, LONG, window_size_ms=10, retention_ms=10, caching=caching,
                       cache_max_entries=max_entries)


def _rows(rows: list[tuple[Windowed[Any], Any]]) -> list[tuple[Any, int, int, Any]]:
    return [(w.key, w.window.start, w.window.end, v) for w, v in rows]


# ---------------------------------------------------------------- the stores
@pytest.mark.parametrize("caching", [True, False])
def test_session_store_serves_an_expired_session_while_it_is_cached(caching: bool) -> None:
    store = _sessions(caching)
    store.put(Windowed("a", Window(0, 5)), 1)
    store.flush()
    store.put(Windowed("b", Window(100, 100)), 1)
    store.flush()  # the bytes store's stream time is now 100: [0, 5] expired (5 <= 100 - 10)
    expected_a = [("a", 0, 5, 1)] if caching else []
    assert _rows(store.fetch("a")) == expected_a
    assert _rows(store.find_sessions("a", 0, 1000)) == expected_a
    assert store.fetch_session("a", 0, 5) == (1 if caching else None)
    assert _rows(store.all()) == expected_a + [("b", 100, 100, 1)]


def test_session_store_drops_a_flushed_removal_from_the_cache() -> None:
    store = _sessions(True)
    store.put(Windowed("a", Window(0, 5)), 1)
    store.flush()
    store.remove(Windowed("a", Window(0, 5)))
    store.flush()
    assert store.fetch("a") == []
    assert store.cache is not None and not store.cache.clean and not store.cache.entries


def test_a_clean_session_stays_readable_for_max_entries_later_flushes() -> None:
    flushed: list[Any] = []
    store = _sessions(True, max_entries=2)
    store.flush_listener = lambda session, new, old: flushed.append((session.key, new.value if new else None))
    store.put(Windowed("a", Window(0, 0)), 1)
    store.flush()
    store.put(Windowed("b", Window(100, 100)), 1)
    store.flush()  # a@[0,0] expired in the bytes store (0 <= 100 - 10), still cached
    assert _rows(store.fetch("a")) == [("a", 0, 0, 1)]
    store.put(Windowed("c", Window(100, 100)), 1)
    store.flush()  # two entries flushed after a's: a is no longer cached
    assert store.fetch("a") == [] and store.fetch_session("a", 0, 0) is None
    assert _rows(store.fetch("b")) == [("b", 100, 100, 1)]
    for i in range(4):
        store.put(Windowed(f"k{i}", Window(100, 100)), 1)
        store.flush()
    assert store.cache is not None and len(store.cache.clean) < 4  # pruned at 2 * max entries
    assert flushed == [("a", 1), ("b", 1), ("c", 1)] + [(f"k{i}", 1) for i in range(4)]


def test_a_clean_window_is_pushed_out_by_later_flushes_and_a_delete_reads_as_absent() -> None:
    store = _windows(True, max_entries=2)
    store.put("a", 1, 0, 0)
    store.flush()
    assert store.cache is not None and store.cache.is_clean(b"a" + (0).to_bytes(8, "big"))
    store.put("b", 1, 100, 100)
    store.flush()  # window 0 expired at stream time 100: one flush later, a's is still cached
    assert store.fetch("a", 0) == 1
    store.put("b", 2, 100, 100)
    store.flush()  # two flushes after a's: no longer cached
    assert store.fetch("a", 0) is None and store.fetch("a", 0, 200) == []
    store.put("b", None, 100, 100)
    store.flush()
    assert store.fetch("b", 100) is None and store.fetch("b", 0, 200) == []


@pytest.mark.parametrize("caching", [True, False])
def test_window_store_serves_an_expired_window_while_it_is_cached(caching: bool) -> None:
    store = _windows(caching)
    store.put("a", 1, 0, 0)
    store.put("a", 2, 100, 100)
    store.flush()  # window 0 expired (0 <= 100 - 10)
    assert store.fetch("a", 0, 200) == ([(0, 1), (100, 2)] if caching else [(100, 2)])
    assert store.fetch("a", 0) == (1 if caching else None)
    assert store.fetch("a", 100) == 2


def test_window_store_fold_reads_an_expired_window_while_it_is_cached() -> None:
    # the store API alone (the processor never folds into a closed window): a fold reads an
    # expired window as KStreamWindowAggregate's fetch reads it through CachingWindowStore
    store = _windows(True)
    store.fold_windows("a", [0], 1, "x", lambda: 0, lambda k, v, agg: agg + 1)
    store.flush()
    store.put("b", 1, 100, 100)
    store.flush()  # window 0 expired, still cached clean
    store.fold_windows("a", [0], 2, "x", lambda: 0, lambda k, v, agg: agg + 1)
    assert store.fetch("a", 0) == 2
    uncached = _windows(False)
    uncached.fold_windows("a", [0], 1, "x", lambda: 0, lambda k, v, agg: agg + 1)
    uncached.put("b", 1, 100, 100)
    uncached.fold_windows("a", [0], 2, "x", lambda: 0, lambda k, v, agg: agg + 1)
    assert uncached.fetch("a", 0) is None  # its put was dropped: expired


# ---------------------------------------------------------------- through the DSL
def _session_counts(rows: list[tuple[str, int]], gap: int, grace: int, caching: bool) -> tuple[list[Any], list[Any], int]:
    b = StreamsBuilder()
    m = Materialized.as_("s").with_value_serde(LONG)
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    (b.stream("topic", Consumed.with_(STR, STR)).group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(gap, grace)).count(m)
        .to_stream().map(lambda k, v: (f"{k.key}@{k.window.start}/{k.window.end}", v)).to("out", Produced.with_(STR, LONG)))
    with TopologyTestDriver(b.build()) as d:
        t = d.create_input_topic("topic", STR, STR)
        for k, ts in rows:
            t.pipe_input(k, "x", ts)
        out = [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", STR, LONG).read_records_to_list()]
        return out, _rows(d.get_session_store("s").all()), d.dropped_records()


@pytest.mark.parametrize("caching", [True, False])
def test_session_at_exactly_the_close_time_is_forwarded(caching: bool) -> None:
    # Kafka: KStreamSessionWindowAggregateProcessorTest#shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace
    # (gap 10, grace 1), through the DSL with the default retention gap + grace = 11:
    # "OnTime2"@0 at stream time 11 closes at 11 - 1 - 10 = 0, is not late (end 0 is not
    # < 0) and is forwarded; the bytes store takes no session ending at 11 - 11 = 0, so only
    # the cache (CachingSessionStore#put has no retention check) still holds it afterwards
    rows = [("dummy", 0), ("OnTime1", 0), ("dummy", 11), ("OnTime2", 0), ("dummy", 12), ("Late1", 0)]
    out, stored, dropped = _session_counts(rows, 10, 1, caching)
    assert out == [("dummy@0/0", 1, 0), ("OnTime1@0/0", 1, 0), ("dummy@11/11", 1, 11), ("OnTime2@0/0", 1, 0),
                   ("dummy@11/11", None, 11), ("dummy@11/12", 2, 12)]
    assert dropped == 1  # Late1
    cached = [("OnTime1", 0, 0, 1), ("OnTime2", 0, 0, 1), ("dummy", 0, 0, 1)] if caching else []
    assert stored == cached + [("dummy", 11, 12, 2)]


@pytest.mark.parametrize("caching", [True, False])
def test_session_merges_with_an_expired_session_only_while_it_is_cached(caching: bool) -> None:
    # gap 500, no grace, retention 500. At stream time 1000, a@[100,100] has expired in the
    # bytes store (100 <= 1000 - 500). a@600 is on time (close time 500) and within the gap:
    # CachingSessionStore#findSessions returns the cached a@[100,100], KStreamSessionWindowAggregate
    # merges it into [100,600]; the removal of [100,100] is not forwarded because the bytes
    # store's get no longer returns the expired session (AbstractRocksDBSegmentedBytesStore#get).
    # Without the cache, the session is not found: a new session [600,600]
    out, stored, dropped = _session_counts([("a", 100), ("b", 1000), ("a", 600)], 500, 0, caching)
    last = ("a@100/600", 2, 600) if caching else ("a@600/600", 1, 600)
    assert out == [("a@100/100", 1, 100), ("b@1000/1000", 1, 1000), last]
    assert stored == [("a", 100, 600, 2) if caching else ("a", 600, 600, 1), ("b", 1000, 1000, 1)]
    assert dropped == 0


@pytest.mark.parametrize("caching", [True, False])
def test_windowed_count_store_serves_expired_windows_while_cached(caching: bool) -> None:
    # Kafka's CachingWindowStore#fetch merges the cache (key and time filter only) with the
    # segmented store (from observed stream time - retention + 1): window [0,10) expired
    # at stream time 100 with the default retention size + grace = 10
    b = StreamsBuilder()
    m = Materialized.as_("w").with_value_serde(LONG)
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    b.stream("topic", Consumed.with_(STR, STR)).group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10)).count(m)
    with TopologyTestDriver(b.build()) as d:
        t = d.create_input_topic("topic", STR, STR)
        t.pipe_input("a", "x", 0)
        t.pipe_input("a", "x", 100)
        assert d.get_window_store("w").fetch("a", 0, 200) == ([(0, 1), (100, 1)] if caching else [(100, 1)])
