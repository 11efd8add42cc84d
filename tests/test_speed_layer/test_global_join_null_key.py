"""KStream-GlobalKTable joins with null stream keys and null mapped keys (issue 25, item 6).

Kafka's ``KStreamGlobalKTableJoinTest`` and ``KStreamGlobalKTableLeftJoinTest`` ported as data
to the ``TopologyTestDriver``: the stream (Integer keys) carries ``<prefix><i>[,FKey<i>]``; the
key mapper returns the token after the comma, or null when there is none; the joiner is
Kafka's ``MockValueJoiner.TOSTRING_JOINER`` (``v1 + "+" + v2``); both input topics
auto-advance their own timestamps by 1 ms from 0, as Kafka's ``createInputTopic(...,
Instant.ofEpochMilli(0L), Duration.ofMillis(1L))``.

The left join's null-mapped-key case follows Kafka 4.1 (the version duet targets, see
``jvm/kafka/pom.xml``): KIP-962 says a KStream-GlobalKTable left join "no longer drop[s]
records when KeyValueMapper returns 'null' and call[s] ValueJoiner with 'null' for right
value". Kafka 3.7-4.0 implemented it as ``leftJoin && record.key() == null && value != null``
in ``KStreamKTableJoinProcessor#maybeDropRecord``, so a non-null-keyed record with a null
mapped key was still dropped (``shouldNotJoinOnNullKeyMapperValues`` expected EMPTY);
KAFKA-19208 (apache/kafka#19580) changed the condition to ``leftJoin && mappedKey == null &&
value != null``, so since 4.1 that record is joined with null. The inner join is unchanged:
a null mapped key drops the record.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Consumed, Produced, Serdes, StreamsBuilder
from speed_layer.testing import TopologyTestDriver

INT, STR = Serdes.Integer(), Serdes.String()
EXPECTED_KEYS = [0, 1, 2, 3]


def tostring_joiner(v1: Any, v2: Any) -> str:
    return f"{'null' if v1 is None else v1}+{'null' if v2 is None else v2}"


def key_mapper(k: Any, v: Any) -> Any:
    tokens = v.split(",")
    return tokens[1] if len(tokens) > 1 else None


def topology(left: bool) -> Any:
    b = StreamsBuilder()
    table = b.global_table("globalTopic", Consumed.with_(STR, STR))
    s = b.stream("streamTopic", Consumed.with_(INT, STR))
    (s.left_join if left else s.join)(table, key_mapper, tostring_joiner).to("out", Produced.with_(INT, STR))
    return b.build()


class Harness:
    """Kafka's test helpers pushToStream / pushToGlobalTable / pushNullValueToGlobalTable."""

    def __init__(self, d: TopologyTestDriver) -> None:
        self.d = d
        self.stream = d.create_input_topic("streamTopic", INT, STR)
        self.table = d.create_input_topic("globalTopic", STR, STR)
        self.out = d.create_output_topic("out", INT, STR)
        self.stream_ts = 0
        self.table_ts = 0

    def push_stream(self, n: int, prefix: str, fk: bool, null_key: bool) -> None:
        for i in range(n):
            value = f"{prefix}{EXPECTED_KEYS[i]}" + (f",FKey{EXPECTED_KEYS[i]}" if fk else "")
            key = None if null_key and i == 0 else EXPECTED_KEYS[i]
            self.stream.pipe_input(key, value, self.stream_ts)
            self.stream_ts += 1

    def push_table(self, n: int, prefix: str | None) -> None:
        for i in range(n):
            self.table.pipe_input(f"FKey{EXPECTED_KEYS[i]}", None if prefix is None else f"{prefix}{EXPECTED_KEYS[i]}",
                                  self.table_ts)
            self.table_ts += 1

    def step(self, action: tuple[Any, ...]) -> None:
        if action[0] == "stream":
            self.push_stream(*action[1:])
        elif action[0] == "table":
            self.push_table(*action[1:])
        else:  # ("table_null", n)
            self.push_table(action[1], None)

    def results(self) -> list[tuple[Any, str, int]]:
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def X(k: Any, v: str, ts: int) -> tuple[Any, str, int]:
    return (k, v, ts)


