"""``KTable.suppress`` (KIP-328) through the TopologyTestDriver.

The scenarios and expected outputs are Kafka's own ``SuppressScenarioTest``: the raw
(unsuppressed) output is checked too, so the whole pipeline is pinned.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import (
    BufferConfig, Consumed, Grouped, Materialized, Produced, Serdes, SessionWindows, SlidingWindows, StreamsBuilder,
    StreamsException, Suppressed, TimeWindows, TopologyException,
)
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}
LONG = Produced.with_(S, Serdes.Long())


def _drain(d: TopologyTestDriver, topic: str) -> list[tuple[Any, Any, int]]:
    return [(r.key, r.value, r.timestamp) for r in d.create_output_topic(topic, S, Serdes.Long()).read_records_to_list()]


def _value_counts(b: StreamsBuilder, count_materialized: Any = None) -> Any:
    table = b.table("input", Consumed.with_(S, S), Materialized.with_(S, S).with_caching_disabled().with_logging_disabled())
    g = table.group_by(lambda k, v: (v, k), Grouped.with_(S, S))
    return g.count(count_materialized) if count_materialized is not None else g.count()


def test_zero_time_limit_emits_immediately() -> None:
    b = StreamsBuilder()
    vc = _value_counts(b)
    vc.suppress(Suppressed.until_time_limit(0, BufferConfig.unbounded())).to_stream().to("output-suppressed", LONG)
    vc.to_stream().to("output-raw", LONG)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("k1", "v1", 0)
        inp.pipe_input("k1", "v2", 1)
        inp.pipe_input("k2", "v1", 2)
        expected = [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]
        assert _drain(d, "output-raw") == expected
        assert _drain(d, "output-suppressed") == expected
        inp.pipe_input("x", "x", 3)
        assert _drain(d, "output-raw") == [("x", 1, 3)]
        assert _drain(d, "output-suppressed") == [("x", 1, 3)]
        inp.pipe_input("x", "y", 4)
        assert _drain(d, "output-raw") == [("x", 0, 4), ("y", 1, 4)]
        assert _drain(d, "output-suppressed") == [("x", 0, 4), ("y", 1, 4)]


def test_time_limit_suppresses_intermediate_events() -> None:
    b = StreamsBuilder()
    vc = _value_counts(b)
    vc.suppress(Suppressed.until_time_limit(2, BufferConfig.unbounded())).to_stream().to("output-suppressed", LONG)
    vc.to_stream().to("output-raw", LONG)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("k1", "v1", 0)
        inp.pipe_input("k1", "v2", 1)
        inp.pipe_input("k2", "v1", 2)
        assert _drain(d, "output-raw") == [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]
        assert _drain(d, "output-suppressed") == [("v1", 1, 2)]
        inp.pipe_input("tick", "tick", 3)  # advances stream time to 3: v2 (first buffered at 1) is due
        assert _drain(d, "output-raw") == [("tick", 1, 3)]
        assert _drain(d, "output-suppressed") == [("v2", 1, 1)]
        inp.pipe_input("tick", "tock", 4)
        assert _drain(d, "output-raw") == [("tick", 0, 4), ("tock", 1, 4)]
        # "tick" keeps its place (first buffered at 3): non-resetting, not due before 5
        assert _drain(d, "output-suppressed") == []


def test_record_limit_emits_early_when_full() -> None:
    b = StreamsBuilder()
    vc = _value_counts(b, Materialized.with_(S, Serdes.Long()))
    vc.suppress(Suppressed.until_time_limit(2**62, BufferConfig.max_records_(1).emit_early_when_full())).to_stream().to("output-suppressed", LONG)
    vc.to_stream().to("output-raw", LONG)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("k1", "v1", 0)
        inp.pipe_input("k1", "v2", 1)
        inp.pipe_input("k2", "v1", 2)
        assert _drain(d, "output-raw") == [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]
        assert _drain(d, "output-suppressed") == [("v1", 0, 1), ("v2", 1, 1)]
        inp.pipe_input("x", "x", 3)
        assert _drain(d, "output-raw") == [("x", 1, 3)]
        assert _drain(d, "output-suppressed") == [("v1", 1, 2)]


def test_bytes_limit_emits_early_when_full() -> None:
    """``max_bytes`` bounds an ESTIMATE of the buffered size (Kafka's scenario uses 200
    bytes because its entries are a bit over 100 bytes; ours are smaller, so the bound here
    is 60): one entry fits, two do not, and the oldest is emitted early."""
    b = StreamsBuilder()
    vc = _value_counts(b)
    vc.suppress(Suppressed.until_time_limit(2**62, BufferConfig(max_bytes=60))).to_stream().to("output-suppressed", LONG)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("k1", "v1", 0)
        inp.pipe_input("k1", "v2", 1)
        inp.pipe_input("k2", "v1", 2)
        assert _drain(d, "output-suppressed") == [("v1", 0, 1), ("v2", 1, 1)]


def test_shut_down_when_full() -> None:
    b = StreamsBuilder()
    vc = _value_counts(b)
    vc.suppress(Suppressed.until_time_limit(100, BufferConfig.max_records_(1).shut_down_when_full_())).to_stream().to("out", LONG)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("k1", "v1", 0)
        with pytest.raises(StreamsException, match="buffer exceeded its max capacity"):
            inp.pipe_input("k2", "v2", 1)


def _windowed_counts(b: StreamsBuilder, windows: Any) -> Any:
    return (b.stream("input", Consumed.with_(S, S)).group_by(lambda k, v: k, Grouped.with_(S, S)).windowed_by(windows)
            .count(Materialized.as_("counts").with_caching_disabled()))


def _both(vc: Any) -> None:
    vc.suppress(Suppressed.until_window_closes(BufferConfig.unbounded())).to_stream().map(lambda k, v: (str(k), v)).to("output-suppressed", LONG)
    vc.to_stream().map(lambda k, v: (str(k), v)).to("output-raw", LONG)


def test_final_results_for_time_windows() -> None:
    b = StreamsBuilder()
    _both(_windowed_counts(b, TimeWindows.of_size_and_grace(2, 1)))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        for ts in [0, 1, 2, 1, 0, 5, 0]:  # the last record is out of the grace period: dropped
            inp.pipe_input("k1", "v1", ts)
        assert _drain(d, "output-raw") == [("[k1@0/2]", 1, 0), ("[k1@0/2]", 2, 1), ("[k1@2/4]", 1, 2), ("[k1@0/2]", 3, 1),
                                           ("[k1@0/2]", 4, 1), ("[k1@4/6]", 1, 5)]
        assert _drain(d, "output-suppressed") == [("[k1@0/2]", 4, 1), ("[k1@2/4]", 1, 2)]


def test_final_results_for_time_windows_with_large_jump() -> None:
    b = StreamsBuilder()
    _both(_windowed_counts(b, TimeWindows.of_size_and_grace(2, 2)))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        for ts in [0, 1, 2, 0, 3, 0, 4, 0, 30]:
            inp.pipe_input("k1", "v1", ts)
        assert _drain(d, "output-raw") == [("[k1@0/2]", 1, 0), ("[k1@0/2]", 2, 1), ("[k1@2/4]", 1, 2), ("[k1@0/2]", 3, 1),
                                           ("[k1@2/4]", 2, 3), ("[k1@0/2]", 4, 1), ("[k1@4/6]", 1, 4), ("[k1@30/32]", 1, 30)]
        assert _drain(d, "output-suppressed") == [("[k1@0/2]", 4, 1), ("[k1@2/4]", 2, 3), ("[k1@4/6]", 1, 4)]


def test_final_results_for_sliding_windows() -> None:
    b = StreamsBuilder()
    _both(_windowed_counts(b, SlidingWindows.of_time_difference_and_grace(5, 15)))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        for ts in [10, 11, 10, 13, 10, 24, 5, 7, 90]:
            inp.pipe_input("k1", "v1", ts)
        raw = sorted(_drain(d, "output-raw"), key=lambda r: (r[0], r[2]))
        assert raw == [
            ("[k1@11/16]", 1, 11), ("[k1@11/16]", 2, 13), ("[k1@12/17]", 1, 13), ("[k1@19/24]", 1, 24),
            ("[k1@5/10]", 1, 10), ("[k1@5/10]", 2, 10), ("[k1@5/10]", 3, 10), ("[k1@5/10]", 4, 10), ("[k1@5/10]", 5, 10),
            ("[k1@6/11]", 2, 11), ("[k1@6/11]", 3, 11), ("[k1@6/11]", 4, 11), ("[k1@6/11]", 5, 11),
            ("[k1@8/13]", 4, 13), ("[k1@8/13]", 5, 13), ("[k1@85/90]", 1, 90),
        ]
        assert _drain(d, "output-suppressed") == [("[k1@5/10]", 5, 10), ("[k1@6/11]", 5, 11), ("[k1@8/13]", 5, 13),
                                                  ("[k1@11/16]", 2, 13), ("[k1@12/17]", 1, 13), ("[k1@19/24]", 1, 24)]


def test_final_results_for_session_windows() -> None:
    """For sessions the suppress duration is gap + grace; tombstones of merged sessions are
    buffered and dropped, so only the final session reaches downstream."""
    b = StreamsBuilder()
    _both(_windowed_counts(b, SessionWindows.of_inactivity_gap_and_grace(5, 0)))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("k1", "v1", 0)
        inp.pipe_input("k1", "v1", 5)
        inp.pipe_input("k1", "v1", 1)  # disordered, admitted: the session is not closed
        inp.pipe_input("k2", "v1", 11)  # advances stream time
        inp.pipe_input("k1", "v1", 5)  # late for the closed first session: dropped
        inp.pipe_input("k1", "v1", 30)
        assert _drain(d, "output-raw") == [("[k1@0/0]", 1, 0), ("[k1@0/0]", None, 0), ("[k1@0/5]", 2, 5), ("[k1@0/5]", None, 5),
                                           ("[k1@0/5]", 3, 5), ("[k2@11/11]", 1, 11), ("[k1@30/30]", 1, 30)]
        assert _drain(d, "output-suppressed") == [("[k1@0/5]", 3, 5), ("[k2@11/11]", 1, 11)]


def test_works_before_group_by() -> None:
    b = StreamsBuilder()
    (b.table("topic", Consumed.with_(S, S)).suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
     .group_by(lambda k, v: (k, v), Grouped.with_(S, S)).count().to_stream().to("output", LONG))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("topic")
        inp.pipe_input("A", "a", 0)
        inp.pipe_input("tick", "tick", 10)
        assert _drain(d, "output") == [("A", 1, 0)]


def test_works_with_cogrouped_windows() -> None:
    b = StreamsBuilder()
    s1 = b.stream("one").group_by_key()
    s2 = b.stream("two").group_by_key()
    t = (s1.cogroup(lambda k, v, agg: agg + v).cogroup(s2, lambda k, v, agg: agg + v)
         .windowed_by(TimeWindows.of_size_with_no_grace(15 * 60_000)).aggregate(lambda: "", Materialized.as_("store"), named="test")
         .suppress(Suppressed.until_window_closes(BufferConfig.unbounded())))
    t.to_stream().map(lambda k, v: (str(k), v)).to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("one").pipe_input("k", "a", 0)
        d.create_input_topic("two").pipe_input("k", "b", 1)
        d.create_input_topic("one").pipe_input("k", "c", 900_000)
        assert [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out").read_records_to_list()] == [("[k@0/900000]", "ab", 1)]


def test_until_window_closes_needs_windowed_table() -> None:
    b = StreamsBuilder()
    t = b.stream("in").group_by_key().count()
    with pytest.raises(TopologyException, match="Window close time is only defined for windowed computations"):
        t.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    with pytest.raises(ValueError):
        Suppressed.until_window_closes(BufferConfig.max_records_(3))  # must be strict (shut down when full)


def test_buffer_restored_from_its_store() -> None:
    """The buffer lives in the op's store: a new processor instance over the same store
    (a restart) emits what was buffered."""
    b = StreamsBuilder()
    _both(_windowed_counts(b, TimeWindows.of_size_with_no_grace(10)))
    topo = b.build()
    with TopologyTestDriver(topo, CONFIG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("k1", "v", 1)
        store_name = next(n for n in topo.stores if n.startswith("KTABLE-SUPPRESS-STATE-STORE"))
        task = next(t for t in d.tasks if store_name in t.stores)
        node = next(n for n in task.processors if n.startswith("KTABLE-SUPPRESS-"))
        assert len(list(task.stores[store_name].all())) == 1
        task.processors[node].init(task.processors[node].context)  # re-init from the store
        inp.pipe_input("k1", "v", 10)
        assert _drain(d, "output-suppressed") == [("[k1@0/10]", 1, 1)]
