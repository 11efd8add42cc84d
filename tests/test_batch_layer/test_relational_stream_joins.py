"""KStream-KStream windowed joins on the relational path (``batch_layer/translators/
stream_joins.py``): each scenario computes the stores downstream of a join three ways, the
relational plan, the general executor and the TopologyTestDriver fed in event-time order,
and asserts them equal (``three_ways`` of test_relational_translations), plus the cases
refused to the general executor. Each Spark scenario costs about 4 s: one topology carries
several stores (an order-sensitive log, a count, a windowed count)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from batch_layer.compiler import compile_topology
from speed_layer import JoinWindows, Materialized, StreamsBuilder, TimeWindows
from speed_layer.topology import Topology

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "test_equivalence"))
from equivalence_kit import produce  # noqa: E402
from test_relational_translations import three_ways  # noqa: E402

pytestmark = pytest.mark.spark
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# asymmetric: a right record joins left records up to 10 ms older and 5 ms younger
WINDOWS = JoinWindows(before_ms=5, after_ms=10, grace_ms=3)

# (key, value, ts): equal timestamps across sides (0, 20, 60), null keys and values, a
# left value (99) and a right value ("boom") on which the joiner raises
CLICKS = [("a", 1, 0), ("b", 2, 0), ("a", 3, 4), (None, 4, 5), ("c", None, 6), ("a", 5, 12), ("b", 6, 20), ("c", 7, 20),
          ("d", 8, 30), ("a", 9, 40), ("b", 99, 41), ("e", 10, 60), ("a", 11, 61), ("g", 12, 62), ("a", 13, 100)]
VIEWS = [("a", "x", 0), ("b", "y", 3), ("a", "z", 10), ("c", "w", 20), (None, "n", 21), ("d", None, 25), ("b", "boom", 26),
         ("a", "q", 45), ("d", "v", 36), ("e", "u", 60), ("f", "t", 70), ("b", "r", 44), ("a", "late", 90)]


def _joiner(left: Any, right: Any) -> list[Any]:
    if left == 99 or right == "boom":
        raise ValueError("boom")
    return [left, right]


def _join(kind: str, rekey: bool = False, downstream: str = "all") -> Topology:
    """``clicks`` ``kind``-joined with ``views`` (re-keyed by the value's first letter when
    ``rekey``: from the value, a repartition), then grouped by key: a log in arrival order (``hist``), a
    count (``n``) and a tumbling-window count (``w``); ``downstream`` "count": ``n`` only; and
    a count per kind of result (``kinds``) after a repartition."""
    b = StreamsBuilder()
    clicks = b.stream("clicks")
    views = b.stream("views")
    if rekey:  # "key:value" re-keyed by its key part (an empty key part: a null key)
        views = views.map(lambda k, v: (None, None) if v is None else (v.split(":")[0] or None, v.split(":")[1]))
    join = {"inner": clicks.join, "left": clicks.left_join, "outer": clicks.outer_join}[kind]
    joined = join(views, _joiner, WINDOWS)
    grouped = joined.group_by_key()
    grouped.count(Materialized.as_("n"))
    # re-keyed by the kind of result (a repartition): "B"oth sides, "L"eft or "R"ight only
    joined.group_by(lambda k, v: "L" if v[1] is None else "R" if v[0] is None else "B").count(Materialized.as_("kinds"))
    if downstream == "all":
        grouped.aggregate(list, lambda k, v, agg: agg + [v], Materialized.as_("hist"))
        grouped.windowed_by(TimeWindows.of_size_with_no_grace(20)).count(Materialized.as_("w"))
    return b.build()


@pytest.mark.parametrize("partitions,rekey", [(1, False), (3, True)])
def test_inner_join_is_relational_and_equal(spark, tmp_path: Path, partitions: int, rekey: bool) -> None:
    """Every store downstream of an inner join, order-sensitive ones included: results come
    in the later record's order, several results of one record in the other side's
    timestamp order; a failing joiner drops the record (and keeps it out of its window store)."""
    views = [(f"id{i}", None if v is None else f"{k or ''}:{v}", ts) for i, (k, v, ts) in enumerate(VIEWS)] if rekey else VIEWS
    raws = produce("clicks", CLICKS, partitions) + produce("views", views, partitions)
    res = three_ways(spark, tmp_path, _join("inner", rekey), raws, set())
    assert res["relational"] == res["general"] == res["driver"]
    hist = {r[0]: r[3] for r in res["relational"]["hist"]}
    assert len(hist) >= 3 and "boom" not in str(hist)


@pytest.mark.parametrize("kind", ["left", "outer"])
def test_left_and_outer_joins_are_relational_and_equal(spark, tmp_path: Path, kind: str) -> None:
    """One partition: unmatched records (null keys at once, others when stream time passes
    their window's close, never when a match comes within the grace) counted as the driver
    counts them."""
    raws = produce("clicks", CLICKS, 1) + produce("views", VIEWS, 1)
    res = three_ways(spark, tmp_path, _join(kind, downstream="count"), raws, set())
    assert res["relational"] == res["general"] == res["driver"]
    kinds = {r[0]: int(r[3]) for r in res["relational"]["kinds"]}
    assert kinds["B"] >= 5 and kinds["L"] >= 3 and ("R" in kinds) == (kind == "outer")


def test_outer_join_over_three_partitions_uses_each_task_stream_time(spark, tmp_path: Path) -> None:
    """Three partitions: each task's stream time decides which unmatched records are emitted
    before the input ends (the TopologyTestDriver has one task, so only relational and
    general are compared)."""
    raws = produce("clicks", CLICKS, 3) + produce("views", VIEWS, 3)
    res = three_ways(spark, tmp_path, _join("outer", downstream="count"), raws, set())
    assert res["relational"] == res["general"]
    assert {r[0] for r in res["relational"]["kinds"]} == {"B", "L", "R"}


def test_stream_join_fallbacks() -> None:
    """Refused to the general executor: order-sensitive consumers of a left/outer join, a
    left join with a repartitioned side, a self-join."""
    assert compile_topology(_join("inner"), views=["hist"]).executor == "relational"
    assert compile_topology(_join("left", downstream="count"), views=["n"]).executor == "relational"
    assert compile_topology(_join("left"), views=["hist"]).executor == "general"
    assert compile_topology(_join("outer"), views=["w"]).executor == "general"
    assert compile_topology(_join("left", rekey=True, downstream="count"), views=["n"]).executor == "general"
    b = StreamsBuilder()
    s = b.stream("clicks")
    s.join(s.filter(lambda k, v: v % 2 == 0), _joiner, WINDOWS).group_by_key().count(Materialized.as_("n"))
    assert compile_topology(b.build(), views=["n"]).executor == "general"
