"""``WindowStore.fold_windows`` (the windows of one record of a hopping window aggregation
in one call) against the single-window calls it replaces, Kafka's KStreamWindowAggregate
loop of fetch then put per window: same aggregates, same cache evictions and
flush-listener calls in the same order, same bytes store and changelog, also when the
aggregator raises midway. Also the record cache's eviction order (eldest
update first, Kafka's NamedCache) with a small cache. In-memory and RocksDB bytes stores;
about 0.1 s."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from speed_layer.state.backends import InMemoryBytesStore, RocksDBBytesStore
from speed_layer.state.keys import ORDERED_KEY, PICKLE
from speed_layer.state.stores import ValueAndTimestamp, WindowStore

HOUR = 3_600_000


def _store(kind: str, tmp: Path, name: str, cache: int) -> tuple[WindowStore, list[Any], list[Any]]:
    backend = InMemoryBytesStore(name) if kind == "memory" else RocksDBBytesStore(name, tmp)
    log: list[Any] = []
    flushed: list[Any] = []
    store = WindowStore(name, backend, ORDERED_KEY, PICKLE, window_size_ms=24 * HOUR, retention_ms=48 * HOUR,
                        caching=True, cache_max_entries=cache, logger=lambda k, v, ts: log.append((k, v, ts)))
    store.send_old_values = False
    store.flush_listener = lambda w, new, old: flushed.append((w.key, w.window.start, w.window.end, new, old))
    return store, log, flushed


def _records() -> list[tuple[Any, int, int]]:
    # (key, timestamp, value): out of order, a repeated key, a record behind the retention
    out = []
    for i in range(60):
        out.append((f"k{i % 4}", (i * 7919 % 97) * HOUR // 2 + 5 * HOUR, i))
    out.append(("k0", 0, 99))  # its windows expire once stream time passed 48 h
    out.append((("tuple", 1), 3 * HOUR, 7))  # a non-text key
    return out


class _Boom(Exception):
    pass


def _add(key: Any, value: int, agg: int) -> int:
    if value in (13, 26, 39) and agg % 2 == 1:  # raises midway through some records' windows
        raise _Boom
    return agg + value


def _per_window(store: WindowStore, key: Any, starts: list[int], ts: int, value: int) -> None:
    """The reference: fetch, aggregate and put one window at a time."""
    for s in starts:
        old = store.fetch_one_with_timestamp(key, s)
        if old is None:
            store.put(key, _add(key, value, 0), s, ts)
        else:
            store.put(key, _add(key, value, old.value), s, max(ts, old.timestamp))


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
@pytest.mark.parametrize("cache", [1, 5, 1000])
def test_fold_windows_matches_the_per_window_loop(kind: str, cache: int, tmp_path: Path) -> None:
    single, single_log, single_flushed = _store(kind, tmp_path / "a", "single", cache)
    fused, fused_log, fused_flushed = _store(kind, tmp_path / "b", "fused", cache)
    raised = 0
    for key, ts, value in _records():
        starts = [s for s in range(max(0, ts - 23 * HOUR) // HOUR * HOUR, ts + 1, HOUR)]
        outcomes = []
        for call in (lambda: _per_window(single, key, starts, ts, value),
                     lambda: fused.fold_windows(key, starts, ts, value, lambda: 0, _add)):
            try:
                call()
                outcomes.append("ok")
            except _Boom:
                outcomes.append("raised")
        assert outcomes[0] == outcomes[1]
        raised += outcomes[0] == "raised"
        assert fused_flushed == single_flushed
        assert fused.observed_stream_time == single.observed_stream_time
        assert [fused.fetch_one_with_timestamp(key, s) for s in starts] == [single.fetch_one_with_timestamp(key, s) for s in starts]
    assert raised > 0
    single.flush_cache()
    fused.flush_cache()
    assert fused_flushed == single_flushed
    assert fused_log == single_log
    assert fused.all_with_timestamps() == single.all_with_timestamps()
    single.close()
    fused.close()


def test_cache_evicts_and_flushes_in_order_of_last_update(tmp_path: Path) -> None:
    store, log, flushed = _store("memory", tmp_path, "w", 3)
    store.put("a", 1, 0, 1)
    store.put("b", 2, 0, 2)
    store.put("c", 3, 0, 3)
    store.put("a", 4, 0, 4)  # a is now the latest update: b is the eldest
    store.put("d", 5, 0, 5)  # over 3 entries: b is evicted
    assert [(k, new.value) for k, _, _, new, _ in flushed] == [("b", 2)]
    store.flush_cache()
    assert [(k, new.value) for k, _, _, new, _ in flushed] == [("b", 2), ("c", 3), ("a", 4), ("d", 5)]
    assert store.fetch_one_with_timestamp("a", 0) == ValueAndTimestamp(4, 4)
    assert len(log) == 4
