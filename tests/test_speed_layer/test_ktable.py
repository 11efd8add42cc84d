"""KTable operations through the TopologyTestDriver: sources, filter/mapValues (and Kafka's
sendOldValues semantics), toStream, toTable, lazy materialization and
``group_by`` + KGroupedTable count/reduce/aggregate.

Expected outputs of the group_by tests are Kafka's ``KTableAggregateTest`` (3.5+, KIP-904):
``STRING_INIT`` is ``"0"``, ``TOSTRING_ADDER`` ``agg + "+" + v``, ``TOSTRING_REMOVER``
``agg + "-" + v``.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Consumed, Grouped, Materialized, Serdes, StreamsBuilder, StreamsException
from speed_layer.testing import TopologyTestDriver

CONFIG = {"default.key.serde": Serdes.String(), "default.value.serde": Serdes.String()}


def _out(d: TopologyTestDriver, topic: str = "out", value_serde: Any = None) -> list[tuple[Any, Any, int]]:
    return [(r.key, r.value, r.timestamp) for r in d.create_output_topic(topic, value_serde=value_serde).read_records_to_list()]


def _selector(key: str, value: str) -> Any:
    if key == "null":
        return None, value
    if key == "NULL":
        return None
    return value, value


@pytest.mark.parametrize("caching", [True, False])
def test_agg_basic(caching: bool) -> None:
    b = StreamsBuilder()
    m = Materialized.as_("topic1-Canonized") if caching else Materialized.as_("topic1-Canonized").with_caching_disabled()
    (b.table("topic1").group_by(lambda k, v: (k, v), Grouped.with_(Serdes.String(), Serdes.String()))
     .aggregate(lambda: "0", lambda k, v, agg: agg + "+" + v, lambda k, v, agg: agg + "-" + v, m).to_stream().to("out"))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("topic1")
        for k, v, ts in [("A", "1", 10), ("B", "2", 15), ("A", "3", 20), ("B", "4", 18), ("C", "5", 5), ("D", "6", 25), ("B", "7", 15), ("C", "8", 10)]:
            inp.pipe_input(k, v, ts)
        assert _out(d) == [("A", "0+1", 10), ("B", "0+2", 15), ("A", "0+1-1+3", 20), ("B", "0+2-2+4", 18), ("C", "0+5", 5),
                           ("D", "0+6", 25), ("B", "0+2-2+4-4+7", 18), ("C", "0+5-5+8", 10)]
        assert d.get_key_value_store("topic1-Canonized").get("B") == "0+2-2+4-4+7"
        assert d.get_timestamped_key_value_store("topic1-Canonized").get_with_timestamp("B").timestamp == 18


def test_agg_repartition_with_null_keys_and_pairs() -> None:
    b = StreamsBuilder()
    (b.table("topic1").group_by(_selector)
     .aggregate(lambda: "0", lambda k, v, agg: agg + "+" + v, lambda k, v, agg: agg + "-" + v,
                Materialized.as_("topic1-Canonized")).to_stream().to("out"))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("topic1")
        for k, v, ts in [("A", "1", 10), ("A", None, 15), ("A", "1", 12), ("B", "2", 20), ("null", "3", 25), ("B", "4", 23), ("NULL", "5", 24), ("B", "7", 22)]:
            inp.pipe_input(k, v, ts)
        assert _out(d) == [("1", "0+1", 10), ("1", "0+1-1", 15), ("1", "0+1-1+1", 15), ("2", "0+2", 20), ("2", "0+2-2", 23),
                           ("4", "0+4", 23), ("4", "0+4-4", 23), ("7", "0+7", 22)]


@pytest.mark.parametrize("named", [True, False])
def test_count(named: bool) -> None:
    b = StreamsBuilder()
    g = b.table("count-test-input").group_by(lambda k, v: (v, v))
    (g.count(Materialized.as_("count")) if named else g.count()).to_stream().to("out", _long())
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("count-test-input")
        for k, v, ts in [("A", "green", 10), ("B", "green", 9), ("A", "blue", 12), ("C", "yellow", 15), ("D", "green", 11)]:
            inp.pipe_input(k, v, ts)
        assert _out(d, value_serde=Serdes.Long()) == [("green", 1, 10), ("green", 2, 10), ("green", 1, 12), ("blue", 1, 12), ("yellow", 1, 15), ("green", 2, 12)]


def _long() -> Any:
    from speed_layer import Produced

    return Produced.with_(Serdes.String(), Serdes.Long())


def test_remove_old_before_add_new_kip_904() -> None:
    """Same new key: ONE repartition record, subtractor then adder, no intermediate output."""
    b = StreamsBuilder()
    (b.table("in").group_by(lambda k, v: (k[0], k[1]))
     .aggregate(lambda: "", lambda k, v, agg: agg + v, lambda k, v, agg: agg.replace(v, ""), Materialized.as_("someStore"))
     .to_stream().to("out"))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        for k, v, ts in [("11", "A", 10), ("12", "B", 8), ("11", None, 12), ("12", "C", 6)]:
            inp.pipe_input(k, v, ts)
        assert _out(d) == [("1", "1", 10), ("1", "12", 10), ("1", "2", 12), ("1", "2", 12)]


def test_unchanged_key_sends_no_transient_state() -> None:
    b = StreamsBuilder()
    b.table("input-topic").group_by(lambda k, v: (k, v)).count().to_stream().to("output-topic", _long())
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("input-topic")
        inp.pipe_input("1", "", 8)
        inp.pipe_input("1", "", 9)
        assert _out(d, "output-topic", Serdes.Long()) == [("1", 1, 8), ("1", 1, 9)]


def test_reduce_and_tombstones() -> None:
    b = StreamsBuilder()
    to_int = Serdes.Integer()
    (b.table("in", Consumed.with_(Serdes.String(), to_int)).group_by(lambda k, v: (k[0], v))
     .reduce(lambda agg, v: agg + v, lambda agg, v: agg - v, Materialized.as_("sums")).to_stream().to("out", _int()))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", value_serde=to_int)
        inp.pipe_input("a1", 5, 1)
        inp.pipe_input("a2", 7, 2)
        inp.pipe_input("a1", 1, 3)   # same new key: 12 - 5 + 1
        inp.pipe_input("a2", None, 4)  # delete: 8 - 7
        inp.pipe_input("b1", None, 5)  # delete of an absent row: nothing
        assert _out(d, value_serde=to_int) == [("a", 5, 1), ("a", 12, 2), ("a", 8, 3), ("a", 1, 4)]
        assert d.get_key_value_store("sums").get("a") == 1


def _int() -> Any:
    from speed_layer import Produced

    return Produced.with_(Serdes.String(), Serdes.Integer())


def test_null_table_key_for_group_by_raises() -> None:
    """KTableRepartitionMap: a null key of the grouped table is a StreamsException; table
    sources drop null keys before that, so only a processor can produce one."""
    from speed_layer.processor.api import Change, Record
    from speed_layer.processor.builtin.table_aggregate import TableSelectProcessor
    from speed_layer.graph.nodes import GraphNode
    from speed_layer.graph.ops import TableSelectOp

    p = TableSelectProcessor(GraphNode("s", TableSelectOp(lambda k, v: (k, v))))
    with pytest.raises(StreamsException):
        p.process(Record(None, Change("v", None), 0))


def test_table_source_drops_null_keys_and_forwards_tombstones_when_not_materialized() -> None:
    """A non-materialized KTableSource forwards ``Change(value, None)`` for every record,
    including a delete of a key it never saw (Kafka's KTableSource)."""
    b = StreamsBuilder()
    b.table("in").to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("a", "1", 1)
        inp.pipe_input(None, "x", 2)
        inp.pipe_input("zz", None, 3)
        assert _out(d) == [("a", "1", 1), ("zz", None, 3)]
        assert d.dropped_records() == 1


def test_materialized_cached_table_source_skips_delete_of_absent_key() -> None:
    """With a (caching) store, a delete of an absent key is neither stored nor forwarded
    (CachingKeyValueStore's flush optimization)."""
    b = StreamsBuilder()
    b.table("in", materialized=Materialized.as_("tbl")).to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("a", "1", 1)
        inp.pipe_input("zz", None, 3)
        inp.pipe_input("a", None, 4)
        assert _out(d) == [("a", "1", 1), ("a", None, 4)]
        assert list(d.get_key_value_store("tbl").all()) == []


def test_filter_without_old_values_forwards_a_tombstone_for_every_failing_update() -> None:
    """Kafka's KTableFilterTest#testNotSendingOldValue (even values pass)."""
    b = StreamsBuilder()
    b.table("topic1", Consumed.with_(Serdes.String(), Serdes.Integer())).filter(lambda k, v: v % 2 == 0).to_stream().to("out", _int())
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("topic1", value_serde=Serdes.Integer())
        for k, v, ts in [("A", 1, 5), ("B", 1, 10), ("C", 1, 15), ("A", 2, 15), ("B", 2, 8), ("A", 3, 20), ("A", None, 10), ("B", None, 20)]:
            inp.pipe_input(k, v, ts)
        assert _out(d, value_serde=Serdes.Integer()) == [("A", None, 5), ("B", None, 10), ("C", None, 15), ("A", 2, 15), ("B", 2, 8),
                                                         ("A", None, 20), ("A", None, 10), ("B", None, 20)]


def test_filter_with_old_values_only_forwards_real_changes() -> None:
    """A materialized upstream (or a downstream that needs old values) makes the filter
    send old values: updates that were and stay filtered out are not forwarded
    (KTableFilterTest#testSendingOldValue)."""
    b = StreamsBuilder()
    (b.table("topic1", Consumed.with_(Serdes.String(), Serdes.Integer()), Materialized.as_("src"))
     .filter(lambda k, v: v % 2 == 0).to_stream().to("out", _int()))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("topic1", value_serde=Serdes.Integer())
        for k, v, ts in [("A", 1, 5), ("B", 1, 10), ("C", 1, 15), ("A", 2, 15), ("B", 2, 8), ("A", 3, 20), ("A", None, 10), ("B", None, 20)]:
            inp.pipe_input(k, v, ts)
        assert _out(d, value_serde=Serdes.Integer()) == [("A", 2, 15), ("B", 2, 8), ("A", None, 20), ("B", None, 20)]


def test_filter_of_aggregation_result_sends_old_values() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().count().filter(lambda k, v: v >= 2).to_stream().to("out", _long())
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("a", "x", 1)
        inp.pipe_input("a", "x", 2)
        inp.pipe_input("b", "x", 3)
        assert _out(d, value_serde=Serdes.Long()) == [("a", 2, 2)]


def test_materialized_filter_and_map_values_write_their_stores() -> None:
    b = StreamsBuilder()
    t = b.table("in", Consumed.with_(Serdes.String(), Serdes.Integer()))
    t.filter(lambda k, v: v > 1, materialized=Materialized.as_("big")).map_values(lambda v: v * 10, materialized=Materialized.as_("tens"))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", value_serde=Serdes.Integer())
        inp.pipe_input("a", 1, 1)
        inp.pipe_input("b", 2, 2)
        inp.pipe_input("c", 3, 3)
        inp.pipe_input("c", 0, 4)
        assert list(d.get_key_value_store("big").all()) == [("b", 2)]
        assert list(d.get_key_value_store("tens").all()) == [("b", 20)]


def test_lazy_materialization_of_source_tables() -> None:
    b = StreamsBuilder()
    t = b.table("in")
    topo = b.build()
    assert topo.stores == {} and t.queryable_store_name() == "in-STATE-STORE-0000000000"  # reading materializes
    assert "in-STATE-STORE-0000000000" in topo.stores
    b = StreamsBuilder()
    b.table("in").group_by(lambda k, v: (v, v)).count()
    assert "in-STATE-STORE-0000000000" in b.build().stores  # group_by forces materialization
    b = StreamsBuilder()
    b.table("in").filter(lambda k, v: True).map_values(lambda v: v).group_by(lambda k, v: (v, v)).count()
    assert "in-STATE-STORE-0000000000" in b.build().stores  # ... through filter and map_values


def test_to_table_latest_value_per_key_and_repartition() -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v[0]).to_table(materialized=Materialized.as_("latest")).to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("1", "a1", 1)
        inp.pipe_input("2", "b1", 2)
        inp.pipe_input("3", "a2", 3)
        assert _out(d) == [("a", "a1", 1), ("b", "b1", 2), ("a", "a2", 3)]
        assert dict(d.get_key_value_store("latest").all()) == {"a": "a2", "b": "b1"}


def test_to_stream_with_key_mapper_and_map_values_on_deletes() -> None:
    b = StreamsBuilder()
    b.table("in").map_values(lambda k, v: f"{k}:{v}", with_key=True).to_stream(lambda k, v: k.upper()).to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("a", "1", 1)
        inp.pipe_input("a", None, 2)
        assert _out(d) == [("A", "a:1", 1), ("A", None, 2)]
