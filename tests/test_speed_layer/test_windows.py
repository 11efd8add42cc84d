"""Tumbling and hopping time windows (Kafka's TimeWindows / KStreamWindowAggregate):
epoch-aligned ``[start, end)`` windows, grace and the dropped-records metric, output
timestamps, caching, and the window store's read API."""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Materialized, Produced, Serdes, StreamsBuilder, TimeWindows, TopologyException, Window, Windowed
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}
OUT = Produced.with_(Serdes.Pickle(), Serdes.Long())


def _run(windows: TimeWindows, pipes: list[tuple[Any, Any, int]], *, caching: bool = False, reduce: bool = False) -> tuple[list[tuple[str, Any, int]], TopologyTestDriver]:
    b = StreamsBuilder()
    m = Materialized.as_("w") if caching else Materialized.as_("w").with_caching_disabled()
    g = b.stream("in").group_by_key().windowed_by(windows)
    t = g.reduce(lambda a, v: a + v, m) if reduce else g.count(m)
    t.to_stream().to("out", Produced.with_(Serdes.Pickle(), Serdes.Pickle()))
    d = TopologyTestDriver(b.build(), CONFIG)
    inp = d.create_input_topic("in")
    for k, v, ts in pipes:
        inp.pipe_input(k, v, ts)
    out = [(str(r.key), r.value, r.timestamp) for r in d.create_output_topic("out", Serdes.Pickle(), Serdes.Pickle()).read_records_to_list()]
    return out, d


def test_windows_for_is_epoch_aligned_and_half_open() -> None:
    tumbling = TimeWindows.of_size_with_no_grace(10)
    assert tumbling.windows_for(0) == {0: Window(0, 10)}
    assert tumbling.windows_for(9) == {0: Window(0, 10)}
    assert tumbling.windows_for(10) == {10: Window(10, 20)}  # end is exclusive
    hopping = TimeWindows.of_size_with_no_grace(10).advance_by(3)
    assert list(hopping.windows_for(10)) == [3, 6, 9]
    assert list(hopping.windows_for(1)) == [0]  # no negative starts
    with pytest.raises(ValueError):
        TimeWindows.of_size_with_no_grace(10).advance_by(11)
    with pytest.raises(ValueError):
        TimeWindows.of_size_with_no_grace(0)


def test_tumbling_count_timestamps_are_the_max_of_the_window() -> None:
    out, d = _run(TimeWindows.of_size_and_grace(10, 100), [("a", "x", 5), ("a", "x", 2), ("a", "x", 12), ("b", "x", 3)])
    assert out == [("[a@0/10]", 1, 5), ("[a@0/10]", 2, 5), ("[a@10/20]", 1, 12), ("[b@0/10]", 1, 3)]
    store = d.get_window_store("w")
    assert store.fetch("a", 0) == 2
    assert store.fetch("a", 0, 20) == [(0, 2), (10, 1)]
    assert store.fetch_all(0, 100) == [(Windowed("a", Window(0, 10)), 2), (Windowed("a", Window(10, 20)), 1), (Windowed("b", Window(0, 10)), 1)]
    d.close()


def test_grace_window_closes_at_end_plus_grace_and_late_records_are_counted() -> None:
    """A window accepts records while ``end > observed stream time - grace``."""
    out, d = _run(TimeWindows.of_size_and_grace(10, 5), [("a", "x", 1), ("a", "x", 14), ("a", "x", 9), ("a", "x", 15), ("a", "x", 9)])
    # at stream time 14 the window [0,10) is still open (10 > 9); at 15 it closes (10 <= 10)
    assert out == [("[a@0/10]", 1, 1), ("[a@10/20]", 1, 14), ("[a@0/10]", 2, 9), ("[a@10/20]", 2, 15)]
    assert d.dropped_records() == 1
    assert d.metrics.total("dropped-records-late") == 1
    d.close()


def test_hopping_windows_update_every_window_of_the_record() -> None:
    w = TimeWindows.of_size_and_grace(10, 100).advance_by(5)
    out, d = _run(w, [("a", "x", 7), ("a", "x", 12)])
    assert out == [("[a@0/10]", 1, 7), ("[a@5/15]", 1, 7), ("[a@5/15]", 2, 12), ("[a@10/20]", 1, 12)]
    d.close()


def test_hopping_with_caching_flushes_each_window_once_per_record() -> None:
    """In the test driver a commit follows each record, so a cache folds the updates of
    one record only: hopping windows of one record are separate entries (one output each)."""
    w = TimeWindows.of_size_and_grace(10, 100).advance_by(5)
    cached, d1 = _run(w, [("a", "x", 7), ("a", "x", 12)], caching=True)
    uncached, d2 = _run(w, [("a", "x", 7), ("a", "x", 12)])
    assert cached == uncached
    d1.close()
    d2.close()


def test_null_keys_dropped_null_values_reach_the_aggregator() -> None:
    """Kafka's KStreamWindowAggregate skips null keys only (counting a null value)."""
    out, d = _run(TimeWindows.of_size_with_no_grace(10), [(None, "x", 1), ("a", None, 2)])
    assert out == [("[a@0/10]", 1, 2)]
    assert d.dropped_records() == 1
    d.close()


def test_reduce_in_windows() -> None:
    out, d = _run(TimeWindows.of_size_with_no_grace(10), [("a", "x", 1), ("a", "y", 2), ("a", "z", 11)], reduce=True)
    assert out == [("[a@0/10]", "x", 1), ("[a@0/10]", "xy", 2), ("[a@10/20]", "z", 11)]
    d.close()


def test_window_store_retention_defaults_and_validation() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_and_grace(10, 5)).count(Materialized.as_("w"))
    assert b.build().stores["w"].retention_ms == 15
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="must be no smaller than its window size plus the grace period"):
        b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_and_grace(10, 5)).count(Materialized.as_("w").with_retention(14))


def test_expired_windows_disappear_from_the_store() -> None:
    out, d = _run(TimeWindows.of_size_with_no_grace(10), [("a", "x", 1), ("a", "x", 35)])
    store = d.get_window_store("w")
    assert store.fetch("a", 0, 100) == [(30, 1)]  # retention 10: [0,10) expired at stream time 35
    d.close()
