"""Sliding-window aggregation (KIP-450) through the TopologyTestDriver.

Inputs and expected outputs are Kafka's own ``KStreamSlidingWindowAggregateTest``
(emit-on-update cases): ``MockInitializer.STRING_INIT`` is ``"0"`` and
``MockAggregator.TOSTRING_ADDER`` is ``agg + "+" + value``.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from speed_layer import Materialized, Serdes, SlidingWindows, StreamsBuilder, TopologyException, Window, Windowed
from speed_layer.testing import TopologyTestDriver

CONFIG = {"default.key.serde": Serdes.String(), "default.value.serde": Serdes.String()}
OUT = Serdes.Pickle()


def _run(pipes: list[tuple[str, str, int]], diff: int, grace: int, *, reduce: bool = False, caching: bool = True,
         in_memory: bool = False) -> tuple[list[tuple[str, int, int, str, int]], TopologyTestDriver]:
    b = StreamsBuilder()
    g = b.stream("topic").group_by_key().windowed_by(SlidingWindows.of_time_difference_and_grace(diff, grace))
    m = Materialized.as_("store")
    if not caching:
        m = m.with_caching_disabled()
    if in_memory:
        m = m.with_store_type("in_memory")
    if reduce:
        t = g.reduce(lambda agg, v: agg + "+" + v, m)
    else:
        t = g.aggregate(lambda: "0", lambda k, v, agg: agg + "+" + v, m)
    t.to_stream().to("out", _produced())
    d = TopologyTestDriver(b.build(), CONFIG)
    inp = d.create_input_topic("topic")
    for k, v, ts in pipes:
        inp.pipe_input(k, v, ts)
    out = [(r.key.key, r.key.window.start, r.key.window.end, r.value, r.timestamp)
           for r in d.create_output_topic("out", OUT, Serdes.String()).read_records_to_list()]
    return out, d


def _produced() -> Any:
    from speed_layer import Produced

    return Produced.with_(OUT, Serdes.String())


def _by_start(out: list[tuple[str, int, int, str, int]]) -> dict[int, set[tuple[str, int]]]:
    res: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for _, start, _, v, ts in out:
        res[start].add((v, ts))
    return dict(res)


@pytest.fixture(params=[True, False], ids=["cached", "uncached"])
def caching(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_aggregate_small_input(caching: bool) -> None:
    out, d = _run([("A", "1", 10), ("A", "2", 10), ("A", "3", 14), ("A", "4", 15), ("A", "5", 20), ("A", "6", 22), ("A", "7", 30)], 10, 5, caching=caching)
    d.close()
    assert _by_start(out) == {
        0: {("0+1", 10), ("0+1+2", 10)},
        4: {("0+1+2+3", 14)},
        5: {("0+1+2+3+4", 15)},
        10: {("0+1+2+3+4+5", 20)},
        11: {("0+3", 14), ("0+3+4", 15), ("0+3+4+5", 20)},
        12: {("0+3+4+5+6", 22)},
        15: {("0+4", 15), ("0+4+5", 20), ("0+4+5+6", 22)},
        16: {("0+5", 20), ("0+5+6", 22)},
        20: {("0+5+6+7", 30)},
        21: {("0+6", 22), ("0+6+7", 30)},
        23: {("0+7", 30)},
    }
    # windows end at start + time difference (Kafka's TimeWindow(start, start + D)), inclusive
    assert all(end == start + 10 for _, start, end, _, _ in out)


def test_reduce_small_input(caching: bool) -> None:
    out, d = _run([("A", "1", 10), ("A", "2", 14), ("A", "3", 15), ("A", "4", 22), ("A", "5", 26), ("A", "6", 30)], 10, 5, reduce=True, caching=caching)
    d.close()
    assert _by_start(out) == {
        0: {("1", 10)}, 4: {("1+2", 14)}, 5: {("1+2+3", 15)}, 11: {("2", 14), ("2+3", 15)}, 12: {("2+3+4", 22)},
        15: {("3", 15), ("3+4", 22)}, 16: {("4", 22), ("4+5", 26)}, 20: {("4+5+6", 30)}, 23: {("5", 26), ("5+6", 30)},
        27: {("6", 30)},
    }


def test_aggregate_large_input_out_of_order(caching: bool) -> None:
    pipes = [("A", "1", 10), ("A", "2", 20), ("A", "3", 22), ("A", "4", 15),
             ("B", "1", 12), ("B", "2", 13), ("B", "3", 18), ("B", "4", 19), ("B", "5", 25), ("B", "6", 14),
             ("C", "1", 11), ("C", "2", 15), ("C", "3", 16), ("C", "4", 21), ("C", "5", 23),
             ("D", "4", 11), ("D", "2", 12), ("D", "3", 29), ("D", "5", 16)]
    out, d = _run(pipes, 10, 50, caching=caching)
    d.close()
    actual = sorted(out, key=lambda r: (r[0], r[1]))  # Kafka's test sorts (stably) by key, then start
    expected = [
        ("A", 0, "0+1", 10), ("A", 5, "0+1+4", 15), ("A", 10, "0+1+2", 20), ("A", 10, "0+1+2+4", 20),
        ("A", 11, "0+2", 20), ("A", 11, "0+2+4", 20), ("A", 12, "0+2+3", 22), ("A", 12, "0+2+3+4", 22),
        ("A", 16, "0+2+3", 22), ("A", 21, "0+3", 22),
        ("B", 2, "0+1", 12), ("B", 3, "0+1+2", 13), ("B", 4, "0+1+2+6", 14), ("B", 8, "0+1+2+3", 18),
        ("B", 8, "0+1+2+3+6", 18), ("B", 9, "0+1+2+3+4", 19), ("B", 9, "0+1+2+3+4+6", 19), ("B", 13, "0+2", 13),
        ("B", 13, "0+2+3", 18), ("B", 13, "0+2+3+4", 19), ("B", 13, "0+2+3+4+6", 19), ("B", 14, "0+3", 18),
        ("B", 14, "0+3+4", 19), ("B", 14, "0+3+4+6", 19), ("B", 15, "0+3+4+5", 25), ("B", 19, "0+4", 19),
        ("B", 19, "0+4+5", 25), ("B", 20, "0+5", 25),
        ("C", 1, "0+1", 11), ("C", 5, "0+1+2", 15), ("C", 6, "0+1+2+3", 16), ("C", 11, "0+1+2+3+4", 21),
        ("C", 12, "0+2", 15), ("C", 12, "0+2+3", 16), ("C", 12, "0+2+3+4", 21), ("C", 13, "0+2+3+4+5", 23),
        ("C", 16, "0+3", 16), ("C", 16, "0+3+4", 21), ("C", 16, "0+3+4+5", 23), ("C", 17, "0+4", 21),
        ("C", 17, "0+4+5", 23), ("C", 22, "0+5", 23),
        ("D", 1, "0+4", 11), ("D", 2, "0+4+2", 12), ("D", 6, "0+4+2+5", 16), ("D", 12, "0+2", 12),
        ("D", 12, "0+2+5", 16), ("D", 13, "0+5", 16), ("D", 19, "0+3", 29),
    ]
    assert [(k, s, v, ts) for k, s, _, v, ts in actual] == expected


def test_forward_order_previous_right_window_before_left_window() -> None:
    """Within one record, Kafka creates the previous record's right window first, then the
    record's own left window (KStreamSlidingWindowAggregateTest#testJoin)."""
    out, d = _run([("A", "1", 10), ("B", "2", 11), ("A", "1", 15), ("B", "2", 16)], 10, 100)
    d.close()
    assert [(k, s, e, v, ts) for k, s, e, v, ts in out] == [
        ("A", 0, 10, "0+1", 10), ("B", 1, 11, "0+2", 11),
        ("A", 11, 21, "0+1", 15), ("A", 5, 15, "0+1+1", 15),
        ("B", 12, 22, "0+2", 16), ("B", 6, 16, "0+2+2", 16),
    ]


