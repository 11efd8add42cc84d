"""Speed vs batch: the batch layer's views equal the speed layer's on the same input.

Each test builds raw records (serdes, partitions by murmur2, offsets), writes them as
``<lake>/raw/<topic>`` Delta tables, runs ``run_batch``, and pipes the same records into the
``TopologyTestDriver`` in batch order ``(timestamp, table records first, partition,
offset)``: nothing is late, so every window must match exactly (value JSON text and
timestamp).
"""
from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path

import pytest
from equivalence_kit import assert_views_equal, batch_views, json_records, produce, speed_views, write_raw

from batch_layer.compiler import BatchOptions
from batch_layer.run import read_view, run_batch
from speed_layer import (
    Consumed, Materialized, Produced, Serdes, SessionWindows, StreamsBuilder, TimeWindows,
)

pytestmark = pytest.mark.spark

S = 1000
MIN = 60 * S
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
BIG_GRACE = timedelta(days=365)


def windowed_out() -> Produced:
    return Produced(key_serde=Serdes.WindowedJSON(Serdes.String()), value_serde=Serdes.JSON())


def plain_out() -> Produced:
    return Produced(key_serde=Serdes.String(), value_serde=Serdes.JSON())


# ---------------------------------------------------------------- (a) stateless + windowed count
def clicks_topology():
    b = StreamsBuilder()
    clicks = b.stream("clicks")
    good = clicks.filter(lambda k, v: v.get("page") != "spam").peek(lambda k, v: None)
    branches = good.split("br-").branch(lambda k, v: v["n"] % 3 == 0, "fizz").default_branch("rest")
    fizz = branches["br-fizz"].map_values(lambda v: {**v, "fizz": True})
    rest = branches["br-rest"].flat_map_values(lambda v: [v, {**v, "copy": True}] if v["n"] % 5 == 0 else [v])
    merged = fizz.merge(rest)
    (merged.group_by_key()
     .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), BIG_GRACE))
     .count(Materialized.as_("clicks_10s"))
     .to_stream().to("clicks_10s", windowed_out()))
    (merged.map(lambda k, v: (v["page"], v["n"]))
     .group_by_key()
     .reduce(lambda a, b: a * 31 + b if a < 10**12 else b, Materialized.as_("page_fold"))  # order-sensitive
     .to_stream().to("page_fold", plain_out()))
    (merged.flat_map(lambda k, v: [(f"{k}:{i}", i) for i in range(v["n"] % 3)])
     .group_by_key()
     .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=20), BIG_GRACE).advance_by(timedelta(seconds=5)))
     .aggregate(lambda: [], lambda k, v, agg: agg + [v], Materialized.as_("fanout_hop"))
     .to_stream().to("fanout_hop", windowed_out()))
    return b.build()


def clicks_records(n: int = 400) -> list:
    rnd = random.Random(7)
    users = [f"u{i}" for i in range(12)]
    pages = ["home", "search", "cart", "spam"]
    out = []
    for i in range(n):
        ts = T0 + rnd.randrange(0, 120) * 500  # many equal timestamps across partitions
        out.append((rnd.choice(users), {"page": rnd.choice(pages), "n": i}, ts))
    out.append(("u1", b"{not json", T0 + 1000))  # a dead letter
    out.append(("u2", b"[1, 2", T0 + 2000))  # another one
    return out


@pytest.mark.parametrize("executor", ["auto", "general"])
def test_a_windowed_count_and_stateless_ops(spark, tmp_path: Path, executor: str) -> None:
    raws = produce("clicks", clicks_records(), partitions=3)
    write_raw(tmp_path, raws)
    views = {"clicks_10s": True, "page_fold": False, "fanout_hop": True}
    res = run_batch(spark, clicks_topology(), tmp_path, options=BatchOptions(executor=executor))
    assert set(res.views) == set(views)
    assert res.dropped == 2 and res.dropped_by_node == {clicks_topology().source_topics()["clicks"]: 2}
    assert res.watermark_ms == max(r.timestamp for r in raws)
    speed, speed_dropped = speed_views(clicks_topology(), raws, set(), views, {"deserialization.exception.handler": "log_and_continue"})
    assert speed_dropped == 2
    assert_views_equal(batch_views(tmp_path, views), speed)
    assert len(speed["clicks_10s"]) > 50 and len(speed["fanout_hop"]) > 50 and len(speed["page_fold"]) == 3
    assert res.views == {k: len(v) for k, v in speed.items()}


