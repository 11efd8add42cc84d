"""KTable-KTable foreign-key joins (KIP-213) through the TopologyTestDriver.

The scenarios and expected maps are those of Kafka's
``KTableKTableForeignKeyJoinIntegrationTest`` (left table values ``lhsValueN|rhsM``, the
foreign key after ``|``, joiner ``(left,right)``, the result materialized or not, with the
record cache disabled on the result "because the cache suppresses some of the unnecessary
tombstones"), plus the instruction rules of ``SubscriptionSendProcessorSupplier`` and the
timestamps of ``SubscriptionJoinProcessorSupplier``/``ForeignTableJoinProcessorSupplier``.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Materialized, Named, StreamsBuilder
from speed_layer.testing import TopologyTestDriver


def extractor(value: str) -> str | None:
    return value.split("|")[1] or None


def joiner(left: Any, right: Any) -> str:
    return f"({left},{right})"


def build(left_join: bool, materialized: bool, rejoin: bool = False) -> Any:
    b = StreamsBuilder()
    left, right = b.table("left_table"), b.table("right_table")
    m = (Materialized.as_("store").with_store_type("in_memory") if materialized else Materialized()).with_caching_disabled()
    fk = left.left_join(right, extractor, joiner, materialized=m) if left_join else left.join(right, extractor, joiner, materialized=m)
    fk.to_stream().to("output")
    if rejoin:
        rejoined = fk.left_join(left, lambda a, c: f"rejoin({a},{c})") if left_join else fk.join(left, lambda a, c: f"rejoin({a},{c})")
        rejoined.to_stream().to("rejoin")
    return b.build()


def as_map(topic: Any) -> dict[Any, Any]:
    """Java's TestOutputTopic#readKeyValuesToMap: the last value per key, None included."""
    return {k: v for k, v in topic.read_key_values_to_list()}


def store_map(driver: TopologyTestDriver) -> dict[Any, Any]:
    return dict(driver.get_key_value_store("store").all())


PARAMS = [(lj, m) for lj in (True, False) for m in (True, False)]


@pytest.mark.parametrize("left_join,materialized", PARAMS)
def test_do_join_from_left_then_delete_left_entity(left_join: bool, materialized: bool) -> None:
    with TopologyTestDriver(build(left_join, materialized, rejoin=True)) as d:
        right, left = d.create_input_topic("right_table"), d.create_input_topic("left_table")
        out, rejoin = d.create_output_topic("output"), d.create_output_topic("rejoin")
        right.pipe_input("rhs1", "rhsValue1")
        right.pipe_input("rhs2", "rhsValue2")
        right.pipe_input("rhs3", "rhsValue3")  # this unreferenced FK won't show up in any results
        assert as_map(out) == {} and as_map(rejoin) == {}
        left.pipe_input("lhs1", "lhsValue1|rhs1")
        left.pipe_input("lhs2", "lhsValue2|rhs2")
        expected = {"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs2": "(lhsValue2|rhs2,rhsValue2)"}
        assert as_map(out) == expected
        assert as_map(rejoin) == {"lhs1": "rejoin((lhsValue1|rhs1,rhsValue1),lhsValue1|rhs1)",
                                  "lhs2": "rejoin((lhsValue2|rhs2,rhsValue2),lhsValue2|rhs2)"}
        if materialized:
            assert store_map(d) == expected
        left.pipe_input("lhs3", "lhsValue3|rhs1")  # another reference to an existing FK
        assert as_map(out) == {"lhs3": "(lhsValue3|rhs1,rhsValue1)"}
        assert as_map(rejoin) == {"lhs3": "rejoin((lhsValue3|rhs1,rhsValue1),lhsValue3|rhs1)"}
        left.pipe_input("lhs1", None)
        assert as_map(out) == {"lhs1": None}
        assert as_map(rejoin) == {"lhs1": None}
        if materialized:
            assert store_map(d) == {"lhs2": "(lhsValue2|rhs2,rhsValue2)", "lhs3": "(lhsValue3|rhs1,rhsValue1)"}


@pytest.mark.parametrize("left_join,materialized", PARAMS)
def test_do_join_from_right_then_delete_right_entity(left_join: bool, materialized: bool) -> None:
    with TopologyTestDriver(build(left_join, materialized)) as d:
        right, left, out = d.create_input_topic("right_table"), d.create_input_topic("left_table"), d.create_output_topic("output")
        left.pipe_input("lhs1", "lhsValue1|rhs1")
        left.pipe_input("lhs2", "lhsValue2|rhs2")
        left.pipe_input("lhs3", "lhsValue3|rhs1")
        half = {"lhs1": "(lhsValue1|rhs1,None)", "lhs2": "(lhsValue2|rhs2,None)", "lhs3": "(lhsValue3|rhs1,None)"}
        assert as_map(out) == (half if left_join else {})
        right.pipe_input("rhs1", "rhsValue1")
        assert as_map(out) == {"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs3": "(lhsValue3|rhs1,rhsValue1)"}
        right.pipe_input("rhs2", "rhsValue2")
        assert as_map(out) == {"lhs2": "(lhsValue2|rhs2,rhsValue2)"}
        right.pipe_input("rhs3", "rhsValue3")  # this unreferenced FK won't show up in any results
        assert as_map(out) == {}
        right.pipe_input("rhs1", None)
        assert as_map(out) == {"lhs1": "(lhsValue1|rhs1,None)" if left_join else None,
                               "lhs3": "(lhsValue3|rhs1,None)" if left_join else None}
        if materialized:
            expected = {"lhs2": "(lhsValue2|rhs2,rhsValue2)"}
            if left_join:
                expected.update(lhs1="(lhsValue1|rhs1,None)", lhs3="(lhsValue3|rhs1,None)")
            assert store_map(d) == expected


