"""Kafka 4.x edge cases (issue 9, parts 2 and 3), each ported as data from a test of
Apache Kafka's own suite (the Kafka test class and method are cited on each test).

Kafka's ``MockValueJoiner.TOSTRING_JOINER`` is ``lambda a, b: f"{a}+{b}"`` with Java's
``"null"`` for None; ``MockInitializer.STRING_INIT`` is ``"0"`` and
``MockAggregator.TOSTRING_ADDER`` is ``agg + "+" + value``.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import JoinWindows, Serdes, StreamJoined, StreamsBuilder, StreamsConfig
from speed_layer.config import EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION
from speed_layer.options import Consumed, Produced
from speed_layer.testing import TopologyTestDriver

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