def test_early_records_small_input() -> None:
    out, d = _run([("A", "1", 0), ("A", "2", 5), ("A", "3", 6), ("A", "4", 3), ("A", "5", 13), ("A", "6", 10), ("A", "7", 70)], 50, 0)
    d.close()
    assert _by_start(out) == {
        0: {("0+1", 0), ("0+1+2", 5), ("0+1+2+3", 6), ("0+1+2+3+4", 6), ("0+1+2+3+4+5", 13), ("0+1+2+3+4+5+6", 13)},
        1: {("0+2", 5), ("0+2+3", 6), ("0+2+3+4", 6), ("0+2+3+4+5", 13), ("0+2+3+4+5+6", 13)},
        4: {("0+2+3", 6), ("0+2+3+5", 13), ("0+2+3+5+6", 13)},
        6: {("0+3", 6), ("0+3+5", 13), ("0+3+5+6", 13)},
        7: {("0+5", 13), ("0+5+6", 13)},
        11: {("0+5", 13)},
        20: {("0+7", 70)},
    }


def test_early_records_repeated_input() -> None:
    out, d = _run([("A", "1", 0), ("A", "2", 2), ("A", "3", 4), ("A", "4", 0), ("A", "5", 2), ("A", "6", 2), ("A", "7", 0), ("A", "8", 7)], 5, 0)
    d.close()
    assert _by_start(out) == {
        0: {("0+1", 0), ("0+1+2", 2), ("0+1+2+3", 4), ("0+1+2+3+4", 4), ("0+1+2+3+4+5", 4), ("0+1+2+3+4+5+6", 4), ("0+1+2+3+4+5+6+7", 4)},
        1: {("0+2", 2), ("0+2+3", 4), ("0+2+3+5", 4), ("0+2+3+5+6", 4)},
        2: {("0+2+3+5+6+8", 7)},
        3: {("0+3", 4), ("0+3+8", 7)},
        5: {("0+8", 7)},
    }


