"""Stateless KStream operations through the TopologyTestDriver: records keep their
timestamp and headers, key-changing operations repartition before a grouping, branches
route to the first match, sinks with a topic extractor, repartition and through."""
from __future__ import annotations

from typing import Any

from speed_layer import Named, Produced, Repartitioned, Serdes, StreamsBuilder
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}


def _run(build: Any, pipes: list[tuple[Any, Any, int]], topics: tuple[str, ...] = ("out",), headers: Any = None) -> dict[str, list[tuple[Any, Any, int]]]:
    b = StreamsBuilder()
    build(b.stream("in"))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        for k, v, ts in pipes:
            inp.pipe_input(k, v, ts, headers)
        return {t: [(r.key, r.value, r.timestamp) for r in d.create_output_topic(t).read_records_to_list()] for t in topics}


def test_filter_and_filter_not() -> None:
    out = _run(lambda s: (s.filter(lambda k, v: v.startswith("a")).to("out"), s.filter_not(lambda k, v: v.startswith("a")).to("other")),
               [("k", "ab", 1), ("k", "b", 2)], ("out", "other"))
    assert out == {"out": [("k", "ab", 1)], "other": [("k", "b", 2)]}


def test_map_map_values_select_key_keep_timestamps() -> None:
    out = _run(lambda s: (s.map(lambda k, v: (v, k)).to("out"),
                          s.map_values(lambda v: v.upper()).to("mv"),
                          s.map_values(lambda k, v: k + v, with_key=True).to("mvk"),
                          s.select_key(lambda k, v: v + "!").to("sk")),
               [("k", "v", 42)], ("out", "mv", "mvk", "sk"))
    assert out == {"out": [("v", "k", 42)], "mv": [("k", "V", 42)], "mvk": [("k", "kv", 42)], "sk": [("v!", "v", 42)]}


def test_flat_map_and_flat_map_values() -> None:
    out = _run(lambda s: (s.flat_map(lambda k, v: [(c, k) for c in v]).to("out"),
                          s.flat_map_values(lambda v: list(v)).to("fmv"),
                          s.flat_map_values(lambda k, v: [k] * len(v), with_key=True).to("fmvk")),
               [("k", "ab", 3), ("k", "", 4)], ("out", "fmv", "fmvk"))
    assert out == {"out": [("a", "k", 3), ("b", "k", 3)], "fmv": [("k", "a", 3), ("k", "b", 3)], "fmvk": [("k", "k", 3), ("k", "k", 3)]}


def test_peek_and_foreach() -> None:
    seen: list[tuple[Any, Any]] = []
    out = _run(lambda s: (s.peek(lambda k, v: seen.append(("peek", v))).to("out"), s.foreach(lambda k, v: seen.append(("each", v)))),
               [("k", "v", 1)])
    assert out == {"out": [("k", "v", 1)]}
    assert seen == [("peek", "v"), ("each", "v")]


def test_merge_forwards_both_streams() -> None:
    b = StreamsBuilder()
    b.stream("a").merge(b.stream("b")).to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("a").pipe_input("k", "1", 1)
        d.create_input_topic("b").pipe_input("k", "2", 2)
        assert d.create_output_topic("out").read_values_to_list() == ["1", "2"]


def test_split_routes_to_the_first_matching_branch() -> None:
    b = StreamsBuilder()
    branches = (b.stream("in").split(Named.as_("split-"))
                .branch(lambda k, v: int(v) > 10, name="big")
                .branch(lambda k, v: int(v) > 5, name="medium", chain=lambda s: s.map_values(lambda v: "m" + v))
                .default_branch(name="small"))
    for name, stream in branches.items():
        stream.to(name)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        for v in ["20", "7", "1", "11"]:
            inp.pipe_input("k", v, 1)
        assert d.create_output_topic("split-big").read_values_to_list() == ["20", "11"]
        assert d.create_output_topic("split-medium").read_values_to_list() == ["m7"]
        assert d.create_output_topic("split-small").read_values_to_list() == ["1"]


def test_no_default_branch_drops_unmatched_and_chain_none_leaves_the_map() -> None:
    b = StreamsBuilder()
    branches = (b.stream("in").split()
                .branch(lambda k, v: v == "a", chain=lambda s: s.to("as"))
                .branch(lambda k, v: v == "b")
                .no_default_branch())
    assert list(branches) == ["KSTREAM-BRANCH-00000000012"]
    branches["KSTREAM-BRANCH-00000000012"].to("bs")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        for v in ["a", "b", "c"]:
            inp.pipe_input("k", v, 1)
        assert d.create_output_topic("as").read_values_to_list() == ["a"]
        assert d.create_output_topic("bs").read_values_to_list() == ["b"]


def test_to_with_topic_name_extractor_gets_the_record_context() -> None:
    out = _run(lambda s: s.to(lambda k, v, ctx: f"{ctx.topic}-{k}"), [("x", "1", 1), ("y", "2", 2)], ("in-x", "in-y"))
    assert out == {"in-x": [("x", "1", 1)], "in-y": [("y", "2", 2)]}


def test_headers_are_kept() -> None:
    b = StreamsBuilder()
    b.stream("in").map_values(lambda v: v + "!").to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "v", 1, [("h", b"1")])
        assert d.create_output_topic("out").read_record().headers == [("h", b"1")]


def test_repartition_with_name_and_partition_count() -> None:
    b = StreamsBuilder()
    b.stream("in").repartition(Repartitioned.as_("by-x").with_number_of_partitions(4)).to("out")
    topo = b.build()
    assert topo.internal_topics["by-x-repartition"].partitions == 4
    assert "by-x-repartition-sink" in topo.nodes and "by-x-repartition-source" in topo.nodes
    with TopologyTestDriver(topo, CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "v", 3)
        d.create_input_topic("in").pipe_input(None, "dropped", 4)
        assert [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out").read_records_to_list()] == [("k", "v", 3)]


def test_through_writes_and_reads_a_user_topic() -> None:
    """As Kafka's driver, a record written to a topic the topology also reads is captured
    and piped back in."""
    b = StreamsBuilder()
    b.stream("in").through("mid").map_values(lambda v: v * 2).to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "v", 1)
        assert d.create_output_topic("mid").read_values_to_list() == ["v"]
        assert d.create_output_topic("out").read_values_to_list() == ["vv"]


def test_produced_serdes_are_used() -> None:
    b = StreamsBuilder()
    b.stream("in").map_values(len).to("out", Produced.with_(S, Serdes.Integer()))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "abc", 1)
        assert d.create_output_topic("out", value_serde=Serdes.Integer()).read_value() == 3


def test_two_streams_of_the_same_topic_share_one_source() -> None:
    """Kafka merges duplicate source nodes (InternalStreamsBuilder#mergeDuplicateSourceNodes)."""
    import pytest

    from speed_layer import TopologyException

    b = StreamsBuilder()
    b.stream("in").map_values(str.upper).to("up")
    b.stream("in").map_values(str.lower).to("low")
    topo = b.build()
    assert [n for n in topo.nodes if n.startswith("KSTREAM-SOURCE")] == ["KSTREAM-SOURCE-0000000000"]
    assert "KSTREAM-MAPVALUES-0000000004" in topo.nodes  # the second source still took index 3
    with TopologyTestDriver(topo, CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "Ab", 1)
        assert d.create_output_topic("up").read_values_to_list() == ["AB"]
        assert d.create_output_topic("low").read_values_to_list() == ["ab"]
    with pytest.raises(TopologyException, match="overlapping but not equal"):
        b.stream(["in", "other"])
