"""Cogrouped aggregations (KIP-150, Kafka's CogroupedKStream) through the driver:
one store shared by one aggregation node per input, results keyed as the inputs,
timestamps the max of the inputs, repartitioning of re-keyed inputs, time and session
windows."""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Materialized, Named, Produced, Serdes, SessionWindows, SlidingWindows, StreamsBuilder, TimeWindows
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}
OUT = Produced.with_(Serdes.Pickle(), Serdes.Pickle())


def _out(d: TopologyTestDriver) -> list[tuple[Any, Any, int]]:
    return [(r.key if not hasattr(r.key, "window") else str(r.key), r.value, r.timestamp)
            for r in d.create_output_topic("out", Serdes.Pickle(), Serdes.Pickle()).read_records_to_list()]


def test_two_streams_one_aggregate() -> None:
    b = StreamsBuilder()
    g1 = b.stream("one").group_by_key()
    g2 = b.stream("two").group_by_key()
    (g1.cogroup(lambda k, v, agg: agg + v).cogroup(g2, lambda k, v, agg: agg + v.upper())
     .aggregate(lambda: "", Materialized.as_("store")).to_stream().to("out", OUT))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        one, two = d.create_input_topic("one"), d.create_input_topic("two")
        one.pipe_input("k1", "a", 10)
        two.pipe_input("k1", "b", 5)
        one.pipe_input("k2", "c", 1)
        two.pipe_input("k1", "d", 20)
        one.pipe_input("k1", None, 30)  # null values are dropped (KStreamAggregate)
        assert _out(d) == [("k1", "a", 10), ("k1", "aB", 10), ("k2", "c", 1), ("k1", "aBD", 20)]
        assert d.get_key_value_store("store").get("k1") == "aBD"
        assert d.dropped_records() == 1


def test_cogrouping_a_stream_again_replaces_its_aggregator() -> None:
    b = StreamsBuilder()
    g1 = b.stream("one").group_by_key()
    cg = g1.cogroup(lambda k, v, agg: agg + "x")
    cg.cogroup(g1, lambda k, v, agg: agg + v)
    cg.aggregate(lambda: "").to_stream().to("out", OUT)
    assert sum(1 for n in b.build().nodes if n.startswith("COGROUPKSTREAM-AGGREGATE-0")) == 1
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("one").pipe_input("k", "a", 1)
        assert _out(d) == [("k", "a", 1)]


def test_rekeyed_input_is_repartitioned_and_inputs_are_copartitioned() -> None:
    b = StreamsBuilder()
    g1 = b.stream("one").group_by(lambda k, v: v)
    g2 = b.stream("two").group_by_key()
    g1.cogroup(lambda k, v, agg: agg + 1).cogroup(g2, lambda k, v, agg: agg + 100).aggregate(lambda: 0).to_stream().to("out", OUT)
    topo = b.build()
    text = str(topo.describe())
    assert "Sink: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-sink (topic: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition)" in text
    assert any("two" in g and "COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition" in g for g in topo.copartition_groups)
    with TopologyTestDriver(topo, CONFIG) as d:
        d.create_input_topic("one").pipe_input("x", "k", 1)
        d.create_input_topic("two").pipe_input("k", "v", 2)
        assert _out(d) == [("k", 1, 1), ("k", 101, 2)]


@pytest.mark.parametrize("caching", [True, False])
def test_time_windowed_cogroup(caching: bool) -> None:
    b = StreamsBuilder()
    g1 = b.stream("one").group_by_key()
    g2 = b.stream("two").group_by_key()
    m = Materialized.as_("w") if caching else Materialized.as_("w").with_caching_disabled()
    (g1.cogroup(lambda k, v, agg: agg + v).cogroup(g2, lambda k, v, agg: agg + v)
     .windowed_by(TimeWindows.of_size_and_grace(10, 0)).aggregate(lambda: "", m).to_stream().to("out", OUT))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        one, two = d.create_input_topic("one"), d.create_input_topic("two")
        one.pipe_input("k", "a", 1)
        two.pipe_input("k", "b", 12)
        # input one's own stream time is 1: the window [0,10) is still open for it, but the
        # shared store (retention size + grace = 10, stream time 10 by window start) no
        # longer returns it, so without caching the aggregate restarts from the initializer,
        # as in Kafka (its segmented store's get() hides windows starting before stream
        # time - retention + 1); with caching, Kafka's CachingWindowStore#fetch still finds
        # the window in the cache (a clean entry since the commit after "a"): "a" + "c"
        one.pipe_input("k", "c", 5)
        two.pipe_input("k", "d", 3)   # input two's stream time is 12: [0,10) closed for it -> dropped
        assert _out(d) == [("[k@0/10]", "a", 1), ("[k@10/20]", "b", 12), ("[k@0/10]", "ac" if caching else "c", 5)]
        assert d.dropped_records() == 1


def test_session_windowed_cogroup_needs_a_merger() -> None:
    b = StreamsBuilder()
    g1 = b.stream("one").group_by_key()
    g2 = b.stream("two").group_by_key()
    cg = g1.cogroup(lambda k, v, agg: agg + v).cogroup(g2, lambda k, v, agg: agg + v).windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 100))
    with pytest.raises(ValueError):
        cg.aggregate(lambda: "")
    cg.aggregate(lambda: "", lambda k, a, b2: a + b2, Materialized.as_("s").with_caching_disabled(), named=Named.as_("sess")).to_stream().to("out", OUT)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("one").pipe_input("k", "a", 0)
        d.create_input_topic("two").pipe_input("k", "b", 4)
        assert _out(d) == [("[k@0/0]", "a", 0), ("[k@0/0]", None, 0), ("[k@0/4]", "ab", 4)]


def test_sliding_windowed_cogroup() -> None:
    b = StreamsBuilder()
    g1 = b.stream("one").group_by_key()
    g2 = b.stream("two").group_by_key()
    (g1.cogroup(lambda k, v, agg: agg + v).cogroup(g2, lambda k, v, agg: agg + v)
     .windowed_by(SlidingWindows.of_time_difference_and_grace(10, 100)).aggregate(lambda: "0", Materialized.as_("sl"))
     .to_stream().to("out", OUT))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("one").pipe_input("k", "a", 10)
        d.create_input_topic("two").pipe_input("k", "b", 15)
        assert _out(d) == [("[k@0/10]", "0a", 10), ("[k@11/21]", "0b", 15), ("[k@5/15]", "0ab", 15)]
