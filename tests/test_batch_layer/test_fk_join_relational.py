"""KTable-KTable foreign-key joins (KIP-213) on the relational path
(``batch_layer/translators/fk_joins.py``): the joined tables' stores and what consumes
them (a ``group_by`` aggregation, the log of the join's change stream) computed three
ways, relational plan, general executor and TopologyTestDriver fed in event-time order
(``three_ways`` of test_relational_translations), plus the cases refused to the general
executor. Scenarios: inner and left joins side by side on one partition; a filtered,
mapped left table with a key-reading extractor that raises on some values, a joiner that
raises and an uncached right table, on three partitions. Cost: 73 s and 29 s measured at
load 13 on 2 cores (the first one warms Spark's Python workers up; each scenario is one
relational and one general run, the relational one a Spark job per view), the fallbacks
under a second without Spark."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from batch_layer.compiler import compile_topology
from speed_layer import Materialized, StreamsBuilder
from speed_layer.topology import Topology

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "test_equivalence"))
from equivalence_kit import produce  # noqa: E402
from test_relational_translations import three_ways  # noqa: E402

from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# customers (key, name, ts): x renamed, y deleted and re-created, q and w deleted while
# absent (q has a subscriber then), x deleted at last, a null key
CUSTOMERS = [("x", "X1", 1), ("y", "Y1", 2), ("q", None, 7), ("x", "X2", 12), ("z", "Z1", 15), ("y", None, 20), ("w", None, 21),
             ("y", "Y2", 30), ("x", None, 40), (None, "bad", 41), ("z", "Z2", 45)]
# orders (key, {"c": customer, "n": n}, ts): o1 moves x -> y -> null, o3 waits for z
# (absent at 5), o4 null -> x, o2 deleted (then deleted again while absent), o5 joins the
# deleted y, o6 / o7 share a timestamp with a customer change (table topics: batch order by
# partition, offset, topic), listed out of order
ORDERS = [("o1", {"c": "x", "n": 1}, 3), ("o2", {"c": "y", "n": 2}, 4), ("o3", {"c": "q", "n": 3}, 5),
          ("o4", {"c": None, "n": 4}, 6), ("o1", {"c": "y", "n": 5}, 10), ("o3", {"c": "z", "n": 6}, 16),
          ("o2", None, 18), ("o4", {"c": "x", "n": 7}, 22), ("o5", {"c": "y", "n": 8}, 25),
          ("o1", {"c": None, "n": 9}, 33), ("o2", None, 34), ("o6", {"c": "x", "n": 10}, 12),
          ("o7", {"c": "z", "n": 11}, 15), (None, {"c": "x", "n": 12}, 16), ("o6", {"c": "y", "n": 13}, 44)]


def _joined(o: dict[str, Any], c: Any) -> dict[str, Any]:
    return {"n": o["n"], "c": c}


def _consumers(name: str, joined: Any) -> None:
    """The joined table's row count per customer name (``<name>-by-c``, adder and
    subtractor) and the log of its change stream (``<name>-log``: every record ``toStream``
    forwards, tombstones included, in order, across keys)."""
    (joined.group_by(lambda k, v: (str(v["c"]), v["n"]))
     .aggregate(lambda: 0, lambda k, v, a: a + 1, lambda k, v, a: a - 1, Materialized.as_(f"{name}-by-c")))
    (joined.to_stream().map(lambda k, v: ("all", f"{k}={v}")).group_by_key()
     .reduce(lambda a, c: f"{a}|{c}", Materialized.as_(f"{name}-log")))


def _inner_and_left() -> Topology:
    b = StreamsBuilder()
    orders = b.table("orders", materialized=Materialized.as_("orders-store"))
    customers = b.table("customers", materialized=Materialized.as_("customers-store"))
    _consumers("inner", orders.join(customers, lambda o: o["c"], _joined, materialized=Materialized.as_("inner")))
    _consumers("left", orders.left_join(customers, lambda o: o["c"], _joined, materialized=Materialized.as_("left")))
    return b.build()


def _rows(res: dict[str, Any], store: str) -> dict[str, Any]:
    return {r[0]: r[3] for r in res["relational"][store]}


@pytest.mark.spark
def test_inner_and_left_fk_joins_are_relational_and_equal(spark, tmp_path: Path) -> None:
    raws = produce("orders", ORDERS, 1) + produce("customers", CUSTOMERS, 1)
    res = three_ways(spark, tmp_path, _inner_and_left(), raws, {"orders", "customers"})
    assert res["relational"] == res["general"] == res["driver"]
    inner, left = _rows(res, "inner"), _rows(res, "left")
    # o1 ends with a null FK (dropped by inner, joined with None by left), o2 deleted, o3
    # joined once z existed, o4 / o6 on x (deleted at 40), o5 on the re-created y
    assert set(inner) == {"o3", "o5", "o6", "o7"}
    assert set(left) == {"o1", "o3", "o4", "o5", "o6", "o7"}
    assert '"c":null' in left["o1"].replace(" ", "") and '"Z2"' in inner["o3"]
    log = res["relational"]["left-log"][0][3]
    assert "o2=None" in log and log.index("o1={'n': 1, 'c': 'X1'}") < log.index("o1={'n': 5, 'c': 'Y1'}")
    assert log.count("o3={'n': 3, 'c': None}") == 1  # the cached right table skips q's delete


def _boom_fk(k: str, v: dict[str, Any]) -> Any:
    if v["c"] == "boom":
        raise ValueError("extractor fails")
    return v["c"]


def _fragile(o: dict[str, Any], c: Any) -> dict[str, Any]:
    if o["n"] == 70:
        raise ZeroDivisionError("joiner fails")
    return {"n": o["n"], "c": c}


# o8 on x, then a value whose foreign key cannot be extracted (dropped: its subscription
# to x keeps the old value's hash, so x's update at 52 does not reach it), back to its first
# value (dropped again: the extractor fails on the old value; the subscription's hash
# matches again, so x's update at 54 joins it), then to z; o9 filtered out, then in
STALE = [("o8", {"c": "x", "n": 20}, 50), ("o8", {"c": "boom", "n": 21}, 51), ("x", "X3", 52),
         ("o8", {"c": "x", "n": 20}, 53), ("x", "X4", 54), ("o8", {"c": "z", "n": 22}, 55), ("x", "X5", 56),
         ("o9", {"c": "z", "n": 99}, 57), ("o9", {"c": "z", "n": 23}, 58)]


@pytest.mark.spark
def test_fk_join_over_partitions_with_failing_functions(spark, tmp_path: Path) -> None:
    """Three partitions; a filtered and mapped left table (hash of the left value by pickle:
    no store under the stages), an extractor reading the key that raises on some values (a
    stale subscription, see ``STALE``), a joiner raising on one row (o4's n * 10 = 70: the
    result stays the previous one), a right table without a cache (its delete of the
    absent ``q`` answers its subscriber o3 again). The inner join is compared by its store
    only (fewer Spark jobs)."""
    b = StreamsBuilder()
    orders = (b.table("orders", materialized=Materialized.as_("orders-store"))
              .filter(lambda k, v: v["n"] != 99).map_values(lambda v: {"c": v["c"], "n": v["n"] * 10}))
    customers = b.table("customers", materialized=Materialized.as_("customers-store").with_caching_disabled())
    orders.join(customers, _boom_fk, _fragile, materialized=Materialized.as_("inner"), extractor_with_key=True)
    _consumers("left", orders.left_join(customers, _boom_fk, _fragile, materialized=Materialized.as_("left"),
                                        extractor_with_key=True))
    orders_in = ORDERS + [(k, v, ts) for k, v, ts in STALE if k.startswith("o")]
    customers_in = CUSTOMERS + [(k, v, ts) for k, v, ts in STALE if not k.startswith("o")]
    raws = produce("orders", orders_in, 3) + produce("customers", customers_in, 3)
    res = three_ways(spark, tmp_path, b.build(), raws, {"orders", "customers"})
    assert res["relational"] == res["general"] == res["driver"]
    left = _rows(res, "left")
    assert '"X4"' not in left["o8"] and '"Z2"' in left["o8"] and '"n":230' in left["o9"].replace(" ", "")
    log = res["relational"]["left-log"][0][3]
    assert "o8={'n': 200, 'c': 'X4'}" in log and "X3" not in log and "X5" not in log
    assert "'n': 70" not in log and log.count("o3={'n': 30, 'c': None}") == 2
    assert set(_rows(res, "inner")) == {"o3", "o5", "o6", "o7", "o8", "o9"}


def _fk(left: Any, right: Any, name: str = "j") -> None:
    left.join(right, lambda v: v["c"], _joined, materialized=Materialized.as_(name))


def test_fk_join_fallbacks() -> None:
    """Refused to the general executor (no Spark): a versioned table on either side, a
    self-join (both tables read one topic), a right table that is an aggregation's result,
    a staged right table without a cache; the left table's own store stays relational."""
    assert compile_topology(_inner_and_left()).executor == "relational"
    for versioned in ("left", "right"):
        b = StreamsBuilder()
        m = {side: Materialized.as_(f"{side}-store") for side in ("left", "right")}
        m[versioned] = m[versioned].as_versioned(1000)
        _fk(b.table("orders", materialized=m["left"]), b.table("customers", materialized=m["right"]))
        assert compile_topology(b.build(), views=["j"]).executor == "general"
    b = StreamsBuilder()
    t = b.table("orders", materialized=Materialized.as_("orders-store"))
    _fk(t, t)
    assert compile_topology(b.build(), views=["j"]).executor == "general"
    assert compile_topology(b.build(), views=["orders-store"]).executor == "relational"
    b = StreamsBuilder()
    counts = b.stream("customers").group_by_key().count(Materialized.as_("n"))
    _fk(b.table("orders", materialized=Materialized.as_("orders-store")), counts)
    assert compile_topology(b.build(), views=["j"]).executor == "general"
    b = StreamsBuilder()
    right = b.table("customers", materialized=Materialized.as_("c").with_caching_disabled()).filter(lambda k, v: v != "X1")
    _fk(b.table("orders"), right)
    assert compile_topology(b.build(), views=["j"]).executor == "general"
