"""KStream-KTable and KStream-GlobalKTable joins through the TopologyTestDriver.

Expected records come from Kafka's documentation (the stream-table rows of the join
semantics table: stream 1:null 3:A 5:B 7:null 9:C 12:null 15:D, table 2:null 4:a 6:b
8:null 10:c 11:null 13:null 14:d), Kafka's ``KStreamKTableLeftJoinTest``,
``KStreamKTableJoinTest`` and ``KStreamKTableJoinWithGraceTest`` (KIP-923), KIP-914
(versioned tables: lookups as of the stream record's timestamp) and KIP-962 (null keys in
left joins).
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Consumed, Joined, Materialized, Produced, Serdes, StreamsBuilder
from speed_layer.testing import TopologyTestDriver

INT_STR = Consumed(key_serde=Serdes.Integer(), value_serde=Serdes.String())


def tostring_joiner(v1: Any, v2: Any) -> str:
    """Kafka's MockValueJoiner.TOSTRING_JOINER (null printed as None)."""
    return f"{v1}+{v2}"


# ------------------------------------------------------------------ the docs' semantics table
STREAM_ROWS = [(1, None), (3, "A"), (5, "B"), (7, None), (9, "C"), (12, None), (15, "D")]
TABLE_ROWS = [(2, None), (4, "a"), (6, "b"), (8, None), (10, "c"), (11, None), (13, None), (14, "d")]


@pytest.mark.parametrize("kind,expected", [
    ("join", [("B-a", 5), ("D-d", 15)]),
    ("left_join", [("A-None", 3), ("B-a", 5), ("C-None", 9), ("D-d", 15)]),
])
def test_docs_stream_table_join_table(kind: str, expected: list[tuple[str, int]]) -> None:
    b = StreamsBuilder()
    getattr(b.stream("s"), kind)(b.table("t"), lambda v, t: f"{v}-{t}").to("out")
    rows = sorted([(ts, "s", v) for ts, v in STREAM_ROWS] + [(ts, "t", v) for ts, v in TABLE_ROWS])
    with TopologyTestDriver(b.build()) as d:
        si, ti, o = d.create_input_topic("s"), d.create_input_topic("t"), d.create_output_topic("out")
        for ts, topic, v in rows:
            (si if topic == "s" else ti).pipe_input("k", v, ts)
        assert [(r.value, r.timestamp) for r in o.read_records_to_list()] == expected
        assert d.dropped_records() == 3  # the stream's null values at 1, 7 and 12


# ------------------------------------------------------------------ KStreamKTableLeftJoinTest
class Fixture:
    def __init__(self, kind: str, joined: Joined | None = None, versioned_ms: int | None = None) -> None:
        b = StreamsBuilder()
        stream = b.stream("streamTopic", INT_STR)
        m = Materialized.as_("V-grace").as_versioned(versioned_ms) if versioned_ms is not None else None
        table = b.table("tableTopic", INT_STR, m)
        getattr(stream, kind)(table, tostring_joiner, joined).to("out", Produced(key_serde=Serdes.Integer(), value_serde=Serdes.String()))
        self.topology = b.build()
        self.driver = TopologyTestDriver(self.topology)
        self.stream = self.driver.create_input_topic("streamTopic", Serdes.Integer(), Serdes.String())
        self.table = self.driver.create_input_topic("tableTopic", Serdes.Integer(), Serdes.String())
        self.out = self.driver.create_output_topic("out", Serdes.Integer(), Serdes.String())

    def push_stream(self, n: int, prefix: str) -> None:
        for i in range(n):
            self.stream.pipe_input(i, f"{prefix}{i}", i)

    def push_table(self, n: int, prefix: str, ts: int = 0) -> None:
        for i in range(n):
            self.table.pipe_input(i, f"{prefix}{i}", ts)

    def push_null_table(self, n: int) -> None:
        for i in range(n):
            self.table.pipe_input(i, None, 0)

    def results(self) -> list[tuple[Any, Any, int]]:
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


@pytest.fixture
def left() -> Any:
    f = Fixture("left_join")
    yield f
    f.driver.close()


def test_left_join_requires_copartitioned_streams(left: Fixture) -> None:
    assert frozenset({"streamTopic", "tableTopic"}) in left.topology.copartition_groups


def test_left_join_with_empty_table_on_stream_updates(left: Fixture) -> None:
    left.push_stream(2, "X")
    assert left.results() == [(0, "X0+None", 0), (1, "X1+None", 1)]