# ---------------------------------------------------------------- (b) as-of joins then windows
def orders_topology():
    b = StreamsBuilder()
    text, js = Serdes.String(), Serdes.JSON()
    orders = b.stream("orders", Consumed(key_serde=text, value_serde=js))
    users = b.table("users", Consumed(key_serde=text, value_serde=js), Materialized.as_("users-store"))
    items = b.global_table("items", Consumed(key_serde=text, value_serde=js), Materialized.as_("items-store"))
    enriched = (
        orders.left_join(users, lambda o, u: {**o, "city": u["city"] if u else None})
        .join(items, lambda k, o: o["item"], lambda o, it: {**o, "price": it["price"], "origin": it["origin"]})
        .filter(lambda k, o: o["city"] is not None)
    )
    by_city = enriched.select_key(lambda k, o: o["city"])
    (by_city.group_by_key()
     .windowed_by(TimeWindows.of_size_and_grace(timedelta(minutes=1), BIG_GRACE))
     .count(Materialized.as_("orders_per_city"))
     .to_stream().to("orders_per_city", windowed_out()))
    (by_city.group_by_key()
     .windowed_by(TimeWindows.of_size_and_grace(timedelta(minutes=5), BIG_GRACE).advance_by(timedelta(minutes=1)))
     .aggregate(lambda: {"n": 0, "revenue": 0, "local": 0, "last": None},
                lambda k, o, a: {"n": a["n"] + 1, "revenue": a["revenue"] + o["price"] * o["qty"],
                                 "local": a["local"] + (o["origin"] == k), "last": o["id"]},
                Materialized.as_("revenue_5m"))
     .to_stream().to("revenue_5m", windowed_out()))
    return b.build()


def orders_records() -> tuple[list, list, list]:
    rnd = random.Random(11)
    cities = ["paris", "lyon", "nice"]
    users = [f"user{i}" for i in range(10)]
    table = []
    for i, u in enumerate(users[:8]):  # user8, user9 never in the table (left join: None)
        table.append((u, {"city": cities[i % 3]}, T0))
    # moves: one exactly at an order's timestamp (the table record counts), tombstones
    table.append(("user0", {"city": "nice"}, T0 + 3 * MIN))
    table.append(("user1", {"city": "paris"}, T0 + 5 * MIN))
    table.append(("user2", None, T0 + 6 * MIN))
    table.append(("user2", {"city": "lyon"}, T0 + 9 * MIN))
    table.append(("user3", {"city": "lyon"}, T0 + 4 * MIN + 30 * S))
    items = [(f"item{i}", {"price": 10 + i, "origin": cities[i % 3]}, T0) for i in range(5)]
    items.append(("item1", {"price": 99, "origin": "nice"}, T0 + 7 * MIN))  # price change
    orders = []
    for i in range(300):
        ts = T0 + rnd.randrange(0, 12 * 60) * S
        orders.append((rnd.choice(users), {"id": i, "item": f"item{rnd.randrange(6)}", "qty": rnd.randrange(1, 4)}, ts))
    orders.append(("user3", {"id": 1000, "item": "item0", "qty": 1}, T0 + 4 * MIN + 30 * S))  # tie with a table update
    orders.append((None, {"id": 1001, "item": "item0", "qty": 1}, T0 + 8 * MIN))  # null key: left join with None
    return orders, table, items


@pytest.mark.parametrize("strategy", ["broadcast", "shuffle", "general"])
def test_b_stream_table_asof_join_then_tumbling_and_hopping(spark, tmp_path: Path, strategy: str) -> None:
    """``general``: the general executor instead of the relational as-of join."""
    orders, users, items = orders_records()
    raws = produce("orders", orders, 3) + produce("users", users, 3) + produce("items", items, 1)
    write_raw(tmp_path, raws)
    views = {"orders_per_city": True, "revenue_5m": True}
    options = BatchOptions(executor="general") if strategy == "general" else BatchOptions(join_strategy=strategy)
    res = run_batch(spark, orders_topology(), tmp_path, views=list(views), options=options)
    assert set(res.join_strategies.values()) == (set() if strategy == "general" else {strategy})
    assert res.dropped == 0
    assert res.watermark_ms == max(r.timestamp for r in raws if r.topic == "orders")
    speed, _ = speed_views(orders_topology(), raws, {"users", "items"}, views)
    assert_views_equal(batch_views(tmp_path, views), speed)
    assert len(speed["revenue_5m"]) > 30


def test_b_table_store_view(spark, tmp_path: Path) -> None:
    """A KTable's store as a view: the last value per key (tombstones delete)."""
    _, users, _ = orders_records()
    write_raw(tmp_path, produce("users", users, 3))
    run_batch(spark, orders_topology(), tmp_path, views=["users-store"])
    view = read_view(tmp_path, "users-store")
    last = {}
    for k, v, ts in users:
        last[k] = (v, ts)
    expected = {k: (json.dumps(v, separators=(",", ":")), ts) for k, (v, ts) in last.items() if v is not None}
    assert {r.key: (r.value, int(r.timestamp)) for r in view.itertuples()} == expected
    assert view["window_start"].isna().all()