@pytest.mark.parametrize("left_join,materialized", PARAMS)
def test_should_emit_tombstone_when_deleting_non_joining_records(left_join: bool, materialized: bool) -> None:
    with TopologyTestDriver(build(left_join, materialized)) as d:
        left, out = d.create_input_topic("left_table"), d.create_output_topic("output")
        left.pipe_input("lhs1", "lhsValue1|rhs1")
        expected = {"lhs1": "(lhsValue1|rhs1,None)"} if left_join else {}
        assert as_map(out) == expected
        # an "unnecessary" tombstone for inner joins: it cannot be known whether a result existed
        left.pipe_input("lhs1", None)
        assert as_map(out) == {"lhs1": None}
        left.pipe_input("lhs1", None)  # deleting a non-existing record is idempotent
        assert as_map(out) == {}
        if materialized:
            assert store_map(d) == {}


@pytest.mark.parametrize("left_join,materialized", PARAMS)
def test_should_not_emit_tombstones_when_deleting_non_existing_records(left_join: bool, materialized: bool) -> None:
    with TopologyTestDriver(build(left_join, materialized)) as d:
        d.create_input_topic("left_table").pipe_input("lhs1", None)
        assert as_map(d.create_output_topic("output")) == {}


@pytest.mark.parametrize("left_join", [True, False])
def test_foreign_key_change(left_join: bool) -> None:
    with TopologyTestDriver(build(left_join, False)) as d:
        right, left, out = d.create_input_topic("right_table"), d.create_input_topic("left_table"), d.create_output_topic("output")
        right.pipe_input("rhs1", "rhsValue1")
        right.pipe_input("rhs2", "rhsValue2")
        left.pipe_input("lhs1", "lhsValue1|rhs1")
        assert as_map(out) == {"lhs1": "(lhsValue1|rhs1,rhsValue1)"}
        left.pipe_input("lhs1", "lhsValue1|rhs2")  # FK changed to an existing row
        assert out.read_key_values_to_list() == [("lhs1", "(lhsValue1|rhs2,rhsValue2)")]
        left.pipe_input("lhs1", "lhsValue1|rhs9")  # FK changed to a missing row
        assert out.read_key_values_to_list() == [("lhs1", "(lhsValue1|rhs9,None)" if left_join else None)]
        right.pipe_input("rhs2", "rhsValue2b")  # lhs1 no longer subscribes to rhs2
        assert out.is_empty()
        right.pipe_input("rhs9", "rhsValue9")
        assert out.read_key_values_to_list() == [("lhs1", "(lhsValue1|rhs9,rhsValue9)")]


def test_inner_join_update_without_fk_change_and_no_match_emits_nothing() -> None:
    with TopologyTestDriver(build(False, False)) as d:
        left, out = d.create_input_topic("left_table"), d.create_output_topic("output")
        left.pipe_input("lhs1", "a|rhs1")
        left.pipe_input("lhs1", "b|rhs1")  # PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE: no idempotent tombstone
        assert out.is_empty()


@pytest.mark.parametrize("left_join", [True, False])
def test_null_foreign_key(left_join: bool) -> None:
    with TopologyTestDriver(build(left_join, False)) as d:
        right, left, out = d.create_input_topic("right_table"), d.create_input_topic("left_table"), d.create_output_topic("output")
        right.pipe_input("rhs1", "rhsValue1")
        left.pipe_input("lhs1", "lhsValue1|rhs1")
        assert as_map(out) == {"lhs1": "(lhsValue1|rhs1,rhsValue1)"}
        left.pipe_input("lhs1", "lhsValue1|")  # the extractor returns None
        if left_join:  # KIP-962: the left row joins None
            assert out.read_key_values_to_list() == [("lhs1", "(lhsValue1|,None)")]
            assert d.dropped_records() == 0
        else:  # dropped (counted); the old subscription is deleted with a tombstone
            assert out.read_key_values_to_list() == [("lhs1", None)]
            assert d.dropped_records() == 1
        right.pipe_input("rhs1", "rhsValue1b")  # no subscription left
        assert out.is_empty()


def test_output_timestamps() -> None:
    with TopologyTestDriver(build(False, False)) as d:
        right, left, out = d.create_input_topic("right_table"), d.create_input_topic("left_table"), d.create_output_topic("output")
        right.pipe_input("rhs1", "r", 10)
        left.pipe_input("lhs1", "a|rhs1", 5)  # left-triggered: max(left, right)
        left.pipe_input("lhs2", "b|rhs1", 20)
        right.pipe_input("rhs1", "r2", 15)  # right-triggered: the right record's, per subscriber in key order
        recs = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
        assert recs == [("lhs1", "(a|rhs1,r)", 10), ("lhs2", "(b|rhs1,r)", 20), ("lhs1", "(a|rhs1,r2)", 15), ("lhs2", "(b|rhs1,r2)", 15)]