def test_left_join_does_not_join_on_table_updates(left: Fixture) -> None:
    left.push_stream(2, "X")
    assert left.results() == [(0, "X0+None", 0), (1, "X1+None", 1)]
    left.push_table(2, "Y")
    assert left.results() == []
    left.push_stream(4, "X")
    assert left.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1), (2, "X2+None", 2), (3, "X3+None", 3)]
    left.push_table(4, "YY")
    assert left.results() == []
    left.push_stream(4, "X")
    assert left.results() == [(0, "X0+YY0", 0), (1, "X1+YY1", 1), (2, "X2+YY2", 2), (3, "X3+YY3", 3)]


def test_left_join_clears_table_entry_on_null_value_updates(left: Fixture) -> None:
    left.push_table(4, "Y")
    left.push_stream(4, "X")
    assert left.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1), (2, "X2+Y2", 2), (3, "X3+Y3", 3)]
    left.push_null_table(2)
    assert left.results() == []
    left.push_stream(4, "XX")
    assert left.results() == [(0, "XX0+None", 0), (1, "XX1+None", 1), (2, "XX2+Y2", 2), (3, "XX3+Y3", 3)]


def test_left_join_does_not_drop_null_key_kip_962(left: Fixture) -> None:
    left.push_table(1, "Y")
    left.stream.pipe_input(None, "A", 0)
    assert left.results() == [(None, "A+None", 0)]
    assert left.driver.dropped_records() == 0


def test_left_join_drops_and_meters_null_value(left: Fixture) -> None:
    left.stream.pipe_input(1, None, 0)
    assert left.results() == []
    assert left.driver.dropped_records() == 1


# ------------------------------------------------------------------ KStreamKTableJoinTest (inner)
def test_inner_join_only_on_match_and_drops_null_key_and_value() -> None:
    f = Fixture("join")
    try:
        f.push_table(2, "Y")
        f.push_stream(4, "X")
        assert f.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]
        f.push_null_table(2)
        f.push_stream(4, "XX")
        assert f.results() == []
        f.stream.pipe_input(None, "A", 0)
        f.stream.pipe_input(1, None, 0)
        assert f.results() == []
        assert f.driver.dropped_records() == 2
    finally:
        f.driver.close()


# ------------------------------------------------------------------ versioned tables (KIP-914)
def test_versioned_table_lookup_as_of_the_stream_record_timestamp() -> None:
    f = Fixture("left_join", versioned_ms=100)
    try:
        f.table.pipe_input(1, "v10", 10)
        f.table.pipe_input(1, "v20", 20)
        f.stream.pipe_input(1, "a", 15)
        f.stream.pipe_input(1, "b", 25)
        f.stream.pipe_input(1, "c", 5)  # before the first version
        f.table.pipe_input(1, "v5", 5)  # out-of-order table update: stored as a version
        f.stream.pipe_input(1, "d", 7)
        f.stream.pipe_input(1, "e", 30)
        assert f.results() == [(1, "a+v10", 15), (1, "b+v20", 25), (1, "c+None", 5), (1, "d+v5", 7), (1, "e+v20", 30)]
        f.table.pipe_input(1, None, 40)  # a delete is a tombstone version
        f.stream.pipe_input(1, "f", 41)
        f.stream.pipe_input(1, "g", 35)
        assert f.results() == [(1, "f+None", 41), (1, "g+v20", 35)]
        f.table.pipe_input(2, "w", 1000)  # store time 1000: history before 900 is gone
        f.stream.pipe_input(1, "h", 35)
        assert f.results() == [(1, "h+None", 35)]
    finally:
        f.driver.close()


# ------------------------------------------------------------------ KStreamKTableJoinWithGraceTest
def grace_fixture(grace_ms: int) -> Fixture:
    return Fixture("join", Joined(name="Grace", grace_ms=grace_ms), versioned_ms=5 * 60_000)


def test_grace_should_delay_join_by_grace_period() -> None:
    f = grace_fixture(2)
    try:
        f.push_table(4, "Y")
        assert f.results() == []
        f.push_stream(4, "X")
        assert f.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]
        f.push_table(4, "YY")
        assert f.results() == []
        f.push_stream(4, "X")
        assert f.results() == [(0, "X0+YY0", 0), (1, "X1+YY1", 1)]
        f.push_table(4, "YYY")
        assert f.results() == []
    finally:
        f.driver.close()


def test_grace_should_not_join_with_empty_table_on_stream_updates() -> None:
    f = grace_fixture(1)
    try:
        f.push_stream(4, "X")
        assert f.results() == []
    finally:
        f.driver.close()


