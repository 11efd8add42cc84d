"""KGroupedStream count/reduce/aggregate (Kafka's KStreamAggregate / KStreamReduce):
output timestamps (the max of the inputs), null keys and values, repartitioning after a
key change, the store's contents, and Kafka's word count through the test driver."""
from __future__ import annotations

from typing import Any

from speed_layer import Grouped, Materialized, Produced, Serdes, StreamsBuilder
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}
LONG = Produced.with_(S, Serdes.Long())


def _out(d: TopologyTestDriver, serde: Any = None) -> list[tuple[Any, Any, int]]:
    return [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", value_serde=serde).read_records_to_list()]


def test_count_timestamp_is_max_of_inputs_and_nulls_are_dropped() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("c")).to_stream().to("out", LONG)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("a", "x", 10)
        inp.pipe_input("a", "x", 5)
        inp.pipe_input(None, "x", 20)
        inp.pipe_input("a", None, 30)
        inp.pipe_input("b", "x", 7)
        assert _out(d, Serdes.Long()) == [("a", 1, 10), ("a", 2, 10), ("b", 1, 7)]
        assert d.dropped_records() == 2
        assert dict(d.get_key_value_store("c").all()) == {"a": 2, "b": 1}
        assert d.get_timestamped_key_value_store("c").get_with_timestamp("a").timestamp == 10


def test_reduce_first_value_is_the_aggregate() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().reduce(lambda agg, v: agg + v).to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        for v, ts in [("a", 1), ("b", 3), ("c", 2)]:
            inp.pipe_input("k", v, ts)
        assert _out(d) == [("k", "a", 1), ("k", "ab", 3), ("k", "abc", 3)]


def test_aggregate_with_initializer() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().aggregate(lambda: "0", lambda k, v, agg: f"{agg}+{v}").to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", "1", 1)
        inp.pipe_input("k", "2", 2)
        assert _out(d) == [("k", "0+1", 1), ("k", "0+1+2", 2)]


def test_word_count_each_repartitioned_record_is_committed_separately() -> None:
    """Kafka's TopologyTestDriver processes and commits every record read back from a
    repartition topic on its own, so the count store's cache does not fold them: one
    output per word, even for a word repeated within one input line."""
    b = StreamsBuilder()
    (b.stream("in").flat_map_values(lambda v: v.lower().split()).group_by(lambda k, w: w)
     .count(Materialized.as_("counts-store")).to_stream().to("out", LONG))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input(None, "Hello hello world", 5)
        inp.pipe_input(None, "world", 7)
        assert _out(d, Serdes.Long()) == [("hello", 1, 5), ("hello", 2, 5), ("world", 1, 5), ("world", 2, 7)]


def test_group_by_with_grouped_name_names_the_repartition_topic() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v, Grouped.as_("by-value")).count().to_stream().to("out", LONG)
    topo = b.build()
    assert "by-value-repartition" in topo.internal_topics
    with TopologyTestDriver(topo, CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "v", 1)
        assert _out(d, Serdes.Long()) == [("v", 1, 1)]


def test_one_grouped_name_shared_by_two_aggregations_uses_one_repartition_topic() -> None:
    """Kafka reuses the repartition node of a grouped stream with a user-given name."""
    b = StreamsBuilder()
    g = b.stream("in").group_by(lambda k, v: v, Grouped.as_("shared"))
    g.count()
    g.reduce(lambda a, v: v)
    topo = b.build()
    assert [t for t in topo.internal_topics] == ["shared-repartition"]


def test_repartition_drops_null_keys() -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: None if v == "drop" else v).group_by_key().count().to_stream().to("out", LONG)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", "drop", 1)
        inp.pipe_input("k", "keep", 2)
        assert _out(d, Serdes.Long()) == [("keep", 1, 2)]
