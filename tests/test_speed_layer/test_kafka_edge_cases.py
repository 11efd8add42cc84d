"""Kafka 4.x edge cases (issue 9, parts 2 and 3), each ported as data from a test of
Apache Kafka's own suite (the Kafka test class and method are cited on each test; where
no Kafka test asserts a behaviour, the Kafka class and method it follows are cited).

Kafka's ``MockValueJoiner.TOSTRING_JOINER`` is ``lambda a, b: f"{a}+{b}"`` with Java's
``"null"`` for None; ``MockInitializer.STRING_INIT`` is ``"0"`` and
``MockAggregator.TOSTRING_ADDER`` is ``agg + "+" + value``.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import (
    BufferConfig, JoinWindows, Materialized, Serdes, SessionWindows, SlidingWindows, StreamJoined, StreamsBuilder, StreamsConfig,
    Suppressed, TimeWindows,
)
from speed_layer.config import EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION
from speed_layer.options import Consumed, Grouped, Produced
from speed_layer.testing import TopologyTestDriver
from speed_layer.windows import EmitStrategy

INT, STR = Serdes.Integer(), Serdes.String()


def _s(x: Any) -> str:
    return "null" if x is None else str(x)


def tostring_joiner(a: Any, b: Any) -> str:
    """Kafka's MockValueJoiner.TOSTRING_JOINER."""
    return f"{_s(a)}+{_s(b)}"


def tostring_adder(key: Any, value: Any, agg: Any) -> str:
    """Kafka's MockAggregator.TOSTRING_ADDER."""
    return f"{_s(agg)}+{_s(value)}"


def kvt(topic: Any) -> list[tuple[Any, Any, int | None]]:
    return [(r.key, r.value, r.timestamp) for r in topic.read_records_to_list()]


# ============================================================================ part 2
def test_streams_config_exposes_both_emit_intervals_under_kafkas_names() -> None:
    # StreamsConfig.InternalConfig in Kafka 4.x
    assert EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX == "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__"
    assert EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION == "__emit.interval.ms.kstreams.windowed.aggregation__"
    unset = StreamsConfig.of({})
    assert (unset.outer_join_emit_interval_ms, unset.windowed_aggregation_emit_interval_ms) == (1000, 1000)  # Kafka's 1000L
    given = StreamsConfig.of({EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX: 7, EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION: 9})
    assert (given.outer_join_emit_interval_ms, given.windowed_aggregation_emit_interval_ms) == (7, 9)


def test_driver_defaults_both_emit_intervals_to_zero_unless_given() -> None:
    # Kafka's TopologyTestDriver constructor: configCopy.putIfAbsent(EMIT_INTERVAL_..., 0L) for both
    b = StreamsBuilder()
    b.stream("in").to("out")
    with TopologyTestDriver(b.build()) as d:
        assert (d.config.outer_join_emit_interval_ms, d.config.windowed_aggregation_emit_interval_ms) == (0, 0)
    with TopologyTestDriver(b.build(), {EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX: 1000}) as d:
        assert (d.config.outer_join_emit_interval_ms, d.config.windowed_aggregation_emit_interval_ms) == (1000, 0)


def _left_join_100ms() -> Any:
    b = StreamsBuilder()
    s1 = b.stream("topic1", Consumed.with_(INT, STR))
    s2 = b.stream("topic2", Consumed.with_(INT, STR))
    s1.left_join(s2, tostring_joiner, JoinWindows.of_time_difference_and_grace(100, 0), StreamJoined(key_serde=INT, value_serde=STR, other_value_serde=STR)).to(
        "out", Produced.with_(INT, STR))
    return b.build()


@pytest.mark.parametrize("dummy_side", ["left", "right"])
def test_left_join_emits_expired_non_joined_records_without_advancing_the_wall_clock(dummy_side: str) -> None:
    # Kafka: KStreamKStreamLeftJoinTest#testLeftExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor
    # and #testLeftExpiredNonJoinedRecordsAreEmittedByTheRightProcessor: the mocked wall clock
    # never moves, yet the null-joins come out, because the driver sets the throttle to 0.
    with TopologyTestDriver(_left_join_100ms()) as d:
        t1, t2 = d.create_input_topic("topic1", INT, STR), d.create_input_topic("topic2", INT, STR)
        out = d.create_output_topic("out", INT, STR)
        t1.pipe_input(0, "A0", 1)
        t1.pipe_input(1, "A1", 2)
        t1.pipe_input(0, "A0-0", 3)
        assert kvt(out) == []
        t2.pipe_input(1, "a1", 3)
        assert kvt(out) == [(1, "A1+a1", 3)]
        first, second = (t1, t2) if dummy_side == "left" else (t2, t1)
        first.pipe_input(2, "dummy", 401)
        assert kvt(out) == [(0, "A0+null", 1), (0, "A0-0+null", 3)]
        ts = 401 if dummy_side == "left" else 402
        second.pipe_input(2, "dummy", ts)
        assert kvt(out) == [(2, "dummy+dummy", ts)]


def test_left_join_throttle_given_to_the_driver_holds_results_until_the_wall_clock_moves() -> None:
    # the same scenario with Kafka's production default (1000 ms) set explicitly: the scan at
    # wall-clock 0 (first record) schedules the next one at 1000
    with TopologyTestDriver(_left_join_100ms(), {EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX: 1000}) as d:
        t1 = d.create_input_topic("topic1", INT, STR)
        out = d.create_output_topic("out", INT, STR)
        t1.pipe_input(0, "A0", 1)
        t1.pipe_input(2, "dummy", 401)
        assert kvt(out) == []
        d.advance_wall_clock_time(1000)
        t1.pipe_input(3, "dummy", 402)
        assert kvt(out) == [(0, "A0+null", 1)]


# ============================================================================ part 3: KIP-825 ON_WINDOW_CLOSE
STRATEGIES = [("ON_WINDOW_UPDATE", True), ("ON_WINDOW_UPDATE", False), ("ON_WINDOW_CLOSE", True), ("ON_WINDOW_CLOSE", False)]


def _windowed_agg(strategy: str, cache: bool, windows: Any, *, initializer: Any = lambda: "0", adder: Any = tostring_adder,
                  retention_ms: int | None = None, topic: str = "topic1", store: str = "topic1-Canonized", builder: Any = None) -> Any:
    """Kafka's KStreamWindowAggregateTest topology: aggregate then ``map(key.toString())``
    to "output" (keys read as Kafka's ``Windowed#toString``, ``[A@0/10]``)."""
    b = builder or StreamsBuilder()
    m = Materialized.as_(store).with_value_serde(STR)
    m = m.with_caching_enabled() if cache else m.with_caching_disabled()
    if retention_ms is not None:
        m = m.with_retention(retention_ms)
    (b.stream(topic, Consumed.with_(STR, STR)).group_by_key()
        .windowed_by(windows).emit_strategy(EmitStrategy.on_window_close() if strategy == "ON_WINDOW_CLOSE" else EmitStrategy.on_window_update())
        .aggregate(initializer, adder, m)
        .to_stream().map(lambda k, v: (str(k), v)).to(f"{topic}-output", Produced.with_(STR, STR)))
    return b