def test_grace_should_not_join_on_table_updates() -> None:
    f = grace_fixture(1)
    try:
        f.push_stream(2, "X")  # the table is empty, but one stays in the buffer
        assert f.results() == []
        f.push_table(2, "Y")
        assert f.results() == []
        f.push_stream(4, "X")
        assert f.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1), (1, "X1+Y1", 1)]
        f.push_table(4, "YY")
        assert f.results() == []
        f.push_stream(4, "X")  # one is still in the stream buffer
        assert f.results() == [(0, "X0+YY0", 0), (1, "X1+YY1", 1), (2, "X2+YY2", 2)]
        f.push_table(4, "YYY")
        assert f.results() == []
    finally:
        f.driver.close()


def test_grace_should_join_only_if_match_found_on_stream_updates() -> None:
    f = grace_fixture(3)
    try:
        f.push_table(2, "Y")
        f.push_stream(4, "X")  # one result, the rest are in the stream buffer
        assert f.results() == [(0, "X0+Y0", 0)]
    finally:
        f.driver.close()


def test_grace_should_clear_table_entry_on_null_value_updates() -> None:
    f = grace_fixture(2)
    try:
        f.push_table(4, "Y")
        f.push_stream(4, "X")
        assert f.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]
        f.push_null_table(2)
        assert f.results() == []
        f.push_stream(4, "XX")
        assert f.results() == []
    finally:
        f.driver.close()


def test_grace_buffer_releases_in_timestamp_then_key_order() -> None:
    f = grace_fixture(10)
    try:
        f.push_table(3, "Y")
        f.stream.pipe_input(2, "b", 5)
        f.stream.pipe_input(1, "a", 5)
        f.stream.pipe_input(0, "c", 3)
        assert f.results() == []
        f.stream.pipe_input(0, "z", 20)  # releases everything up to 10
        assert f.results() == [(0, "c+Y0", 3), (1, "a+Y1", 5), (2, "b+Y2", 5)]
    finally:
        f.driver.close()


# ------------------------------------------------------------------ GlobalKTable
def global_topology(kind: str, versioned_ms: int | None = None) -> Any:
    b = StreamsBuilder()
    m = Materialized.as_("g-store").as_versioned(versioned_ms) if versioned_ms is not None else None
    g = b.global_table("g", materialized=m)
    getattr(b.stream("s"), kind)(g, lambda k, v: v.split(":")[0] or None, lambda v, gv: f"{v}+{gv}").to("out")
    return b.build()


@pytest.mark.parametrize("kind", ["join", "left_join"])
def test_global_table_join_with_key_selector(kind: str) -> None:
    with TopologyTestDriver(global_topology(kind)) as d:
        gi, si, o = d.create_input_topic("g"), d.create_input_topic("s"), d.create_output_topic("out")
        gi.pipe_input("g1", "G1", 1)
        si.pipe_input("k1", "g1:x", 2)
        si.pipe_input("k2", "g2:y", 3)  # no global row
        si.pipe_input(None, "g1:z", 4)  # null stream key, non-null join key: joins
        si.pipe_input("k3", ":w", 5)  # the selector returns None
        gi.pipe_input("g1", "G1b", 6)  # table updates never trigger
        si.pipe_input("k4", "g1:v", 7)
        got = [(r.key, r.value, r.timestamp) for r in o.read_records_to_list()]
        if kind == "join":
            assert got == [("k1", "g1:x+G1", 2), (None, "g1:z+G1", 4), ("k4", "g1:v+G1b", 7)]
            assert d.dropped_records() == 1
        else:
            assert got == [("k1", "g1:x+G1", 2), ("k2", "g2:y+None", 3), (None, "g1:z+G1", 4), ("k3", ":w+None", 5),
                           ("k4", "g1:v+G1b", 7)]
            assert d.dropped_records() == 0


def test_versioned_global_table_lookup_as_of_stream_time() -> None:
    with TopologyTestDriver(global_topology("left_join", versioned_ms=1000)) as d:
        gi, si, o = d.create_input_topic("g"), d.create_input_topic("s"), d.create_output_topic("out")
        gi.pipe_input("g1", "old", 10)
        gi.pipe_input("g1", "new", 20)
        si.pipe_input("k", "g1:a", 15)
        si.pipe_input("k", "g1:b", 25)
        assert [(r.value, r.timestamp) for r in o.read_records_to_list()] == [("g1:a+old", 15), ("g1:b+new", 25)]