# (Kafka test name, [(action, expected output after it)], dropped-records at the end)
LEFT_CASES = [
    ("shouldNotJoinWithEmptyGlobalTableOnStreamUpdates", [
        (("stream", 2, "X", True, False), [X(0, "X0,FKey0+null", 0), X(1, "X1,FKey1+null", 1)]),
    ], 0),
    ("shouldNotJoinOnGlobalTableUpdates", [
        (("stream", 2, "X", True, False), [X(0, "X0,FKey0+null", 0), X(1, "X1,FKey1+null", 1)]),
        (("table", 2, "Y"), []),
        (("stream", 4, "X", True, False), [X(0, "X0,FKey0+Y0", 2), X(1, "X1,FKey1+Y1", 3), X(2, "X2,FKey2+null", 4),
                                           X(3, "X3,FKey3+null", 5)]),
        (("table", 4, "YY"), []),
        (("stream", 4, "X", True, False), [X(0, "X0,FKey0+YY0", 6), X(1, "X1,FKey1+YY1", 7), X(2, "X2,FKey2+YY2", 8),
                                           X(3, "X3,FKey3+YY3", 9)]),
        (("table", 4, "YYY"), []),
    ], 0),
    ("shouldJoinRegardlessIfMatchFoundOnStreamUpdates", [
        (("table", 2, "Y"), []),
        (("stream", 4, "X", True, False), [X(0, "X0,FKey0+Y0", 0), X(1, "X1,FKey1+Y1", 1), X(2, "X2,FKey2+null", 2),
                                           X(3, "X3,FKey3+null", 3)]),
    ], 0),
    ("shouldClearGlobalTableEntryOnNullValueUpdates", [
        (("table", 4, "Y"), []),
        (("stream", 4, "X", True, False), [X(0, "X0,FKey0+Y0", 0), X(1, "X1,FKey1+Y1", 1), X(2, "X2,FKey2+Y2", 2),
                                           X(3, "X3,FKey3+Y3", 3)]),
        (("table_null", 2), []),
        (("stream", 4, "XX", True, False), [X(0, "XX0,FKey0+null", 4), X(1, "XX1,FKey1+null", 5), X(2, "XX2,FKey2+Y2", 6),
                                            X(3, "XX3,FKey3+Y3", 7)]),
    ], 0),
    # Kafka 4.1 (KAFKA-19208): joined with null; Kafka 3.7-4.0 expected EMPTY and 4 drops
    ("shouldNotJoinOnNullKeyMapperValues", [
        (("table", 4, "Y"), []),
        (("stream", 4, "XXX", False, False), [X(0, "XXX0+null", 0), X(1, "XXX1+null", 1), X(2, "XXX2+null", 2),
                                              X(3, "XXX3+null", 3)]),
    ], 0),
    ("shouldJoinOnNullKeyWithNonNullKeyMapperValues", [
        (("table", 4, "Y"), []),
        (("stream", 4, "X", True, True), [X(None, "X0,FKey0+Y0", 0), X(1, "X1,FKey1+Y1", 1), X(2, "X2,FKey2+Y2", 2),
                                          X(3, "X3,FKey3+Y3", 3)]),
    ], 0),
    # not in Kafka's test: a null stream key AND a null mapped key (KIP-962: joined with null)
    ("nullKeyAndNullKeyMapperValue", [
        (("stream", 1, "XXX", False, True), [X(None, "XXX0+null", 0)]),
    ], 0),
]

INNER_CASES = [
    ("shouldNotJoinWithEmptyGlobalTableOnStreamUpdates", [
        (("stream", 2, "X", True, False), []),
    ], 0),
    ("shouldNotJoinOnGlobalTableUpdates", [
        (("stream", 2, "X", True, False), []),
        (("table", 2, "Y"), []),
        (("stream", 4, "X", True, False), [X(0, "X0,FKey0+Y0", 2), X(1, "X1,FKey1+Y1", 3)]),
        (("table", 4, "YY"), []),
        (("stream", 4, "X", True, False), [X(0, "X0,FKey0+YY0", 6), X(1, "X1,FKey1+YY1", 7), X(2, "X2,FKey2+YY2", 8),
                                           X(3, "X3,FKey3+YY3", 9)]),
        (("table", 4, "YYY"), []),
    ], 0),
    ("shouldJoinOnlyIfMatchFoundOnStreamUpdates", [
        (("table", 2, "Y"), []),
        (("stream", 4, "X", True, False), [X(0, "X0,FKey0+Y0", 0), X(1, "X1,FKey1+Y1", 1)]),
    ], 0),
    ("shouldClearGlobalTableEntryOnNullValueUpdates", [
        (("table", 4, "Y"), []),
        (("stream", 4, "X", True, False), [X(0, "X0,FKey0+Y0", 0), X(1, "X1,FKey1+Y1", 1), X(2, "X2,FKey2+Y2", 2),
                                           X(3, "X3,FKey3+Y3", 3)]),
        (("table_null", 2), []),
        (("stream", 4, "XX", True, False), [X(2, "XX2,FKey2+Y2", 6), X(3, "XX3,FKey3+Y3", 7)]),
    ], 0),
    ("shouldNotJoinOnNullKeyMapperValues", [
        (("table", 4, "Y"), []),
        (("stream", 4, "XXX", False, False), []),
    ], 4),  # dropped-records-total (Kafka 4.x asserts the metric for the inner join)
    ("shouldJoinOnNullKeyWithNonNullKeyMapperValues", [
        (("table", 2, "Y"), []),
        (("stream", 4, "X", True, True), [X(None, "X0,FKey0+Y0", 0), X(1, "X1,FKey1+Y1", 1)]),
    ], 0),
]