@pytest.mark.parametrize("strategy,cache", STRATEGIES)
def test_emit_final_nothing_before_any_window_closes(strategy: str, cache: bool) -> None:
    # Kafka: KStreamWindowAggregateTest#testAggBasic (grace 100: no window closes)
    b = _windowed_agg(strategy, cache, TimeWindows.of_size_and_grace(10, 100).advance_by(5))
    rows = [("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 4), ("A", "1", 5), ("B", "2", 6), ("D", "4", 7),
            ("B", "2", 8), ("C", "3", 9), ("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14),
            ("B", "1", 3), ("B", "2", 2), ("B", "3", 9)]
    with TopologyTestDriver(b.build()) as d:
        t, out = d.create_input_topic("topic1", STR, STR), d.create_output_topic("topic1-output", STR, STR)
        for k, v, ts in rows:
            t.pipe_input(k, v, ts)
        got = kvt(out)
    if strategy == "ON_WINDOW_CLOSE":
        assert got == []
    else:
        assert got[:3] == [("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 1), ("[C@0/10]", "0+3", 2)]
        assert got[-1] == ("[B@5/15]", "0+2+2+2+2+3", 13)
        assert len(got) == 29


# Kafka: KStreamWindowAggregateTest#shouldEmitWithInterval0 (size 10, advance 5, grace 5,
# interval 0, the store kept one day): rows, then (updates, finals) expected
_INTERVAL0_ROWS = [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15), ("D", "4", 20)]
_INTERVAL0_FINAL = [("[A@0/10]", "0+1+1", 5), ("[A@5/15]", "0+1", 5), ("[B@5/15]", "0+2", 10)]
_INTERVAL0_UPDATES = [("[A@0/10]", "0+1", 0), ("[A@0/10]", "0+1+1", 5), ("[A@5/15]", "0+1", 5), ("[B@5/15]", "0+2", 10),
                      ("[B@10/20]", "0+2", 10), ("[C@10/20]", "0+3", 15), ("[C@15/25]", "0+3", 15), ("[D@15/25]", "0+4", 20),
                      ("[D@20/30]", "0+4", 20)]


@pytest.mark.parametrize("strategy,cache", STRATEGIES)
def test_emit_final_with_interval_zero(strategy: str, cache: bool) -> None:
    # Kafka: KStreamWindowAggregateTest#shouldEmitWithInterval0 (the driver defaults the
    # windowed-aggregation emit interval to 0, as the test sets it)
    b = _windowed_agg(strategy, cache, TimeWindows.of_size_and_grace(10, 5).advance_by(5), retention_ms=86_400_000)
    with TopologyTestDriver(b.build()) as d:
        t, out = d.create_input_topic("topic1", STR, STR), d.create_output_topic("topic1-output", STR, STR)
        for k, v, ts in _INTERVAL0_ROWS:
            t.pipe_input(k, v, ts)
        assert kvt(out) == (_INTERVAL0_FINAL if strategy == "ON_WINDOW_CLOSE" else _INTERVAL0_UPDATES)


@pytest.mark.parametrize("cache", [True, False])
def test_emit_final_not_before_the_close_time_covers_a_new_window(cache: bool) -> None:
    # Kafka: KStreamWindowAggregateTest#shouldNotEmitFinalIfNotProgressEnough (ON_WINDOW_CLOSE)
    b = _windowed_agg("ON_WINDOW_CLOSE", cache, TimeWindows.of_size_and_grace(10, 5).advance_by(5), retention_ms=86_400_000)
    with TopologyTestDriver(b.build()) as d:
        t, out = d.create_input_topic("topic1", STR, STR), d.create_output_topic("topic1-output", STR, STR)
        for k, v, ts in [("A", "1", 0), ("B", "2", 5), ("C", "3", 15)]:
            t.pipe_input(k, v, ts)
        assert kvt(out) == [("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 5)]
        t.pipe_input("D", "4", 15)  # observed stream time does not progress
        assert kvt(out) == []
        t.pipe_input("E", "5", 19)  # progresses, but not enough to close a new window
        assert kvt(out) == []


@pytest.mark.parametrize("cache", [True, False])
def test_emit_final_throttled_by_the_windowed_aggregation_emit_interval(cache: bool) -> None:
    # Kafka: KStreamWindowAggregateTest#shouldEmitWithLargeInterval (ON_WINDOW_CLOSE,
    # __emit.interval.ms.kstreams.windowed.aggregation__ = 1000, wall clock 0 -> 10000 -> 10100)
    b = _windowed_agg("ON_WINDOW_CLOSE", cache, TimeWindows.of_size_and_grace(10, 5).advance_by(5), retention_ms=86_400_000)
    with TopologyTestDriver(b.build(), {EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION: 1000}) as d:
        t, out = d.create_input_topic("topic1", STR, STR), d.create_output_topic("topic1-output", STR, STR)
        for k, v, ts in [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15)]:
            t.pipe_input(k, v, ts)
        assert kvt(out) == []
        d.advance_wall_clock_time(10_000)
        t.pipe_input("D", "4", 20)
        assert kvt(out) == _INTERVAL0_FINAL
        d.advance_wall_clock_time(100)
        t.pipe_input("E", "5", 40)
        assert kvt(out) == []


@pytest.mark.parametrize("strategy,cache", STRATEGIES)
def test_emit_final_with_a_retention_of_exactly_the_closed_window(strategy: str, cache: bool) -> None:
    # Kafka: KStreamWindowAggregateTest#shouldLogAndMeterWhenSkippingExpiredWindow (size 10,
    # advance 5, grace 90, retention 100; aggregate "" + "+" + value): 7 records dropped
    b = _windowed_agg(strategy, cache, TimeWindows.of_size_and_grace(10, 90).advance_by(5), initializer=lambda: "",
                      retention_ms=100)
    with TopologyTestDriver(b.build()) as d:
        t, out = d.create_input_topic("topic1", STR, STR), d.create_output_topic("topic1-output", STR, STR)
        for ts in [100, 0, 1, 2, 3, 4, 5, 6, 105, 106]:
            t.pipe_input("k", str(ts), ts)
        assert d.dropped_records() == 7
        got = kvt(out)
    if strategy == "ON_WINDOW_CLOSE":
        assert got == [("[k@5/15]", "+5+6", 6)]  # window close time is 15 at timestamp 105
    else:
        assert got == [("[k@95/105]", "+100", 100), ("[k@100/110]", "+100", 100), ("[k@5/15]", "+5", 5), ("[k@5/15]", "+5+6", 6),
                       ("[k@100/110]", "+100+105", 105), ("[k@105/115]", "+105", 105), ("[k@100/110]", "+100+105+106", 106),
                       ("[k@105/115]", "+105+106", 106)]


@pytest.mark.parametrize("cache", [True, False])
def test_emit_final_of_two_windowed_tables(cache: bool) -> None:
    # Kafka: KStreamWindowAggregateTest#testJoin, ON_WINDOW_CLOSE (grace 5): the emissions
    # of both windowed tables (the joined output of that test is not ported)
    b = StreamsBuilder()
    w = TimeWindows.of_size_and_grace(10, 5).advance_by(5)
    _windowed_agg("ON_WINDOW_CLOSE", cache, w, builder=b)
    _windowed_agg("ON_WINDOW_CLOSE", cache, w, builder=b, topic="topic2", store="topic2-Canonized")
    with TopologyTestDriver(b.build()) as d:
        t1, t2 = d.create_input_topic("topic1", STR, STR), d.create_input_topic("topic2", STR, STR)
        o1, o2 = d.create_output_topic("topic1-output", STR, STR), d.create_output_topic("topic2-output", STR, STR)
        for k, v, ts in [("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 9), ("A", "1", 15)]:
            t1.pipe_input(k, v, ts)
        assert kvt(o1) == [("[A@0/10]", "0+1+1", 9), ("[B@0/10]", "0+2", 1), ("[C@0/10]", "0+3", 2), ("[D@0/10]", "0+4", 3)]
        for k, v, ts in [("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14), ("A", "1", 20)]:
            t1.pipe_input(k, v, ts)
        assert kvt(o1) == [("[A@5/15]", "0+1+1", 10), ("[B@5/15]", "0+2+2", 13), ("[C@5/15]", "0+3", 14), ("[D@5/15]", "0+4", 12)]
        for k, v, ts in [("A", "a", 0), ("B", "b", 1), ("C", "c", 2), ("D", "d", 10), ("A", "a", 15)]:
            t2.pipe_input(k, v, ts)
        assert kvt(o1) == []
        assert kvt(o2) == [("[A@0/10]", "0+a", 0), ("[B@0/10]", "0+b", 1), ("[C@0/10]", "0+c", 2)]
        for k, v, ts in [("A", "a", 5), ("B", "b", 6), ("D", "d", 7), ("D", "d", 18), ("A", "a", 21)]:
            t2.pipe_input(k, v, ts)
        assert kvt(o2) == [("[A@5/15]", "0+a", 5), ("[B@5/15]", "0+b", 6), ("[D@5/15]", "0+d+d", 10)]


def _sliding_final(windows: Any, cache: bool, rows: list[tuple[str, int]]) -> dict[int, set[tuple[str, int]]]:
    """Kafka's KStreamSlidingWindowAggregateTest#gatherOutput: window start -> {(value, ts)}."""
    b = StreamsBuilder()
    m = Materialized.as_("store-name").with_value_serde(STR)
    m = m.with_caching_enabled() if cache else m.with_caching_disabled()
    (b.stream("topic", Consumed.with_(STR, STR)).group_by_key().windowed_by(windows).emit_strategy(EmitStrategy.on_window_close())
        .aggregate(lambda: "0", tostring_adder, m).to_stream().map(lambda k, v: (str(k.window.start), v))
        .to("output", Produced.with_(STR, STR)))
    with TopologyTestDriver(b.build()) as d:
        t = d.create_input_topic("topic", STR, STR)
        for v, ts in rows:
            t.pipe_input("A", v, ts)
        out: dict[int, set[tuple[str, int]]] = {}
        for k, v, ts in kvt(d.create_output_topic("output", STR, STR)):
            out.setdefault(int(k), set()).add((v, ts))
    return out


@pytest.mark.parametrize("cache", [True, False])
def test_sliding_emit_final_small_input(cache: bool) -> None:
    # Kafka: KStreamSlidingWindowAggregateTest#testAggregateSmallInput, ON_WINDOW_CLOSE
    got = _sliding_final(SlidingWindows.of_time_difference_and_grace(10, 5), cache,
                         [("1", 10), ("2", 10), ("3", 14), ("4", 15), ("5", 20), ("6", 22), ("7", 30)])
    assert got == {0: {("0+1+2", 10)}, 4: {("0+1+2+3", 14)}, 5: {("0+1+2+3+4", 15)}, 10: {("0+1+2+3+4+5", 20)},
                   11: {("0+3+4+5", 20)}, 12: {("0+3+4+5+6", 22)}}


@pytest.mark.parametrize("cache", [True, False])
def test_sliding_emit_final_no_grace_small_input(cache: bool) -> None:
    # Kafka: KStreamSlidingWindowAggregateTest#testNoGracePeriodSmallInput, ON_WINDOW_CLOSE
    got = _sliding_final(SlidingWindows.of_time_difference_with_no_grace(50), cache,
                         [("1", 100), ("2", 105), ("3", 106), ("4", 103), ("5", 113), ("6", 110)])
    assert got == {50: {("0+1", 100)}, 55: {("0+1+2", 105)}, 56: {("0+1+2+3+4", 106)}}


@pytest.mark.parametrize("cache", [True, False])
def test_sliding_emit_final_early_records(cache: bool) -> None:
    # Kafka: KStreamSlidingWindowAggregateTest#testEarlyRecordsSmallInput, ON_WINDOW_CLOSE
    # (difference 50, grace 0; the last record at 70 closes every window)
    got = _sliding_final(SlidingWindows.of_time_difference_and_grace(50, 0), cache,
                         [("1", 0), ("2", 5), ("3", 6), ("4", 3), ("5", 13), ("6", 10), ("7", 70)])
    assert got == {0: {("0+1+2+3+4+5+6", 13)}, 1: {("0+2+3+4+5+6", 13)}, 4: {("0+2+3+5+6", 13)}, 6: {("0+3+5+6", 13)},
                   7: {("0+5+6", 13)}, 11: {("0+5", 13)}}


# ============================================================================ part 3: old value of a new window
def _windowed_then_regrouped(kind: str) -> Any:
    """A windowed aggregation (caching off) re-grouped by key: ``group_by`` makes the
    windowed table send old values (Kafka's KTableRepartitionMap always requires them), and
    the re-grouped aggregate logs its subtractor (old value) and adder (new value) calls."""
    b = StreamsBuilder()
    w = b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10))
    m = Materialized().with_caching_disabled()
    if kind == "count":
        table = w.count(m)
    elif kind == "aggregate":
        table = w.aggregate(lambda: "0", tostring_adder, m)
    else:
        table = w.reduce(lambda agg, v: f"{agg}+{v}", m)
    (table.group_by(lambda wk, v: (wk.key, v))
        .aggregate(lambda: [], lambda k, v, agg: agg + [f"+{v}"], lambda k, v, agg: agg + [f"-{v}"])
        .to_stream().to("out"))
    return b.build()


@pytest.mark.parametrize("kind,expected", [
    ("count", ["+1", "-0", "+1"]),
    ("aggregate", ["+0+a", "-0", "+0+b"]),
    ("reduce", ["+a", "+b"]),
])
def test_old_value_of_a_new_time_window_is_the_initializers_result(kind: str, expected: list[str]) -> None:
    # Kafka 4.x KStreamWindowAggregate.KStreamWindowAggregateProcessor#process: for a window
    # not in the store ``oldAgg = initializer.apply()`` and the update is forwarded as
    # ``Change(newAgg, sendOldValues ? oldAgg : null)`` (count's initializer is 0L; reduce's
    # returns null). No Kafka test asserts this old value directly (its tests read new values
    # only); a downstream KGroupedTable aggregation makes it visible: KTableAggregate calls
    # the subtractor with a non-null old value once its own aggregate exists, so the second
    # window of "k" (new, [10, 20)) subtracts the initializer's result.
    with TopologyTestDriver(_windowed_then_regrouped(kind)) as d:
        t, out = d.create_input_topic("in"), d.create_output_topic("out")
        t.pipe_input("k", "a", 1)
        t.pipe_input("k", "b", 15)
        assert out.read_values_to_list()[-1] == expected


# ============================================================================ part 3: KIP-962 null keys
def _relaxed(join: str) -> tuple[Any, Any]:
    """Kafka's RelaxedNullKeyRequirementJoinTest topology: both inputs repartitioned first,
    joiner ``lv|rv``, JoinWindows 60 s with 10 s grace, String serdes."""
    b = StreamsBuilder()
    left = b.stream("left", Consumed.with_(STR, STR)).repartition()
    right = b.stream("right", Consumed.with_(STR, STR)).repartition()
    joiner = lambda lv, rv: f"{_s(lv)}|{_s(rv)}"  # noqa: E731
    w = JoinWindows.of_time_difference_and_grace(60_000, 10_000)
    if join == "left_stream_stream":
        out = left.left_join(right, joiner, w)
    elif join == "outer_stream_stream":
        out = left.outer_join(right, joiner, w)
    elif join == "left_stream_table":
        out = left.left_join(right.to_table(), joiner)
    elif join == "left_stream_global":
        out = left.left_join(b.global_table("global", Consumed.with_(STR, STR)), lambda k, v: None, joiner)
    else:
        out = left.repartition()
    out.to("out", Produced.with_(STR, STR))
    return b, out


@pytest.mark.parametrize("join,rows,expected", [
    # Kafka: RelaxedNullKeyRequirementJoinTest#testRelaxedLeftStreamStreamJoin
    ("left_stream_stream", [("left", "leftValue")], [(None, "leftValue|null")]),
    # Kafka: RelaxedNullKeyRequirementJoinTest#testRelaxedLeftStreamTableJoin
    ("left_stream_table", [("left", "leftValue")], [(None, "leftValue|null")]),
    # Kafka: RelaxedNullKeyRequirementJoinTest#testRelaxedOuterStreamStreamJoin
    ("outer_stream_stream", [("right", "rightValue"), ("left", "leftValue")], [(None, "null|rightValue"), (None, "leftValue|null")]),
    # Kafka: RelaxedNullKeyRequirementJoinTest#testRelaxedLeftStreamGlobalTableJoin
    ("left_stream_global", [("left", "leftValue")], [(None, "leftValue|null")]),
    # Kafka: RelaxedNullKeyRequirementJoinTest#testDropNullKeyRecordsForRepartitionNodesWithNoRelaxedJoinDownstream
    ("no_join", [("left", "leftValue")], []),
])
def test_null_key_records_pass_repartitions_followed_by_a_relaxed_join(join: str, rows: list[tuple[str, str]], expected: list[Any]) -> None:
    b, _ = _relaxed(join)
    with TopologyTestDriver(b.build()) as d:
        for topic, value in rows:
            d.create_input_topic(topic, STR, STR).pipe_input(None, value, 1)
        assert d.create_output_topic("out", STR, STR).read_key_values_to_list() == expected


def test_null_keys_pass_every_repartition_upstream_of_a_relaxed_join_only() -> None:
    # Kafka: NodesWithRelaxedNullKeyJoinDownstream marks every repartition node with a relaxed
    # join anywhere downstream (through further repartitions); the branch without one keeps
    # dropping null keys (InternalStreamsBuilder#rewriteRepartitionNodes)
    b = StreamsBuilder()
    src = b.stream("left", Consumed.with_(STR, STR)).repartition()  # first repartition
    twice = src.repartition()  # a second one, then the left join
    twice.left_join(b.stream("right", Consumed.with_(STR, STR)), lambda lv, rv: f"{_s(lv)}|{_s(rv)}",
                    JoinWindows.of_time_difference_with_no_grace(10)).to("joined", Produced.with_(STR, STR))
    src.repartition().to("plain", Produced.with_(STR, STR))  # a sibling repartition, no join below
    with TopologyTestDriver(b.build()) as d:
        d.create_input_topic("left", STR, STR).pipe_input(None, "v", 1)
        assert d.create_output_topic("joined", STR, STR).read_key_values_to_list() == [(None, "v|null")]
        assert d.create_output_topic("plain", STR, STR).read_key_values_to_list() == []


def _global_left_join(inner: bool = False) -> Any:
    """Kafka's KStreamGlobalKTable(Left)JoinTest topology: the stream value ``X<i>,FKey<i>``
    names the global table key after the comma (none: the key mapper returns null)."""
    b = StreamsBuilder()
    table = b.global_table("globalTopic", Consumed.with_(STR, STR))
    # (None-safe: Kafka calls the key mapper before dropping a null value, as duet does)
    mapper = lambda k, v: v.split(",")[1] if v is not None and len(v.split(",")) > 1 else None  # noqa: E731
    s = b.stream("streamTopic", Consumed.with_(INT, STR))
    (s.join if inner else s.left_join)(table, mapper, tostring_joiner).to("out", Produced.with_(INT, STR))
    return b.build()


def test_global_inner_join_with_null_keys_and_null_foreign_keys() -> None:
    # Kafka: KStreamGlobalKTableJoinTest#shouldJoinOnNullKeyWithNonNullKeyMapperValues (a null
    # stream key with a foreign key joins, KAFKA-10277) and #shouldNotJoinOnNullKeyMapperValues
    # (an inner join drops a null foreign key)
    with TopologyTestDriver(_global_left_join(inner=True)) as d:
        g, s = d.create_input_topic("globalTopic", STR, STR), d.create_input_topic("streamTopic", INT, STR)
        out = d.create_output_topic("out", INT, STR)
        for i in range(2):
            g.pipe_input(f"FKey{i}", f"Y{i}", i)
        for i in range(4):
            s.pipe_input(None if i == 0 else i, f"X{i},FKey{i}", i)
        assert kvt(out) == [(None, "X0,FKey0+Y0", 0), (1, "X1,FKey1+Y1", 1)]
        for i in range(4):
            s.pipe_input(i, f"XXX{i}", 4 + i)
        assert kvt(out) == []
        assert d.dropped_records() == 4


def test_global_left_join_with_a_null_key_and_a_foreign_key_joins() -> None:
    # Kafka: KStreamGlobalKTableLeftJoinTest#shouldJoinOnNullKeyWithNonNullKeyMapperValues
    with TopologyTestDriver(_global_left_join()) as d:
        g, s = d.create_input_topic("globalTopic", STR, STR), d.create_input_topic("streamTopic", INT, STR)
        for i in range(4):
            g.pipe_input(f"FKey{i}", f"Y{i}", i)
        for i in range(4):
            s.pipe_input(None if i == 0 else i, f"X{i},FKey{i}", i)
        assert kvt(d.create_output_topic("out", INT, STR)) == [(None, "X0,FKey0+Y0", 0), (1, "X1,FKey1+Y1", 1), (2, "X2,FKey2+Y2", 2),
                                                                (3, "X3,FKey3+Y3", 3)]


def test_global_left_join_with_a_null_foreign_key_joins_with_null() -> None:
    # Kafka: KStreamGlobalKTableLeftJoinTest#shouldNotJoinOnNullKeyMapperValues as changed by
    # KAFKA-19208 (apache/kafka#19580, Kafka 4.1: KStreamKTableJoinProcessor#maybeDropRecord
    # keeps a left-join record whose mapped key is null, ``leftJoin && mappedKey == null &&
    # value != null``): before it these records were dropped; since, each is joined with null.
    # A null value is still dropped (dropped-records).
    with TopologyTestDriver(_global_left_join()) as d:
        g, s = d.create_input_topic("globalTopic", STR, STR), d.create_input_topic("streamTopic", INT, STR)
        for i in range(4):
            g.pipe_input(f"FKey{i}", f"Y{i}", i)
        for i in range(4):
            s.pipe_input(i, f"XXX{i}", 4 + i)
        s.pipe_input(None, "XXX9", 9)
        s.pipe_input(5, None, 10)
        assert kvt(d.create_output_topic("out", INT, STR)) == [(0, "XXX0+null", 4), (1, "XXX1+null", 5), (2, "XXX2+null", 6),
                                                                (3, "XXX3+null", 7), (None, "XXX9+null", 9)]
        assert d.dropped_records() == 1


# ============================================================================ part 3: versioned table-table joins
# Kafka: AbstractJoinIntegrationTest#input (key 0, Long keys; out-of-order updates and
# tombstones from step 14 on) and the expected results of TableTableJoinIntegrationTest
# (joiner ``v1 + "-" + v2``; None: no output for the step; a 2-tuple: (value, ts)).
TT_INPUT = [("L", None, 1), ("R", None, 2), ("L", "A", 3), ("R", "a", 4), ("L", "B", 5), ("R", "b", 6), ("L", None, 7), ("R", None, 8),
            ("L", "C", 9), ("R", "c", 10), ("R", None, 11), ("L", None, 12), ("R", None, 13),
            ("R", "d", 7),  # out-of-order data with null as latest
            ("L", "D", 6), ("L", None, 2), ("R", None, 3), ("R", "e", 14), ("L", "E", 15),
            ("L", None, 10),  # out-of-order data with non-null as latest
            ("R", None, 9), ("L", "F", 4), ("R", "f", 3)]
_N = None
TT_EXPECTED = {
    # TableTableJoinIntegrationTest#testInnerWithVersionedStores
    ("inner", "both"): [_N, _N, _N, ("A-a", 4), ("B-a", 5), ("B-b", 6), (None, 7), _N, _N, ("C-c", 10), (None, 11), _N, _N, _N, _N, _N,
                        _N, _N, ("E-e", 15), _N, _N, _N, _N],
    # TableTableJoinIntegrationTest#testLeftWithVersionedStores
    ("left", "both"): [_N, _N, ("A-null", 3), ("A-a", 4), ("B-a", 5), ("B-b", 6), (None, 7), _N, ("C-null", 9), ("C-c", 10),
                       ("C-null", 11), (None, 12), _N, _N, _N, _N, _N, _N, ("E-e", 15), _N, _N, _N, _N],
    # TableTableJoinIntegrationTest#testOuterWithVersionedStores
    ("outer", "both"): [_N, _N, ("A-null", 3), ("A-a", 4), ("B-a", 5), ("B-b", 6), ("null-b", 7), (None, 8), ("C-null", 9), ("C-c", 10),
                        ("C-null", 11), (None, 12), _N, _N, _N, _N, _N, ("null-e", 14), ("E-e", 15), _N, _N, _N, _N],
    # TableTableJoinIntegrationTest#testLeftWithLeftVersionedOnly (caching disabled)
    ("left", "left"): [_N, _N, ("A-null", 3), ("A-a", 4), ("B-a", 5), ("B-b", 6), (None, 7), _N, ("C-null", 9), ("C-c", 10),
                       ("C-null", 11), (None, 12), _N, _N, _N, _N, _N, _N, ("E-e", 15), _N, ("E-null", 15), _N, ("E-f", 15)],
    # TableTableJoinIntegrationTest#testOuterWithLeftVersionedOnly (caching disabled)
    ("outer", "left"): [_N, _N, ("A-null", 3), ("A-a", 4), ("B-a", 5), ("B-b", 6), ("null-b", 7), (None, 8), ("C-null", 9), ("C-c", 10),
                        ("C-null", 11), (None, 12), _N, ("null-d", 7), _N, _N, (None, 3), ("null-e", 14), ("E-e", 15), _N,
                        ("E-null", 15), _N, ("E-f", 15)],
    # TableTableJoinIntegrationTest#testLeftWithRightVersionedOnly (caching disabled)
    ("left", "right"): [_N, _N, ("A-null", 3), ("A-a", 4), ("B-a", 5), ("B-b", 6), (None, 7), _N, ("C-null", 9), ("C-c", 10),
                        ("C-null", 11), (None, 12), _N, _N, ("D-null", 6), (None, 2), _N, _N, ("E-e", 15), (None, 14), _N,
                        ("F-e", 14), _N],
}


@pytest.mark.parametrize("kind,versioned", sorted(TT_EXPECTED))
def test_versioned_table_table_join_with_out_of_order_updates_and_tombstones(kind: str, versioned: str) -> None:
    # Kafka: TableTableJoinIntegrationTest#test{Inner,Left,Outer}With{Versioned,LeftVersionedOnly,
    # RightVersionedOnly}Stores: out-of-order records of a versioned table (older than its
    # latest version) are not joined; the result is materialized unversioned, caching off
    LONG = Serdes.Long()
    b = StreamsBuilder()

    def table(topic: str, store: str, is_versioned: bool) -> Any:
        m = Materialized.as_(store).with_key_serde(LONG).with_value_serde(STR).with_logging_disabled()
        if is_versioned:
            m = m.as_versioned(5 * 60_000)
        return b.table(topic, Consumed.with_(LONG, STR), m)

    left = table("inputTopicLeft", "left", versioned in ("both", "left"))
    right = table("inputTopicRight", "right", versioned in ("both", "right"))
    joiner = lambda v1, v2: f"{_s(v1)}-{_s(v2)}"  # noqa: E731
    out_m = Materialized.as_("store").with_key_serde(LONG).with_value_serde(STR).with_caching_disabled().with_logging_disabled()
    getattr(left, {"inner": "join", "left": "left_join", "outer": "outer_join"}[kind])(right, joiner, out_m).to_stream().to(
        "outputTopic", Produced.with_(LONG, STR))
    with TopologyTestDriver(b.build()) as d:
        ins = {"L": d.create_input_topic("inputTopicLeft", LONG, STR), "R": d.create_input_topic("inputTopicRight", LONG, STR)}
        out = d.create_output_topic("outputTopic", LONG, STR)
        got = []
        for side, value, ts in TT_INPUT:
            ins[side].pipe_input(0, value, ts)
            rows = [(v, t) for _k, v, t in kvt(out)]
            got.append(rows[0] if len(rows) == 1 else (None if not rows else rows))
        assert got == TT_EXPECTED[(kind, versioned)]


# ============================================================================ part 3: a suppressed table joined
@pytest.mark.parametrize("suppressed_side", ["right", "left"])
def test_suppressed_table_as_a_join_side(suppressed_side: str) -> None:
    # Kafka: SuppressScenarioTest#shouldWorkBeforeJoinRight and #shouldWorkBeforeJoinLeft: the
    # suppressed table's value getter gives the last value it EMITTED for a buffered key
    # (the buffer's prior value) and looks through to its parent for the others
    b = StreamsBuilder()
    left = b.table("left", Consumed.with_(STR, STR))
    right = b.table("right", Consumed.with_(STR, STR))
    sup = Suppressed.until_time_limit(10, BufferConfig.unbounded())
    if suppressed_side == "right":
        right = right.suppress(sup)
    else:
        left = left.suppress(sup)
    left.outer_join(right, lambda l, r: f"({_s(l)},{_s(r)})").to_stream().to("output", Produced.with_(STR, STR))
    with TopologyTestDriver(b.build()) as d:
        t_left, t_right = d.create_input_topic("left", STR, STR), d.create_input_topic("right", STR, STR)
        sup_in, other_in = (t_right, t_left) if suppressed_side == "right" else (t_left, t_right)
        out = d.create_output_topic("output", STR, STR)

        def pair(s: str, o: str) -> str:  # (left,right) whichever side is suppressed
            return f"({o},{s})" if suppressed_side == "right" else f"({s},{o})"

        sup_in.pipe_input("B", "1", 0)
        sup_in.pipe_input("A", "1", 0)
        assert kvt(out) == []  # buffered
        sup_in.pipe_input("tick", "tick", 10)
        assert kvt(out) == [("A", pair("1", "null"), 0), ("B", pair("1", "null"), 0)]  # buffer flushed
        sup_in.pipe_input("A", "2", 11)
        assert kvt(out) == []  # buffered
        other_in.pipe_input("A", "a", 12)
        assert kvt(out) == [("A", pair("1", "a"), 12)]  # joins the previously emitted value
        other_in.pipe_input("B", "b", 12)
        assert kvt(out) == [("B", pair("1", "b"), 12)]  # B is no longer buffered: the parent's value
        other_in.pipe_input("A", "b", 13)
        assert kvt(out) == [("A", pair("1", "b"), 13)]
        sup_in.pipe_input("tick", "tick1", 21)
        assert kvt(out) == [("tick", pair("tick1", "null"), 21), ("A", pair("2", "b"), 13)]


# ============================================================================ part 3: session-window reduce
_SESSION_ROWS = [("1", "1", 10), ("1", "2", 15), ("1", "3", 600), ("2", "1", 600), ("2", "2", 599)]  # processData


def _session_reduce(materialized: Any = None) -> Any:
    """Kafka's SessionWindowedKStreamImplTest: sessions with a 500 ms gap and no grace,
    ``MockReducer.STRING_ADDER`` (``agg + "+" + value``)."""
    b = StreamsBuilder()
    table = (b.stream("topic", Consumed.with_(STR, STR)).group_by_key()
             .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(500))
             .reduce(lambda agg, v: f"{agg}+{v}", materialized))
    table.to_stream().map(lambda k, v: (f"{k.key}@{k.window.start}/{k.window.end}", v)).to("out", Produced.with_(STR, STR))
    return b.build()


def test_session_reduce_forwards_merges_as_tombstones_then_the_merged_session() -> None:
    # Kafka: SessionWindowedKStreamImplTest#shouldReduceWindowed (ON_WINDOW_UPDATE; the
    # driver commits, so the cache flushes, after each record)
    with TopologyTestDriver(_session_reduce()) as d:
        t = d.create_input_topic("topic", STR, STR)
        for k, v, ts in _SESSION_ROWS:
            t.pipe_input(k, v, ts)
        assert kvt(d.create_output_topic("out", STR, STR)) == [
            ("1@10/10", "1", 10), ("1@10/10", None, 10), ("1@10/15", "1+2", 15), ("1@600/600", "3", 600),
            ("2@600/600", "1", 600), ("2@600/600", None, 600), ("2@599/600", "1+2", 600)]


@pytest.mark.parametrize("caching", [True, False])
def test_session_reduce_store_after_merges(caching: bool) -> None:
    # Kafka: SessionWindowedKStreamImplTest#shouldMaterializeReduced (ON_WINDOW_UPDATE): the
    # merged-away sessions (1@[10,10], 2@[600,600]) are gone, each merged session holds the
    # reduced value. Retention is gap + grace = 500 ms: without a cache Kafka's segmented
    # store no longer returns 1@[10,15] at stream time 600 (fetch from 600 - 500 + 1); with
    # the cache (Kafka's default, the test's case) the flushed session stays in the cache as
    # a clean entry, which CachingSessionStore#findSessions reads without a retention filter
    m = Materialized.as_("reduced").with_value_serde(STR)
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    with TopologyTestDriver(_session_reduce(m)) as d:
        t = d.create_input_topic("topic", STR, STR)
        for k, v, ts in _SESSION_ROWS:
            t.pipe_input(k, v, ts)
        store = d.get_session_store("reduced")
        got = [((w.key, w.window.start, w.window.end), v) for key in ("1", "2") for w, v in store.fetch(key)]
        expected = [(("1", 600, 600), "3"), (("2", 599, 600), "1+2")]
        assert got == ([(("1", 10, 15), "1+2")] + expected if caching else expected)


@pytest.mark.parametrize("kind", ["reduce", "count"])
@pytest.mark.parametrize("caching", [True, False])
def test_session_store_holds_only_the_merged_session(kind: str, caching: bool) -> None:
    # Kafka: KStreamSessionWindowAggregateProcessorTest#shouldRemoveMergedSessionsFromStateStore
    # (gap 5 min; there a count-like aggregate, here also as reduce): after the merge the
    # store holds a@[0,100] only
    gap = 5 * 60 * 1000
    b = StreamsBuilder()
    m = Materialized.as_("session-store")
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    w = b.stream("topic", Consumed.with_(STR, STR)).group_by_key().windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(gap))
    (w.reduce(lambda agg, v: f"{agg}+{v}", m) if kind == "reduce" else w.count(m))
    with TopologyTestDriver(b.build()) as d:
        t = d.create_input_topic("topic", STR, STR)
        store = d.get_session_store("session-store")
        t.pipe_input("a", "1", 0)
        assert [((s.key, s.window.start, s.window.end), v) for s, v in store.find_sessions("a", 0, 0)] == [
            (("a", 0, 0), "1" if kind == "reduce" else 1)]
        t.pipe_input("a", "2", 100)
        assert [((s.key, s.window.start, s.window.end), v) for s, v in store.find_sessions("a", 0, 100)] == [
            (("a", 0, 100), "1+2" if kind == "reduce" else 2)]
        assert [((s.key, s.window.start, s.window.end), v) for s, v in store.all()] == [(("a", 0, 100), "1+2" if kind == "reduce" else 2)]


@pytest.mark.parametrize("caching", [True, False])
def test_session_reduce_record_bridging_two_sessions(caching: bool) -> None:
    # Kafka 4.x SessionWindowedKStreamImpl#reduce: initializer null, aggregator
    # ``agg == null ? value : reducer(agg, value)``, merger ``aggregator(key, aggTwo, aggOne)``;
    # KStreamSessionWindowAggregate merges the found sessions in store order, then adds the
    # record: "1"@0 and "2"@1000 (gap 500) bridged by "3"@500 give one session [0, 1000]
    # = "1+2+3", and the two merged sessions are removed from the store
    b = StreamsBuilder()
    m = Materialized.as_("reduced").with_value_serde(STR)
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    table = (b.stream("topic", Consumed.with_(STR, STR)).group_by_key()
             .windowed_by(SessionWindows.of_inactivity_gap_and_grace(500, 1000)).reduce(lambda agg, v: f"{agg}+{v}", m))
    table.to_stream().map(lambda k, v: (f"{k.key}@{k.window.start}/{k.window.end}", v)).to("out", Produced.with_(STR, STR))
    with TopologyTestDriver(b.build()) as d:
        t = d.create_input_topic("topic", STR, STR)
        for v, ts in [("1", 0), ("2", 1000), ("3", 500)]:
            t.pipe_input("k", v, ts)
        store = d.get_session_store("reduced")
        assert [((s.window.start, s.window.end), v) for s, v in store.fetch("k")] == [((0, 1000), "1+2+3")]
        assert kvt(d.create_output_topic("out", STR, STR))[-3:] == [("k@0/0", None, 0), ("k@1000/1000", None, 1000),
                                                                     ("k@0/1000", "1+2+3", 1000)]


# ============================================================================ part 3: KIP-825 for sessions
def _session_agg(kind: str, strategy: str, caching: bool = True, store: str | None = None) -> Any:
    """Kafka's SessionWindowedKStreamImplTest: gap 500 ms, no grace, the given strategy."""
    b = StreamsBuilder()
    m = Materialized.as_(store) if store else Materialized()
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    w = (b.stream("topic", Consumed.with_(STR, STR)).group_by_key()
         .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(500))
         .emit_strategy(EmitStrategy.on_window_close() if strategy == "ON_WINDOW_CLOSE" else EmitStrategy.on_window_update()))
    if kind == "count":
        table = w.count(m)
    elif kind == "reduce":
        table = w.reduce(lambda agg, v: f"{agg}+{v}", m)
    else:
        table = w.aggregate(lambda: "0", tostring_adder, lambda k, a, b2: f"{a}+{b2}", m)
    table.to_stream().map(lambda k, v: (f"{k.key}@{k.window.start}/{k.window.end}", v)).to("out")
    return b.build()


_SESSION_UPDATES = {
    "count": [("1@10/10", 1, 10), ("1@10/10", None, 10), ("1@10/15", 2, 15), ("1@600/600", 1, 600), ("2@600/600", 1, 600),
              ("2@600/600", None, 600), ("2@599/600", 2, 600)],
    "reduce": [("1@10/10", "1", 10), ("1@10/10", None, 10), ("1@10/15", "1+2", 15), ("1@600/600", "3", 600),
               ("2@600/600", "1", 600), ("2@600/600", None, 600), ("2@599/600", "1+2", 600)],
    "aggregate": [("1@10/10", "0+1", 10), ("1@10/10", None, 10), ("1@10/15", "0+0+1+2", 15), ("1@600/600", "0+3", 600),
                  ("2@600/600", "0+1", 600), ("2@600/600", None, 600), ("2@599/600", "0+0+1+2", 600)],
}


@pytest.mark.parametrize("strategy", ["ON_WINDOW_UPDATE", "ON_WINDOW_CLOSE"])
@pytest.mark.parametrize("kind,caching", [("count", False), ("count", True), ("reduce", True), ("aggregate", True)])
def test_session_emit_strategy(kind: str, caching: bool, strategy: str) -> None:
    # Kafka: SessionWindowedKStreamImplTest#shouldCountSessionWindowedWithCachingDisabled,
    # #shouldCountSessionWindowedWithCachingEnabled, #shouldReduceWindowed and
    # #shouldAggregateSessionWindowed, both strategies
    with TopologyTestDriver(_session_agg(kind, strategy, caching)) as d:
        t = d.create_input_topic("topic", STR, STR)
        for k, v, ts in _SESSION_ROWS:
            t.pipe_input(k, v, ts)
        got = kvt(d.create_output_topic("out", STR))
    if strategy == "ON_WINDOW_CLOSE":
        assert got == [_SESSION_UPDATES[kind][2]]  # only 1@[10,15] closes (at 600 - 500)
    else:
        assert got == _SESSION_UPDATES[kind]


@pytest.mark.parametrize("strategy", ["ON_WINDOW_UPDATE", "ON_WINDOW_CLOSE"])
@pytest.mark.parametrize("kind,caching", [("count", True), ("aggregate", True), ("count", False)])
def test_session_emit_strategy_store_contents(kind: str, caching: bool, strategy: str) -> None:
    # Kafka: SessionWindowedKStreamImplTest#shouldMaterializeCount and
    # #shouldMaterializeAggregated (default caching), both strategies: with ON_WINDOW_UPDATE the
    # cached store still returns 1@[10,15], expired at stream time 600 but still a clean cache
    # entry; ON_WINDOW_CLOSE stores are never cached (nor is the store with caching disabled)
    with TopologyTestDriver(_session_agg(kind, strategy, caching=caching, store="store")) as d:
        t = d.create_input_topic("topic", STR, STR)
        for k, v, ts in _SESSION_ROWS:
            t.pipe_input(k, v, ts)
        store = d.get_session_store("store")
        got = [((w.key, w.window.start, w.window.end), v) for key in ("1", "2") for w, v in store.fetch(key)]
    live = {"count": [(("1", 600, 600), 1), (("2", 599, 600), 2)],
            "aggregate": [(("1", 600, 600), "0+3"), (("2", 599, 600), "0+0+1+2")]}[kind]
    expired = {"count": 2, "aggregate": "0+0+1+2"}[kind]
    served_from_cache = caching and strategy == "ON_WINDOW_UPDATE"
    assert got == ([(("1", 10, 15), expired)] if served_from_cache else []) + live


@pytest.mark.parametrize("strategy", ["ON_WINDOW_UPDATE", "ON_WINDOW_CLOSE"])
def test_session_emit_final_of_multiple_sessions_and_merges(strategy: str) -> None:
    # Kafka: KStreamSessionWindowAggregateProcessorTest#shouldHandleMultipleSessionsAndMerging
    # (gap 5 min, count-like aggregate, caching on; the sessions of a, b, c at 0 and d's
    # merged [0, gap/2] close and are emitted in end, start, key order)
    gap = 5 * 60 * 1000
    b = StreamsBuilder()
    (b.stream("topic", Consumed.with_(STR, STR)).group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(gap))
        .emit_strategy(EmitStrategy.on_window_close() if strategy == "ON_WINDOW_CLOSE" else EmitStrategy.on_window_update())
        .aggregate(lambda: 0, lambda k, v, agg: agg + 1, lambda k, a, b2: a + b2, Materialized.as_("session-store").with_value_serde(Serdes.Long()))
        .to_stream().map(lambda k, v: (f"{k.key}@{k.window.start}/{k.window.end}", v)).to("out"))
    rows = [("a", 0), ("b", 0), ("c", 0), ("d", 0), ("d", gap // 2), ("a", gap + 1), ("b", gap + 1), ("a", gap + 1 + gap // 2),
            ("c", gap + 1 + gap // 2)]
    with TopologyTestDriver(b.build()) as d:
        t = d.create_input_topic("topic", STR, STR)
        for k, ts in rows:
            t.pipe_input(k, "1", ts)
        got = kvt(d.create_output_topic("out", STR))
    closed = [("a@0/0", 1, 0), ("b@0/0", 1, 0), ("c@0/0", 1, 0), (f"d@0/{gap // 2}", 2, gap // 2)]
    if strategy == "ON_WINDOW_CLOSE":
        assert got == closed
    else:  # the driver commits (flushing the cache) after each record
        assert got == [("a@0/0", 1, 0), ("b@0/0", 1, 0), ("c@0/0", 1, 0), ("d@0/0", 1, 0), ("d@0/0", None, 0),
                       (f"d@0/{gap // 2}", 2, gap // 2), (f"a@{gap + 1}/{gap + 1}", 1, gap + 1), (f"b@{gap + 1}/{gap + 1}", 1, gap + 1),
                       (f"a@{gap + 1}/{gap + 1}", None, gap + 1), (f"a@{gap + 1}/{gap + 1 + gap // 2}", 2, gap + 1 + gap // 2),
                       (f"c@{gap + 1 + gap // 2}/{gap + 1 + gap // 2}", 1, gap + 1 + gap // 2)]


def test_aggregation_of_a_versioned_table_ignores_out_of_order_updates_after_a_tombstone() -> None:
    # Kafka: KTableAggregateTest#testAggOfVersionedStore: ("A", "1", 12) comes after A's
    # tombstone at 15 and ("B", "7", 22) after B's update at 23: both out of order, ignored;
    # the "null" key maps to a null group key and "NULL" to no pair: both skipped
    b = StreamsBuilder()
    table = b.table("topic1", Consumed.with_(STR, STR), Materialized.as_("versioned").as_versioned(5 * 60_000))

    def select(k: str, v: str) -> Any:
        return {"null": (None, v), "NULL": None}.get(k, (v, v))

    (table.group_by(select, Grouped.with_(STR, STR))
        .aggregate(lambda: "0", tostring_adder, lambda k, v, agg: f"{agg}-{v}", Materialized.as_("topic1-Canonized").with_value_serde(STR))
        .to_stream().to("out", Produced.with_(STR, STR)))
    with TopologyTestDriver(b.build()) as d:
        t = d.create_input_topic("topic1", STR, STR)
        for k, v, ts in [("A", "1", 10), ("A", None, 15), ("A", "1", 12), ("B", "2", 20), ("null", "3", 25), ("B", "4", 23),
                         ("NULL", "5", 24), ("B", "7", 22)]:
            t.pipe_input(k, v, ts)
        assert kvt(d.create_output_topic("out", STR, STR)) == [("1", "0+1", 10), ("1", "0+1-1", 15), ("2", "0+2", 20), ("2", "0+2-2", 23),
                                                               ("4", "0+4", 23)]


# ============================================================================ part 3: KIP-914 is_latest
class _Capture:
    """A Processor-API processor recording ``(key, Change, timestamp)`` (Kafka's MockApiProcessor)."""

    def __init__(self, sink: list[Any]) -> None:
        self.sink = sink

    def init(self, context: Any) -> None:
        pass

    def process(self, record: Any) -> None:
        self.sink.append((record.key, record.value, record.timestamp))

    def close(self) -> None:
        pass


def test_versioned_table_source_forwards_out_of_order_updates_flagged_not_latest() -> None:
    # Kafka 4.x KTableSource#process over a versioned store: an update that is put but is
    # not the latest version is forwarded as Change(value, latest value, isLatest=false)
    # (KIP-914); one older than the history retention is not put and not forwarded.
    # No Kafka test asserts the flag through the DSL; toStream() passes such updates on.
    b = StreamsBuilder()
    table = b.table("t", Consumed.with_(STR, STR), Materialized.as_("versioned").as_versioned(100))
    table.to_stream().to("out", Produced.with_(STR, STR))
    topology = b.build()
    seen: list[Any] = []
    topology.add_processor("capture", lambda: _Capture(seen), table.node)
    with TopologyTestDriver(topology) as d:
        t = d.create_input_topic("t", STR, STR)
        for v, ts in [("a", 10), (None, 20), ("b", 15), ("c", 300), ("d", 100)]:
            t.pipe_input("k", v, ts)
        assert [(c.new, c.old, c.is_latest, ts) for _k, c, ts in seen] == [
            ("a", None, True, 10), (None, "a", True, 20), ("b", None, False, 15), ("c", None, True, 300)]  # d@100 < 300 - 100
        assert kvt(d.create_output_topic("out", STR, STR)) == [("k", "a", 10), ("k", None, 20), ("k", "b", 15), ("k", "c", 300)]


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
def test_versioned_table_table_join_counts_skipped_out_of_order_updates(kind: str) -> None:
    # Kafka: KTableKTable{Inner,Left,Outer}Join#process "Skipping out-of-order record from
    # versioned table" records droppedRecordsSensor; of TT_INPUT's last 10 records all but
    # ("R", "e", 14) and ("L", "E", 15) are out of order for their (versioned) table
    LONG = Serdes.Long()
    b = StreamsBuilder()
    m = lambda s: Materialized.as_(s).with_key_serde(LONG).with_value_serde(STR).as_versioned(5 * 60_000)  # noqa: E731
    left = b.table("inputTopicLeft", Consumed.with_(LONG, STR), m("left"))
    right = b.table("inputTopicRight", Consumed.with_(LONG, STR), m("right"))
    getattr(left, {"inner": "join", "left": "left_join", "outer": "outer_join"}[kind])(right, lambda v1, v2: f"{v1}-{v2}").to_stream().to(
        "outputTopic", Produced.with_(LONG, STR))
    with TopologyTestDriver(b.build()) as d:
        ins = {"L": d.create_input_topic("inputTopicLeft", LONG, STR), "R": d.create_input_topic("inputTopicRight", LONG, STR)}
        for side, value, ts in TT_INPUT:
            ins[side].pipe_input(0, value, ts)
        assert d.dropped_records() == 8


def _filter_reject(upstream_versioned: bool, filter_versioned: bool) -> tuple[Any, Any, Any]:
    b = StreamsBuilder()
    m1 = Materialized.as_("versioned").as_versioned(5 * 60_000) if upstream_versioned else Materialized.as_("store")
    table1 = b.table("topic1", Consumed.with_(STR, STR), m1)
    pred = lambda k, v: v.lower() == "accept"  # noqa: E731
    table2 = table1.filter(pred, materialized=Materialized.as_("fv").as_versioned(5 * 60_000)) if filter_versioned else table1.filter(pred)
    table2.group_by(lambda k, v: (k, v)).reduce(lambda a, v: f"{a}+{v}", lambda a, v: f"{a}-{v}")
    return b, table1, table2


@pytest.mark.parametrize("upstream_versioned,filter_versioned,skip", [
    (False, False, True),  # Kafka: KTableFilterTest#shouldSkipNullToRepartitionWithoutMaterialization
    (True, False, False),  # Kafka: KTableFilterTest#shouldNotSkipNullIfVersionedUpstream
    (False, True, True),  # Kafka: KTableFilterTest#shouldSkipNullIfVersionedDownstream
])
def test_filter_skips_repeated_tombstones_unless_the_input_table_is_versioned(upstream_versioned: bool, filter_versioned: bool,
                                                                              skip: bool) -> None:
    # Kafka: KTableFilterTest#doTestSkipNullOnMaterialization: a downstream group_by makes the
    # filter send old values; a rejected value whose old value was rejected too is skipped,
    # except when the filter's input table is versioned (KIP-914)
    b, table1, table2 = _filter_reject(upstream_versioned, filter_versioned)
    topology = b.build()
    seen1: list[Any] = []
    seen2: list[Any] = []
    topology.add_processor("proc1", lambda: _Capture(seen1), table1.node)
    topology.add_processor("proc2", lambda: _Capture(seen2), table2.node)
    with TopologyTestDriver(topology) as d:
        t = d.create_input_topic("topic1", STR, STR)
        for k, ts in [("A", 5), ("B", 10), ("C", 20)]:
            t.pipe_input(k, "reject", ts)
    assert [(k, c.new, c.old, ts) for k, c, ts in seen1] == [("A", "reject", None, 5), ("B", "reject", None, 10), ("C", "reject", None, 20)]
    assert [(k, c.new, c.old, ts) for k, c, ts in seen2] == ([] if skip else [("A", None, None, 5), ("B", None, None, 10), ("C", None, None, 20)])


def test_suppress_of_a_versioned_table_is_refused() -> None:
    # Kafka 4.x InternalStreamsBuilder#enableVersionedSemantics: "suppress() is only supported
    # for non-versioned KTables (note that version semantics might be inherited from upstream)"
    from speed_layer import TopologyException

    b = StreamsBuilder()
    table = b.table("t", Consumed.with_(STR, STR), Materialized.as_("v").as_versioned(1000))
    with pytest.raises(TopologyException, match="only supported for non-versioned KTables"):
        table.filter(lambda k, v: True).suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    # a non-versioned materialization in between ends the versioned semantics
    table.filter(lambda k, v: True, materialized=Materialized.as_("plain")).suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))


def test_suppressed_table_as_the_table_side_of_a_stream_table_join() -> None:
    # SuppressScenarioTest#shouldWorkBeforeJoinRight's sequence with a KStream on the left:
    # Kafka's KStreamImpl#doStreamTableJoin looks the table up through its
    # valueGetterSupplier, for a suppressed table KTableSuppressProcessorSupplier#view (the
    # buffered key's prior value, else the parent table). Table updates emit nothing.
    b = StreamsBuilder()
    right = b.table("right", Consumed.with_(STR, STR)).suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    b.stream("left", Consumed.with_(STR, STR)).left_join(right, lambda l, r: f"({_s(l)},{_s(r)})").to("output", Produced.with_(STR, STR))
    with TopologyTestDriver(b.build()) as d:
        t_left, t_right = d.create_input_topic("left", STR, STR), d.create_input_topic("right", STR, STR)
        out = d.create_output_topic("output", STR, STR)
        t_right.pipe_input("B", "1", 0)
        t_right.pipe_input("A", "1", 0)
        t_left.pipe_input("A", "early", 1)  # A is buffered and was never emitted: no prior value
        t_right.pipe_input("tick", "tick", 10)  # flushes A and B
        t_right.pipe_input("A", "2", 11)  # buffered
        t_left.pipe_input("A", "a", 12)  # the previously emitted right value
        t_left.pipe_input("B", "b", 12)  # B is no longer buffered: the parent's value
        t_left.pipe_input("C", "c", 14)  # absent
        t_right.pipe_input("tick", "tick1", 21)  # flushes A = 2
        t_left.pipe_input("A", "d", 22)
        assert kvt(out) == [("A", "(early,null)", 1), ("A", "(a,1)", 12), ("B", "(b,1)", 12), ("C", "(c,null)", 14), ("A", "(d,2)", 22)]


def test_unmaterialized_filtered_table_as_the_table_side_of_a_stream_table_join() -> None:
    # Kafka's KTableFilter#view: the parent's value, filtered (a rejected value reads as absent)
    b = StreamsBuilder()
    table = b.table("t", Consumed.with_(STR, STR)).filter(lambda k, v: v != "x")
    b.stream("s", Consumed.with_(STR, STR)).left_join(table, lambda l, r: f"{l}|{_s(r)}").to("o", Produced.with_(STR, STR))
    with TopologyTestDriver(b.build()) as d:
        ti, si = d.create_input_topic("t", STR, STR), d.create_input_topic("s", STR, STR)
        ti.pipe_input("k", "1", 0)
        si.pipe_input("k", "v", 1)
        ti.pipe_input("k", "x", 5)
        si.pipe_input("k", "w", 6)
        assert kvt(d.create_output_topic("o", STR, STR)) == [("k", "v|1", 1), ("k", "w|null", 6)]


@pytest.mark.parametrize("join", ["left", "outer", "inner"])
def test_null_keys_after_a_key_change_reach_a_left_or_outer_join_through_its_repartition(join: str) -> None:
    # Kafka: KStreamImplJoin labels left/outer joins NULL_KEY_RELAXED_JOIN, so the
    # repartitionForJoin topic created after select_key keeps the null-key records
    # (InternalStreamsBuilder#rewriteRepartitionNodes); an inner join's repartition drops them
    b = StreamsBuilder()
    left = b.stream("left", Consumed.with_(STR, STR)).select_key(lambda k, v: None if v.startswith("n") else k)
    right = b.stream("right", Consumed.with_(STR, STR))
    joiner = lambda lv, rv: f"{_s(lv)}|{_s(rv)}"  # noqa: E731
    w = JoinWindows.of_time_difference_with_no_grace(10)
    {"left": left.left_join, "outer": left.outer_join, "inner": left.join}[join](right, joiner, w).to("out", Produced.with_(STR, STR))
    with TopologyTestDriver(b.build()) as d:
        d.create_input_topic("right", STR, STR).pipe_input("k", "r", 1)
        lin = d.create_input_topic("left", STR, STR)
        lin.pipe_input("k", "nothing", 2)  # key mapped to null
        lin.pipe_input("k", "v", 3)
        got = kvt(d.create_output_topic("out", STR, STR))
    assert got == ([(None, "nothing|null", 2), ("k", "v|r", 3)] if join != "inner" else [("k", "v|r", 3)])