def test_extractor_with_key() -> None:
    b = StreamsBuilder()
    left, right = b.table("left_table"), b.table("right_table")
    left.join(right, lambda k, v: f"{k}-{v}", joiner, extractor_with_key=True).to_stream().to("output")
    with TopologyTestDriver(b.build()) as d:
        d.create_input_topic("right_table").pipe_input("a-1", "R")
        d.create_input_topic("left_table").pipe_input("a", "1")
        assert d.create_output_topic("output").read_key_values_to_list() == [("a", "(1,R)")]


def test_topology_names_internal_topics_and_copartitioning_as_kafka() -> None:
    b = StreamsBuilder()
    b.table("left_table").join(b.table("right_table"), extractor, joiner).to_stream().to("output")
    t = b.build()
    assert set(t.internal_topics) == {"KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
                                      "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic"}
    assert "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010" in t.stores
    assert {"KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000007", "KTABLE-SINK-0000000008", "KTABLE-SOURCE-0000000009",
            "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000011", "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000012",
            "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000013", "KTABLE-SINK-0000000015", "KTABLE-SOURCE-0000000016",
            "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000017", "KTABLE-FK-JOIN-OUTPUT-0000000018"} <= set(t.nodes)
    assert frozenset({"KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic", "right_table"}) in t.copartition_groups
    assert frozenset({"KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic", "left_table"}) in t.copartition_groups
    # the response sink has both answering processors as parents
    assert t.nodes["KTABLE-SINK-0000000015"].parents == ("KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000012",
                                                         "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000013")
    # the left and right tables land in different sub-topologies, as in Kafka
    assert len(t.subtopologies()) == 2


def test_named_foreign_key_join() -> None:
    b = StreamsBuilder()
    b.table("left_table").left_join(b.table("right_table"), extractor, joiner, named=Named("fk"))
    t = b.build()
    assert set(t.internal_topics) == {"fk-subscription-registration-topic", "fk-subscription-response-topic"}
    assert "fk-subscription-store" in t.stores
    assert {"fk-subscription-registration-processor", "fk-subscription-receive", "fk-subscription-join-foreign",
            "fk-foreign-join-subscription", "fk-subscription-response-resolver", "fk-result"} <= set(t.nodes)


# ------------------------------------------------------------------ multi-partition runtime
@pytest.mark.broker
def test_runtime_with_differently_partitioned_tables_matches_test_driver(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(left=2, right=3, out=2)

    def topology() -> Any:
        b = StreamsBuilder()
        left, right = b.table(t["left"]), b.table(t["right"])
        (left.left_join(right, lambda v: v["fk"], lambda lv, rv: {"n": lv["n"], "r": None if rv is None else rv["name"]},
                        materialized=Materialized.as_("fk-store"))
         .to_stream().to(t["out"]))
        return b.build()

    right_rows = [(f"r{i}", {"name": f"R{i}"}, 1000 + i) for i in range(5)]
    left_rows = [(f"l{i}", {"fk": f"r{i % 6}", "n": i}, 2000 + i) for i in range(20)]
    left_updates = [("l1", {"fk": "r2", "n": 101}, 3000), ("l2", None, 3001), ("l3", {"fk": "r9", "n": 103}, 3002)]
    right_updates = [("r0", {"name": "R0b"}, 3100), ("r4", None, 3101), ("r9", {"name": "R9"}, 3102)]

    with TopologyTestDriver(topology(), {"application.id": "ttd"}) as d:
        ri, li = d.create_input_topic(t["right"]), d.create_input_topic(t["left"])
        for topic, rows in ((ri, right_rows), (li, left_rows), (li, left_updates), (ri, right_updates)):
            for k, v, ts in rows:
                topic.pipe_input(k, v, ts)
        expected = {k: v for k, v in d.create_output_topic(t["out"]).read_key_values_to_list()}
        expected = {k: v for k, v in expected.items() if v is not None}
        expected_store = dict(d.get_key_value_store("fk-store").all())
    assert expected == expected_store and len(expected) == 19
    assert expected["l1"] == {"n": 101, "r": "R2"} and expected["l3"] == {"n": 103, "r": "R9"} and expected["l4"] == {"n": 4, "r": None}

    kit.produce(t["right"], right_rows)
    kit.produce(t["left"], left_rows)
    kit.produce(t["left"], left_updates)
    kit.produce(t["right"], right_updates)
    streams = kit.run(topology(), kit.config("fk"))
    import json

    final: dict[str, Any] = {}
    for m in kit.read(t["out"]):
        final[m.key().decode()] = None if m.value() is None else json.loads(m.value())
    assert {k: v for k, v in final.items() if v is not None} == expected
    assert dict(streams.store("fk-store").all()) == expected_store
    assert streams.close(30)