def test_early_records_large_input(caching: bool) -> None:
    pipes = [("E", "1", 0), ("E", "3", 5), ("E", "4", 6), ("E", "2", 3), ("E", "6", 13), ("E", "5", 10), ("E", "7", 4), ("E", "8", 2), ("E", "9", 15)]
    out, d = _run(pipes, 10, 50, caching=caching)
    d.close()
    actual = [(s, v, ts) for _, s, _, v, ts in sorted(out, key=lambda r: (r[0], r[1]))]
    assert actual == [
        (0, "0+1", 0), (0, "0+1+3", 5), (0, "0+1+3+4", 6), (0, "0+1+3+4+2", 6), (0, "0+1+3+4+2+5", 10),
        (0, "0+1+3+4+2+5+7", 10), (0, "0+1+3+4+2+5+7+8", 10),
        (1, "0+3", 5), (1, "0+3+4", 6), (1, "0+3+4+2", 6), (1, "0+3+4+2+5", 10), (1, "0+3+4+2+5+7", 10), (1, "0+3+4+2+5+7+8", 10),
        (3, "0+3+4+2+6", 13), (3, "0+3+4+2+6+5", 13), (3, "0+3+4+2+6+5+7", 13),
        (4, "0+3+4", 6), (4, "0+3+4+6", 13), (4, "0+3+4+6+5", 13), (4, "0+3+4+6+5+7", 13),
        (5, "0+3+4+6+5", 13), (5, "0+3+4+6+5+9", 15),
        (6, "0+4", 6), (6, "0+4+6", 13), (6, "0+4+6+5", 13), (6, "0+4+6+5+9", 15),
        (7, "0+6", 13), (7, "0+6+5", 13), (7, "0+6+5+9", 15),
        (11, "0+6", 13), (11, "0+6+9", 15),
        (14, "0+9", 15),
    ]


def test_late_records_dropped_and_counted() -> None:
    """A record is dropped when its right window is closed: ``t + 1 + D <= stream time - grace``."""
    out, d = _run([("A", "1", 100), ("A", "2", 79), ("A", "3", 78)], 10, 10)
    # stream time 100, close time 90: 79 + 11 = 90 <= 90 -> dropped; 78 dropped too
    assert [(s, v) for _, s, _, v, _ in out] == [(90, "0+1")]
    assert d.dropped_records() == 2
    d.close()


def test_window_update_past_close_time_is_dropped_per_window() -> None:
    """A record inside the grace period updates only the windows not yet closed; each
    closed window it would update counts one dropped record (updateWindowAndForward)."""
    out, d = _run([("A", "1", 10), ("A", "2", 30), ("A", "3", 15)], 10, 5)
    # stream time 30, close time 25: A@15's left window [5,15] ends < 25 -> dropped,
    # its right window [16,26] is created with the record at 30? no: 30 > 26 -> not created;
    # the window [11, 21] (A@10's right window) would get only A@15 but ends at 21 < 25.
    assert [(s, v, ts) for _, s, _, v, ts in out] == [(0, "0+1", 10), (20, "0+2", 30)]
    assert d.dropped_records() >= 1
    d.close()


def test_store_contents_and_retention_config() -> None:
    out, d = _run([("A", "1", 10), ("A", "2", 15)], 10, 5, caching=False)
    store = d.get_window_store("store")
    assert store is not None
    assert store.fetch("A", 0, 100) == [(0, "0+1"), (5, "0+1+2"), (11, "0+2")]
    assert store.fetch_all(0, 100)[0] == (Windowed("A", Window(0, 10)), "0+1")
    d.close()
    b = StreamsBuilder()
    g = b.stream("t").group_by_key().windowed_by(SlidingWindows.of_time_difference_and_grace(10, 5))
    with pytest.raises((TopologyException, ValueError)):
        g.count(Materialized.as_("x").with_retention(20))  # < 2 * 10 + 5


def test_in_memory_store_gives_same_results() -> None:
    pipes = [("A", "1", 10), ("A", "2", 20), ("A", "3", 22), ("A", "4", 15)]
    a, d1 = _run(pipes, 10, 50)
    b, d2 = _run(pipes, 10, 50, in_memory=True)
    d1.close()
    d2.close()
    assert a == b


def test_null_key_or_value_dropped() -> None:
    b = StreamsBuilder()
    b.stream("topic").group_by_key().windowed_by(SlidingWindows.of_time_difference_with_no_grace(10)).count().to_stream().to("out", _produced())
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("topic")
        inp.pipe_input(None, "x", 5)
        inp.pipe_input("k", None, 5)
        assert d.create_output_topic("out").is_empty()
        assert d.dropped_records() == 2
