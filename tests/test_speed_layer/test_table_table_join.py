"""KTable-KTable (primary-key) joins through the TopologyTestDriver.

Expected records come from the KTable-KTable table of the Kafka wiki page "Kafka Streams
Join Semantics" (KIP-77 semantics, rows 1..15, one key) and from Kafka's
KTableKTableInnerJoin/LeftJoin/RightJoin/OuterJoin: output timestamp = max of both rows
(the updated row's when the other side is absent), tombstones as the table shows. As the
wiki says, the table describes every update, i.e. with the KTable record cache disabled.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Materialized, Named, StreamsBuilder, TopologyException
from speed_layer.testing import TopologyTestDriver

ROWS = [
    (1, "L", None), (2, "R", None), (3, "L", "A"), (4, "R", "a"), (5, "L", "B"), (6, "R", "b"), (7, "L", None),
    (8, "R", None), (9, "L", "C"), (10, "R", "c"), (11, "R", None), (12, "L", None), (13, "R", None), (14, "R", "d"),
    (15, "L", "D"),
]
EXPECTED = {
    "join": {4: [("A-a", 4)], 5: [("B-a", 5)], 6: [("B-b", 6)], 7: [(None, 7)], 10: [("C-c", 10)], 11: [(None, 11)],
             15: [("D-d", 15)]},
    "left_join": {3: [("A-None", 3)], 4: [("A-a", 4)], 5: [("B-a", 5)], 6: [("B-b", 6)], 7: [(None, 7)], 9: [("C-None", 9)],
                  10: [("C-c", 10)], 11: [("C-None", 11)], 12: [(None, 12)], 15: [("D-d", 15)]},
    "outer_join": {3: [("A-None", 3)], 4: [("A-a", 4)], 5: [("B-a", 5)], 6: [("B-b", 6)], 7: [("None-b", 7)], 8: [(None, 8)],
                   9: [("C-None", 9)], 10: [("C-c", 10)], 11: [("C-None", 11)], 12: [(None, 12)], 14: [("None-d", 14)],
                   15: [("D-d", 15)]},
}


def _joiner(left: Any, right: Any) -> str:
    return f"{left}-{right}"


def _topology(kind: str, caching: bool, materialized: Materialized | None = None) -> Any:
    b = StreamsBuilder()
    if caching:
        left, right = b.table("left"), b.table("right")
    else:
        left = b.table("left", materialized=Materialized.as_("left-store").with_caching_disabled())
        right = b.table("right", materialized=Materialized.as_("right-store").with_caching_disabled())
    joined = getattr(left, kind)(right, _joiner, materialized=materialized)
    joined.to_stream().to("out")
    return b.build()


def _run(topology: Any, rows: list[tuple[int, str, Any]]) -> dict[int, list[tuple[Any, int]]]:
    out: dict[int, list[tuple[Any, int]]] = {}
    with TopologyTestDriver(topology) as d:
        li, ri, o = d.create_input_topic("left"), d.create_input_topic("right"), d.create_output_topic("out")
        for ts, side, v in rows:
            (li if side == "L" else ri).pipe_input("k", v, ts)
            recs = [(r.value, r.timestamp) for r in o.read_records_to_list()]
            if recs:
                out[ts] = recs
    return out


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_kafka_wiki_ktable_ktable_join_table(kind: str) -> None:
    assert _run(_topology(kind, caching=False), ROWS) == EXPECTED[kind]


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_same_results_with_default_cached_source_tables(kind: str) -> None:
    # the commit after each piped record flushes the caches: the same updates reach the
    # join, and a flushed delete keeps the deleting record's timestamp
    assert _run(_topology(kind, caching=True), ROWS) == EXPECTED[kind]


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_materialized_join_result_store(kind: str) -> None:
    topology = _topology(kind, caching=False, materialized=Materialized.as_("joined").with_caching_disabled())
    with TopologyTestDriver(topology) as d:
        li, ri = d.create_input_topic("left"), d.create_input_topic("right")
        li.pipe_input("k1", "A", 1)
        ri.pipe_input("k1", "a", 2)
        li.pipe_input("k2", "B", 3)
        ri.pipe_input("k3", "c", 4)
        store = d.get_timestamped_key_value_store("joined")
        assert store is not None
        expected = {"join": {"k1": "A-a"}, "left_join": {"k1": "A-a", "k2": "B-None"},
                    "outer_join": {"k1": "A-a", "k2": "B-None", "k3": "None-c"}}[kind]
        assert dict(store.all()) == expected
        assert store.get_with_timestamp("k1").timestamp == 2
        li.pipe_input("k1", None, 9)
        assert store.get("k1") == ("None-a" if kind == "outer_join" else None)


def test_materialized_join_with_cache_forwards_on_commit() -> None:
    topology = _topology("join", caching=False, materialized=Materialized.as_("joined"))
    with TopologyTestDriver(topology) as d:
        d.create_input_topic("left").pipe_input("k", "A", 1)
        d.create_input_topic("right").pipe_input("k", "a", 2)
        recs = d.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in recs] == [("k", "A-a", 2)]
        assert d.get_key_value_store("joined").get("k") == "A-a"


def test_names_as_kafka() -> None:
    b = StreamsBuilder()
    left, right = b.table("left"), b.table("right")
    left.join(right, _joiner).to_stream().to("out")
    t = b.build()
    assert [n for n in t.nodes if "KTABLE-JOIN" in n or "KTABLE-MERGE" in n] == [
        "KTABLE-JOINTHIS-0000000007", "KTABLE-JOINOTHER-0000000008", "KTABLE-MERGE-0000000006"]
    assert t.nodes["KTABLE-MERGE-0000000006"].parents == ("KTABLE-JOINTHIS-0000000007", "KTABLE-JOINOTHER-0000000008")
    # both source tables get materialized: the join reads them by key
    assert t.nodes["KTABLE-JOINTHIS-0000000007"].stores == ("right-STATE-STORE-0000000003",)
    assert t.nodes["KTABLE-JOINOTHER-0000000008"].stores == ("left-STATE-STORE-0000000000",)
    assert frozenset({"left", "right"}) in t.copartition_groups


def test_named_and_materialized_names() -> None:
    b = StreamsBuilder()
    left, right = b.table("left"), b.table("right")
    left.left_join(right, _joiner, named=Named("j"), materialized=Materialized())
    t = b.build()
    assert {"j", "j-join-this", "j-join-other"} <= set(t.nodes)
    assert "KTABLE-MERGE-STATE-STORE-0000000006" in t.stores
    assert t.nodes["j"].stores == ("KTABLE-MERGE-STATE-STORE-0000000006",)


def test_join_of_a_non_materialized_join_reads_its_view() -> None:
    b = StreamsBuilder()
    a, bt, c = b.table("a"), b.table("b"), b.table("c")
    ab = a.join(bt, lambda x, y: f"{x}+{y}")
    ab.join(c, lambda x, y: f"{x}+{y}").to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        ai, bi, ci, o = d.create_input_topic("a"), d.create_input_topic("b"), d.create_input_topic("c"), d.create_output_topic("out")
        ai.pipe_input("k", "A", 1)
        bi.pipe_input("k", "B", 2)
        ci.pipe_input("k", "C", 3)  # looks up a JOIN b through its value getter
        ai.pipe_input("k", "A2", 4)
        assert [(r.value, r.timestamp) for r in o.read_records_to_list()] == [("A+B+C", 3), ("A2+B+C", 4)]


def test_lookup_through_filter_and_map_values() -> None:
    b = StreamsBuilder()
    a = b.table("a").filter(lambda k, v: v != "x").map_values(str.upper)
    a.join(b.table("b"), _joiner).to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        ai, bi, o = d.create_input_topic("a"), d.create_input_topic("b"), d.create_output_topic("out")
        ai.pipe_input("k", "x", 1)
        bi.pipe_input("k", "b", 2)  # a's row is filtered out: no result
        assert o.is_empty()
        ai.pipe_input("k", "y", 3)
        bi.pipe_input("k", "b2", 4)
        assert [(r.value, r.timestamp) for r in o.read_records_to_list()] == [("Y-b", 3), ("Y-b2", 4)]


def test_join_result_feeds_an_aggregation_with_old_values() -> None:
    b = StreamsBuilder()
    joined = b.table("left").join(b.table("right"), _joiner)
    joined.group_by(lambda k, v: (v.split("-")[1], 1)).count(Materialized.as_("counts")).to_stream().to("out")
    with TopologyTestDriver(b.build()) as d:
        li, ri = d.create_input_topic("left"), d.create_input_topic("right")
        ri.pipe_input("k1", "x", 1)
        ri.pipe_input("k2", "x", 2)
        li.pipe_input("k1", "A", 3)
        li.pipe_input("k2", "B", 4)
        ri.pipe_input("k1", "y", 5)  # k1 moves from x to y: the old result is subtracted
        counts = d.get_key_value_store("counts")
        assert dict(counts.all()) == {"x": 1, "y": 1}


def test_foreign_key_outer_join_does_not_exist() -> None:
    b = StreamsBuilder()
    with pytest.raises(TopologyException):
        b.table("left").outer_join(b.table("right"), lambda v: v, _joiner)


def test_joiner_is_required() -> None:
    b = StreamsBuilder()
    with pytest.raises(TopologyException):
        b.table("left").join(b.table("right"))
