"""KStream-KStream joins through the TopologyTestDriver.

Expected records are written by hand from Kafka's documented behaviour:

* the "Improved Left/Outer Stream-Stream Join (v3.1.x and newer)" table of the Kafka wiki
  page "Kafka Streams Join Semantics" (rows 1..15 plus 40/60/80/100, one key, window of
  15 ms, no grace);
* ``KStreamKStreamJoin`` (Kafka 4.x): inner results at ``max(ts)``, outer results parked
  in the shared outer store until ``ts + after + grace`` (right side: ``before``) is behind
  stream time, emission throttled to once per ``emit.interval`` (1000 ms) of wall-clock
  time, in ``<timestamp><right before left><key>`` order; KIP-962 null keys;
* ``KStreamImplJoin`` names: ``KSTREAM-WINDOWED``/``JOINTHIS``/``JOINOTHER``/``OUTERTHIS``/
  ``OUTEROTHER``/``MERGE``, stores ``<join node>-store`` and ``KSTREAM-OUTERSHARED-n-store``.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import JoinWindows, StreamJoined, StreamsBuilder, TopologyException
from speed_layer.testing import TopologyTestDriver

# (timestamp, side, value): the wiki's STREAM_1 (left) and STREAM_2 (right), key "k"
WIKI_ROWS = [
    (1, "L", None), (2, "R", None), (3, "L", "A"), (4, "R", "a"), (5, "L", "B"), (6, "R", "b"), (7, "L", None),
    (8, "R", None), (9, "L", "C"), (10, "R", "c"), (11, "R", None), (12, "L", None), (13, "R", None), (14, "R", "d"),
    (15, "L", "D"), (40, "L", "E"), (60, "L", "F"), (80, "R", "f"), (100, "L", "G"),
]

INNER_15 = {
    4: [("A-a", 4)], 5: [("B-a", 5)], 6: [("A-b", 6), ("B-b", 6)], 9: [("C-a", 9), ("C-b", 9)],
    10: [("A-c", 10), ("B-c", 10), ("C-c", 10)], 14: [("A-d", 14), ("B-d", 14), ("C-d", 14)],
    15: [("D-a", 15), ("D-b", 15), ("D-c", 15), ("D-d", 15)],
}
WIKI_EXPECTED = {
    "join": INNER_15,
    "left_join": {**INNER_15, 60: [("E-None", 40)], 80: [("F-None", 60)]},
    "outer_join": {**INNER_15, 60: [("E-None", 40)], 80: [("F-None", 60)], 100: [("None-f", 80)]},
}


def _join(kind: str, windows: JoinWindows, sj: StreamJoined | None = None, joiner: Any = None) -> Any:
    b = StreamsBuilder()
    left, right = b.stream("left"), b.stream("right")
    getattr(left, kind)(right, joiner or (lambda l, r: f"{l}-{r}"), windows, sj).to("out")
    return b.build()


def _run(topology: Any, rows: list[tuple[int, str, Any]], *, key: Any = "k", tick_ms: int = 1000) -> dict[int, list[tuple[Any, int]]]:
    """Pipe rows (advancing the mocked wall clock by ``tick_ms`` before each, as time
    passes in production); returns ``{input ts: [(value, ts)]}`` for rows with output."""
    out: dict[int, list[tuple[Any, int]]] = {}
    with TopologyTestDriver(topology) as d:
        li, ri, o = d.create_input_topic("left"), d.create_input_topic("right"), d.create_output_topic("out")
        for ts, side, v in rows:
            d.advance_wall_clock_time(tick_ms)
            (li if side == "L" else ri).pipe_input(key, v, ts)
            recs = [(r.value, r.timestamp) for r in o.read_records_to_list()]
            if recs:
                out[ts] = recs
    return out


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_kafka_wiki_join_semantics_table(kind: str) -> None:
    assert _run(_join(kind, JoinWindows.of_time_difference_with_no_grace(15)), WIKI_ROWS) == WIKI_EXPECTED[kind]


def test_null_values_are_dropped_and_counted() -> None:
    with TopologyTestDriver(_join("join", JoinWindows.of_time_difference_with_no_grace(15))) as d:
        d.create_input_topic("left").pipe_input("k", None, 1)
        d.create_input_topic("right").pipe_input("k", None, 2)
        assert d.create_output_topic("out").is_empty()
        assert d.dropped_records() == 2


def test_inner_join_drops_null_keys() -> None:
    with TopologyTestDriver(_join("join", JoinWindows.of_time_difference_with_no_grace(15))) as d:
        d.create_input_topic("left").pipe_input(None, "A", 1)
        d.create_input_topic("right").pipe_input(None, "a", 2)
        assert d.create_output_topic("out").is_empty()
        assert d.dropped_records() == 2


def test_left_join_forwards_null_key_left_records_at_once_kip_962() -> None:
    with TopologyTestDriver(_join("left_join", JoinWindows.of_time_difference_with_no_grace(15))) as d:
        d.create_input_topic("left").pipe_input(None, "A", 3)
        d.create_input_topic("right").pipe_input(None, "a", 4)  # not an outer side: dropped
        recs = d.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in recs] == [(None, "A-None", 3)]
        assert d.dropped_records() == 1


def test_outer_join_forwards_null_key_records_of_both_sides() -> None:
    with TopologyTestDriver(_join("outer_join", JoinWindows.of_time_difference_with_no_grace(15))) as d:
        d.create_input_topic("left").pipe_input(None, "A", 3)
        d.create_input_topic("right").pipe_input(None, "a", 4)
        recs = d.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in recs] == [(None, "A-None", 3), (None, "None-a", 4)]


def test_inner_result_timestamp_is_the_larger_one_and_matches_follow_timestamp_order() -> None:
    rows = [(10, "R", "r10"), (5, "R", "r5"), (7, "R", "r7"), (8, "L", "L8"), (20, "L", "L20")]
    # left at 8 joins right records in window [8-5, 8+5] in timestamp order (5, 7, 10)
    got = _run(_join("join", JoinWindows.of_time_difference_with_no_grace(5)), rows)
    assert got == {8: [("L8-r5", 8), ("L8-r7", 8), ("L8-r10", 10)]}


def test_before_and_after_are_asymmetric() -> None:
    # left record at t joins right records with timestamps in [t - before, t + after]
    w = JoinWindows.of_time_difference_with_no_grace(0).before(2).after(5)
    rows = [(10, "L", "L"), (7, "R", "r7"), (8, "R", "r8"), (15, "R", "r15"), (16, "R", "r16")]
    assert _run(_join("join", w), rows) == {8: [("L-r8", 10)], 15: [("L-r15", 15)]}


def test_joiner_with_key_and_duplicates_of_the_same_timestamp() -> None:
    b = StreamsBuilder()
    b.stream("left").join(b.stream("right"), lambda k, l, r: f"{k}:{l}+{r}", JoinWindows.of_time_difference_with_no_grace(10),
                          with_key=True).to("out")
    with TopologyTestDriver(b.build()) as d:
        ri = d.create_input_topic("right")
        ri.pipe_input("k", "r1", 5)
        ri.pipe_input("k", "r2", 5)  # retain duplicates: both are kept
        d.create_input_topic("left").pipe_input("k", "L", 6)
        recs = d.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in recs] == [("k", "k:L+r1", 6), ("k", "k:L+r2", 6)]


def test_left_join_emits_unmatched_record_only_after_window_and_grace() -> None:
    w = JoinWindows.of_time_difference_and_grace(10, 5)
    rows = [(0, "L", "A"), (15, "L", "B"), (16, "L", "C"), (40, "L", "D")]
    # A@0 closes when stream time > 0 + 10 + 5 (at 16); B, C close when stream time > 30
    assert _run(_join("left_join", w), rows) == {16: [("A-None", 0)], 40: [("B-None", 15), ("C-None", 16)]}


def test_left_join_match_within_window_cancels_the_outer_result() -> None:
    w = JoinWindows.of_time_difference_with_no_grace(10)
    rows = [(0, "L", "A"), (9, "R", "a"), (100, "L", "Z")]
    assert _run(_join("left_join", w), rows) == {9: [("A-a", 9)]}


def test_outer_results_in_timestamp_then_right_before_left_then_key_order() -> None:
    b = StreamsBuilder()
    b.stream("left").outer_join(b.stream("right"), lambda l, r: f"{l}-{r}", JoinWindows.of_time_difference_with_no_grace(5)).to("out")
    with TopologyTestDriver(b.build()) as d:
        li, ri, o = d.create_input_topic("left"), d.create_input_topic("right"), d.create_output_topic("out")
        li.pipe_input("b", "Lb", 1)
        li.pipe_input("a", "La", 1)
        ri.pipe_input("c", "Rc", 1)
        ri.pipe_input("a", "Ra2", 2)  # matches La: La's entry is removed, no outer result for it
        li.pipe_input("z", "Lz", 3)
        assert [(r.key, r.value, r.timestamp) for r in o.read_records_to_list()] == [("a", "La-Ra2", 2)]
        d.advance_wall_clock_time(1000)
        li.pipe_input("q", "Lq", 20)
        # right before left at timestamp 1, then by key; La and Ra2 matched: no outer result
        got = [(r.key, r.value, r.timestamp) for r in o.read_records_to_list()]
        assert got == [("c", "None-Rc", 1), ("b", "Lb-None", 1), ("z", "Lz-None", 3)]


def test_outer_emission_is_throttled_by_wall_clock_time() -> None:
    w = JoinWindows.of_time_difference_with_no_grace(5)
    topology = _join("left_join", w)
    # Kafka's TopologyTestDriver sets the throttle to 0 unless given: set Kafka's default
    config = {"__emit.interval.ms.kstreams.outer.join.spurious.results.fix__": 1000}
    with TopologyTestDriver(topology, config, initial_wall_clock_time_ms=0) as d:
        li, o = d.create_input_topic("left"), d.create_output_topic("out")
        li.pipe_input("k", "A", 0)  # the (empty) scan at wall-clock 0 sets the next one to 1000
        li.pipe_input("k", "B", 10)  # A is due, but throttled
        assert o.is_empty()
        d.advance_wall_clock_time(999)
        li.pipe_input("k", "C", 20)
        assert o.is_empty()
        d.advance_wall_clock_time(1)
        li.pipe_input("k", "D", 30)  # A, B, C are all due now
        assert [(r.value, r.timestamp) for r in o.read_records_to_list()] == [("A-None", 0), ("B-None", 10), ("C-None", 20)]
        li.pipe_input("k", "E", 40)  # D is due, throttled until wall-clock 2000
        assert o.is_empty()


def test_out_of_order_unmatched_record_behind_stream_time_is_emitted_at_once() -> None:
    w = JoinWindows.of_time_difference_with_no_grace(5)
    rows = [(100, "L", "A"), (10, "L", "late")]  # 10 + 5 < stream time 100
    assert _run(_join("left_join", w), rows) == {10: [("late-None", 10)]}


def test_expired_records_are_not_stored_but_still_join_live_records() -> None:
    w = JoinWindows.of_time_difference_with_no_grace(5)  # retention 10
    b = StreamsBuilder()
    b.stream("left").join(b.stream("right"), lambda l, r: f"{l}-{r}", w).to("out")
    with TopologyTestDriver(b.build()) as d:
        li, ri, o = d.create_input_topic("left"), d.create_input_topic("right"), d.create_output_topic("out")
        ri.pipe_input("k", "r0", 0)
        li.pipe_input("k", "L100", 100)  # left store time 100: left records <= 90 are expired
        li.pipe_input("k", "L3", 3)  # expired: not stored, but joins the right record at 0
        assert [(r.value, r.timestamp) for r in o.read_records_to_list()] == [("L3-r0", 3)]
        ri.pipe_input("k", "r4", 4)  # L3 was not stored: nothing to join
        assert o.is_empty()
        # L3 (not stored) and r4 (its window [0, 9] lies behind the left store's retention)
        assert d.metrics.total("expired-window-record-drop") == 2
        store = d.get_window_store("KSTREAM-JOINTHIS-0000000004-store")
        assert store.fetch("k", 0, 200) == [(100, "L100")]


def test_topology_names_and_stores_as_kafka() -> None:
    t = _join("outer_join", JoinWindows.of_time_difference_and_grace(10, 3))
    assert list(t.nodes) == [
        "KSTREAM-SOURCE-0000000000", "KSTREAM-SOURCE-0000000001", "KSTREAM-WINDOWED-0000000002",
        "KSTREAM-WINDOWED-0000000003", "KSTREAM-OUTERTHIS-0000000004", "KSTREAM-OUTEROTHER-0000000005",
        "KSTREAM-MERGE-0000000006", "KSTREAM-SINK-0000000007",
    ]
    this, other = t.stores["KSTREAM-OUTERTHIS-0000000004-store"], t.stores["KSTREAM-OUTEROTHER-0000000005-store"]
    for spec in (this, other):
        assert (spec.kind, spec.retention_ms, spec.window_size_ms, spec.retain_duplicates) == ("window", 23, 20, True)
    assert "KSTREAM-OUTERSHARED-0000000004-store" in t.stores
    assert t.nodes["KSTREAM-OUTERTHIS-0000000004"].stores == ("KSTREAM-OUTEROTHER-0000000005-store", "KSTREAM-OUTERSHARED-0000000004-store")
    assert t.nodes["KSTREAM-OUTEROTHER-0000000005"].stores == ("KSTREAM-OUTERTHIS-0000000004-store", "KSTREAM-OUTERSHARED-0000000004-store")
    assert t.nodes["KSTREAM-MERGE-0000000006"].parents == ("KSTREAM-OUTERTHIS-0000000004", "KSTREAM-OUTEROTHER-0000000005")
    assert frozenset({"left", "right"}) in t.copartition_groups


@pytest.mark.parametrize("kind,this,other,shared", [
    ("join", "KSTREAM-JOINTHIS-0000000004", "KSTREAM-JOINOTHER-0000000005", None),
    ("left_join", "KSTREAM-JOINTHIS-0000000004", "KSTREAM-OUTEROTHER-0000000005", "KSTREAM-OUTERSHARED-0000000004-store"),
])
def test_join_node_names_per_kind(kind: str, this: str, other: str, shared: str | None) -> None:
    t = _join(kind, JoinWindows.of_time_difference_with_no_grace(10))
    assert this in t.nodes and other in t.nodes
    assert f"{this}-store" in t.stores and f"{other}-store" in t.stores
    assert (shared in t.stores) if shared else not any("OUTERSHARED" in s for s in t.stores)


def test_stream_joined_names_processors_and_stores() -> None:
    t = _join("left_join", JoinWindows.of_time_difference_with_no_grace(10), StreamJoined(name="j", store_name="s"))
    for n in ("j-this-windowed", "j-other-windowed", "j-this-join", "j-outer-other-join", "j-merge"):
        assert n in t.nodes
    assert {"s-this-join-store", "s-outer-other-join-store", "s-left-shared-join-store"} <= set(t.stores)


def test_key_changing_side_is_repartitioned_and_copartitioned() -> None:
    b = StreamsBuilder()
    left = b.stream("left").select_key(lambda k, v: v[0])
    left.join(b.stream("right"), lambda l, r: f"{l}-{r}", JoinWindows.of_time_difference_with_no_grace(10)).to("out")
    t = b.build()
    assert "KSTREAM-KEY-SELECT-0000000001-repartition" in t.internal_topics
    assert frozenset({"KSTREAM-KEY-SELECT-0000000001-repartition", "right"}) in t.copartition_groups
    with TopologyTestDriver(t) as d:
        d.create_input_topic("right").pipe_input("x", "r", 1)
        d.create_input_topic("left").pipe_input("ignored", "x-value", 2)
        assert [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out").read_records_to_list()] == [("x", "x-value-r", 2)]


def test_named_join_repartition_topics() -> None:
    b = StreamsBuilder()
    left = b.stream("left").select_key(lambda k, v: v)
    right = b.stream("right").select_key(lambda k, v: v)
    left.join(right, lambda l, r: (l, r), JoinWindows.of_time_difference_with_no_grace(10), StreamJoined(name="j")).to("out")
    assert {"j-left-repartition", "j-right-repartition"} <= set(b.build().internal_topics)


def test_rejects_non_join_windows() -> None:
    from speed_layer import TimeWindows

    b = StreamsBuilder()
    with pytest.raises(TopologyException):
        b.stream("left").join(b.stream("right"), lambda l, r: l, TimeWindows.of_size_with_no_grace(10))


@pytest.mark.broker
def test_runtime_inner_join_on_two_partitions_matches_test_driver(runtime_kit: Any) -> None:
    import json
    from collections import Counter

    kit = runtime_kit
    t = kit.topics(left=2, right=2, out=2)

    def topology() -> Any:
        b = StreamsBuilder()
        (b.stream(t["left"]).join(b.stream(t["right"]), lambda l, r: {"l": l, "r": r}, JoinWindows.of_time_difference_with_no_grace(3_600_000))
         .to(t["out"]))
        return b.build()

    lefts = [(f"k{i % 7}", i, 1_000 + 10 * i) for i in range(40)]
    rights = [(f"k{i % 5}", 100 + i, 1_005 + 10 * i) for i in range(30)]
    with TopologyTestDriver(topology(), {"application.id": "ttd"}) as d:
        li, ri = d.create_input_topic(t["left"]), d.create_input_topic(t["right"])
        for topic, k, v, ts in sorted([(li, *r) for r in lefts] + [(ri, *r) for r in rights], key=lambda x: x[3]):
            topic.pipe_input(k, v, ts)
        expected = Counter((r.key, json.dumps(r.value, sort_keys=True), r.timestamp) for r in d.create_output_topic(t["out"]).read_records_to_list())
    assert sum(expected.values()) > 100
    kit.produce(t["left"], lefts)
    kit.produce(t["right"], rights)
    streams = kit.run(topology(), kit.config("ssj"))
    got = Counter((m.key().decode(), json.dumps(json.loads(m.value()), sort_keys=True), m.timestamp()[1]) for m in kit.read(t["out"]))
    assert got == expected
    assert streams.close(30)


def test_a_record_whose_window_expired_in_the_other_store_is_counted_with_the_results_it_lost() -> None:
    # issue 42: under load one side ran far ahead (orders a month ahead of the clicks); a
    # record of the lagging side then finds the other side's records of its window expired
    # (Kafka's segmented store hides starts <= stream time - retention) and joins nothing.
    # Kafka's KStreamKStreamJoin loses those results without a trace; duet counts the record
    # (expired-window-record-drop, the summary's expired_join_drops) and reports the
    # timestamps its lost results would have had, [ts, ts + after]
    w = JoinWindows.of_time_difference_and_grace(5, 2)  # retention 5 + 5 + 2 = 12
    b = StreamsBuilder()
    b.stream("left").join(b.stream("right"), lambda l, r: f"{l}-{r}", w, StreamJoined(store_name="j")).to("out")
    with TopologyTestDriver(b.build()) as d:
        li, ri, o = d.create_input_topic("left"), d.create_input_topic("right"), d.create_output_topic("out")
        li.pipe_input("k", "L52", 52)
        ri.pipe_input("k", "r50", 50)  # in time: joins
        assert [(r.value, r.timestamp) for r in o.read_records_to_list()] == [("L52-r50", 52)]
        assert d.metrics.total("expired-window-record-drop") == 0
        li.pipe_input("k", "L100", 100)  # the left side runs ahead: its starts <= 88 expire
        ri.pipe_input("k", "r51", 51)  # would join L52 (and nothing else)
        ri.pipe_input("k", "r98", 98)  # its window [93, 103] is within the retention
        assert [(r.value, r.timestamp) for r in o.read_records_to_list()] == [("L100-r98", 100)]
        assert d.metrics.total("expired-window-record-drop") == 1
        stores = {s for s, _, _ in d.metrics.expired_join_ranges}
        assert len(stores) == 1 and "j" in stores.pop()  # the left side's window store
        assert [(lo, hi) for _, lo, hi in d.metrics.expired_join_ranges] == [(51, 56)]