def _run(left: bool, steps: list[tuple[tuple[Any, ...], list[Any]]], dropped: int) -> None:
    with TopologyTestDriver(topology(left)) as d:
        h = Harness(d)
        for action, expected in steps:
            h.step(action)
            assert h.results() == expected, action
        assert d.dropped_records() == dropped


@pytest.mark.parametrize("name,steps,dropped", LEFT_CASES, ids=[c[0] for c in LEFT_CASES])
def test_left_join(name: str, steps: list[Any], dropped: int) -> None:
    _run(True, steps, dropped)


@pytest.mark.parametrize("name,steps,dropped", INNER_CASES, ids=[c[0] for c in INNER_CASES])
def test_inner_join(name: str, steps: list[Any], dropped: int) -> None:
    _run(False, steps, dropped)


@pytest.mark.parametrize("left", [True, False])
def test_null_value_is_dropped_and_counted(left: bool) -> None:
    # KStreamKTableJoinProcessor#maybeDropRecord: a null value is dropped in both joins
    # (the key mapper is still called first, as Kafka does: it must accept a null value)
    b = StreamsBuilder()
    table = b.global_table("globalTopic", Consumed.with_(STR, STR))
    s = b.stream("streamTopic", Consumed.with_(INT, STR))
    safe = lambda k, v: None if v is None else key_mapper(k, v)  # noqa: E731
    (s.left_join if left else s.join)(table, safe, tostring_joiner).to("out", Produced.with_(INT, STR))
    with TopologyTestDriver(b.build()) as d:
        d.create_input_topic("streamTopic", INT, STR).pipe_input(1, None, 0)
        d.create_input_topic("streamTopic", INT, STR).pipe_input(None, None, 1)
        assert d.create_output_topic("out", INT, STR).read_records_to_list() == []
        assert d.dropped_records() == 2


# ---------------------------------------------------------------- batch equals speed
@pytest.mark.spark
@pytest.mark.parametrize("strategy", ["broadcast", "shuffle", "general"])
def test_batch_equals_speed_on_null_keys_and_null_mapped_keys(spark, tmp_path: Any, strategy: str) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "test_equivalence"))
    from equivalence_kit import assert_views_equal, batch_views, produce, speed_views, write_raw

    from batch_layer.compiler import BatchOptions
    from batch_layer.run import run_batch
    from speed_layer import Materialized

    js = Serdes.JSON()

    def build() -> Any:
        b = StreamsBuilder()
        items = b.global_table("items", Consumed(key_serde=STR, value_serde=js), Materialized.as_("items-store"))
        orders = b.stream("orders", Consumed(key_serde=STR, value_serde=js))
        joined = orders.left_join(items, lambda k, o: o.get("item"),
                                  lambda o, it: {"id": o["id"], "price": None if it is None else it["price"]})
        # every join result (a null-keyed one included) counted per (item price or "none")
        (joined.group_by(lambda k, j: "none" if j["price"] is None else str(j["price"]))
         .count(Materialized.as_("by_price"))
         .to_stream().to("by_price", Produced(key_serde=STR, value_serde=js)))
        (joined.filter(lambda k, j: k is not None).group_by_key()
         .reduce(lambda a, b: b, Materialized.as_("last_by_key"))
         .to_stream().to("last_by_key", Produced(key_serde=STR, value_serde=js)))
        return b.build()

    T0 = 1_700_000_000_000
    items = [("i1", {"price": 10}, T0), ("i2", {"price": 20}, T0), ("i1", {"price": 11}, T0 + 5)]
    orders = [
        ("k1", {"id": 1, "item": "i1"}, T0 + 1),  # match
        ("k2", {"id": 2}, T0 + 2),  # null mapped key, non-null key: joined with null (Kafka 4.1)
        (None, {"id": 3, "item": "i2"}, T0 + 3),  # null key, mapped key: joins
        (None, {"id": 4}, T0 + 4),  # null key, null mapped key: joined with null
        ("k1", {"id": 5, "item": "i1"}, T0 + 6),  # after the update
        ("k3", {"id": 6, "item": "i9"}, T0 + 7),  # no match
        ("k4", {"id": 7}, T0 + 8),
    ]
    raws = produce("orders", orders, 3) + produce("items", items, 1)
    write_raw(tmp_path, raws)
    views = {"by_price": False, "last_by_key": False}
    options = BatchOptions(executor="general") if strategy == "general" else BatchOptions(join_strategy=strategy)
    res = run_batch(spark, build(), tmp_path, views=list(views), options=options)
    assert res.dropped == 0
    speed, speed_dropped = speed_views(build(), raws, {"items"}, views)
    assert speed_dropped == 0
    assert speed["by_price"] == {("none", None, None): ("4", T0 + 8), ("10", None, None): ("1", T0 + 1),
                                 ("11", None, None): ("1", T0 + 6), ("20", None, None): ("1", T0 + 3)}
    assert_views_equal(batch_views(tmp_path, views), speed)