# ---------------------------------------------------------------- (c) sessions, KTable -> KStream
def sessions_topology():
    b = StreamsBuilder()
    visits = b.stream("visits")
    (visits.group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=5), BIG_GRACE))
     .aggregate(lambda: {"n": 0, "pages": []},
                lambda k, v, a: {"n": a["n"] + 1, "pages": a["pages"] + [v["page"]]},
                lambda k, a, c: {"n": a["n"] + c["n"], "pages": a["pages"] + c["pages"]},
                Materialized.as_("visit_sessions"))
     .to_stream().to("visit_sessions", windowed_out()))
    (visits.group_by(lambda k, v: v["page"])
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=2), BIG_GRACE))
     .count(Materialized.as_("page_sessions"))
     .to_stream().to("page_sessions", windowed_out()))
    profiles = b.table("profiles")
    (profiles.filter(lambda k, v: v["level"] > 1).map_values(lambda v: v["level"]).to_stream()
     .group_by(lambda k, lvl: "all" if lvl is None else f"level{lvl}")
     .count(Materialized.as_("level_updates"))
     .to_stream().to("level_updates", plain_out()))
    return b.build()


def sessions_records() -> tuple[list, list]:
    rnd = random.Random(5)
    visits = []
    for u in range(6):
        t = T0
        for i in range(40):
            t += rnd.choice([10 * S, 1 * MIN, 4 * MIN, 5 * MIN, 5 * MIN + 1, 20 * MIN])  # gap edges: 5 min merges
            visits.append((f"v{u}", {"page": rnd.choice(["a", "b", "c"]), "i": i}, t))
    profiles = []
    for i in range(60):
        lvl = rnd.choice([None, 1, 2, 3])
        profiles.append((f"p{i % 7}", None if lvl is None else {"level": lvl}, T0 + i * 30 * S))
    return visits, profiles


@pytest.mark.parametrize("executor", ["auto", "general"])
def test_c_session_windows_and_table_to_stream(spark, tmp_path: Path, executor: str) -> None:
    visits, profiles = sessions_records()
    raws = produce("visits", visits, 2) + produce("profiles", profiles, 2)
    write_raw(tmp_path, raws)
    views = {"visit_sessions": True, "page_sessions": True, "level_updates": False}
    res = run_batch(spark, sessions_topology(), tmp_path, views=list(views), options=BatchOptions(executor=executor))
    assert res.dropped == 0
    speed, _ = speed_views(sessions_topology(), raws, {"profiles"}, views)
    assert_views_equal(batch_views(tmp_path, views), speed)
    sessions = speed["visit_sessions"]
    assert any(start < end for (_, start, end) in sessions)  # merged sessions exist
    assert len(sessions) > 6


# ---------------------------------------------------------------- (d) the flagship on real flights
@pytest.mark.parametrize("executor", ["auto", "general"])
def test_d_flagship_flights(spark, tmp_path: Path, executor: str) -> None:
    from pipelines.examples.flights.data import TOPICS, flight_records, table_records
    from pipelines.examples.flights.topology import STREAMS_CONFIG, VIEW_NAMES as VIEWS, build_topology

    raws = produce("flights", json_records(flight_records(400)), TOPICS["flights"])
    bad = produce("flights", [("N0BAD", b'{"origin": "JFK"}', 1357034400000)], 1)  # lacks fields: dead letter
    raws += [type(bad[0])("flights", bad[0].key, bad[0].value, bad[0].timestamp, 0, 10_000)]
    for t in ("planes", "airports", "airlines"):
        raws += produce(t, json_records(table_records(t)), TOPICS[t])
    write_raw(tmp_path, raws)
    res = run_batch(spark, build_topology(), tmp_path, views=list(VIEWS), options=BatchOptions(executor=executor))
    assert res.dropped == 1
    assert res.watermark_ms == max(r.timestamp for r in raws if r.topic == "flights" and r.key != b"N0BAD")
    info = json.loads((tmp_path / "views" / "_batch.json").read_text())
    assert info["watermark_ms"] == res.watermark_ms and info["views"] == {v: {"rows": n} for v, n in res.views.items()}
    speed, speed_dropped = speed_views(build_topology(), raws, {"planes", "airports", "airlines"}, {v: True for v in VIEWS}, STREAMS_CONFIG)
    assert speed_dropped == 1
    assert_views_equal(batch_views(tmp_path, VIEWS), speed)
    assert res.views == {k: len(v) for k, v in speed.items()}
    # the contract's columns and types
    schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(str(tmp_path / "views" / "departures_hourly")).schema}
    assert schema == {"key": "string", "window_start": "bigint", "window_end": "bigint", "value": "string", "timestamp": "bigint"}
