"""A backlog of three sources through two repartitioned join sides and a foreign-key join
catches up without stalling (issue 25).

The shape of the shop example: clicks and orders (streams) and products (a table); product
views and orders re-keyed by ``user|product`` (two repartition topics) and joined, the join
results counted per product and hour (a third repartition topic); the orders as a table
joined with the products by a foreign key (the subscription registration and response
topics) and summed per category. Some clicks are late (an hour older than their
neighbours), and each task buffer holds 10 records with the held bytes bounded to 64, so
partitions are paused over and over: a late click re-keyed into a repartition partition
waits behind the records buffered there. Before the fix a sibling task waited for it,
while the task of that partition waited for the sibling's older head, and each of these
waits lasted ``UNKNOWN_LAG_WAIT_S`` (not caught up after 30 s, 29 enforced processings). The results are checked
against a plain reading of the input (counts that do not depend on the processing order).
"""
from __future__ import annotations

import json
import random
import time
from datetime import timedelta
from typing import Any

import pytest

from speed_layer import (
    Consumed, Grouped, JoinWindows, Materialized, Produced, Serdes, StreamJoined, StreamsBuilder, TimeWindows,
    Topology,
)
from speed_layer.runtime import input_buffers

pytestmark = pytest.mark.broker

MINUTE = 60_000
T0 = 1_700_000_000_000
#: far below the stall (minutes) and above a loaded CI machine's few seconds
BOUND_S = 30.0


def build(t: dict[str, str]) -> Topology:
    b = StreamsBuilder()
    text, js = Serdes.String(), Serdes.JSON()
    clicks = b.stream(t["clicks"], Consumed(key_serde=text, value_serde=js))
    orders = b.stream(t["orders"], Consumed(key_serde=text, value_serde=js))
    products = b.table(t["products"], Consumed(key_serde=text, value_serde=js), Materialized.as_("products-store"))

    def user_product(key: str, v: dict[str, Any]) -> str:
        return f"{v['user']}|{v['product']}"

    views = clicks.filter(lambda k, v: v["page"] == "product").select_key(user_product)
    (orders.select_key(user_product)
     .join(views, lambda o, c: {"product": o["product"]},
           JoinWindows.of_time_difference_and_grace(timedelta(minutes=30), timedelta(minutes=10)).after(0),
           StreamJoined(name="conversions", store_name="conversions"))
     .select_key(lambda k, c: c["product"])
     .group_by_key(Grouped.as_("conversions-by-product"))
     .windowed_by(TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(minutes=10)))
     .count(Materialized.as_("conversions"))
     .to_stream().to(t["conversions"], Produced(key_serde=Serdes.WindowedJSON(text), value_serde=js)))
    (orders.to_table("orders-table", Materialized.as_("orders-store"))
     .join(products, lambda o: o["product"], lambda o, p: {"category": p["category"], "amount": o["amount"]})
     .group_by(lambda k, row: (row["category"], row), Grouped.as_("orders-by-category"))
     .aggregate(lambda: 0, lambda k, row, agg: agg + row["amount"], lambda k, row, agg: agg - row["amount"],
                Materialized.as_("revenue"))
     .to_stream().to(t["revenue"], Produced(key_serde=text, value_serde=js)))
    return b.build()


def data() -> tuple[list[tuple[str, Any, int]], list[tuple[str, Any, int]], list[tuple[str, Any, int]]]:
    """Products, then 3,000 clicks (one in 25 an hour late) and 400 orders of 8 users on 6
    products (few keys: the repartition partitions fill unevenly)."""
    rng = random.Random(25)
    products = [(f"p{i}", {"category": f"c{i % 3}"}, T0 - MINUTE) for i in range(6)]
    clicks, orders = [], []
    for i in range(3000):
        ts = T0 + i * 20_000
        if i % 25 == 7:
            ts -= 60 * MINUTE
        user, product = f"u{rng.randrange(8)}", f"p{rng.randrange(6)}"
        clicks.append((user, {"user": user, "product": product, "page": rng.choice(["product", "product", "home"])}, ts))
        if i % 15 == 0:
            orders.append((f"o{i}", {"user": user, "product": product, "amount": 1 + i % 7}, ts + 60_000))
    return products, clicks, orders


def test_a_backlog_through_repartitioned_join_sides_and_a_foreign_key_join_catches_up_promptly(
        runtime_kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    kit = runtime_kit
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_PARTITION", 64)
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_THREAD", 0)
    t = kit.topics(clicks=4, orders=4, products=4, conversions=4, revenue=4)
    products, clicks, orders = data()
    kit.produce(t["products"], products)
    kit.produce(t["clicks"], clicks)
    kit.produce(t["orders"], orders)

    streams = kit.streams(build(t), kit.config("app", **{"buffered.records.per.partition": 10}))
    t0 = time.monotonic()
    streams.start()
    assert streams.wait_until_caught_up(BOUND_S), f"not caught up after {BOUND_S:.0f} s: {streams.metrics()}"
    took = time.monotonic() - t0
    assert took < BOUND_S
    metrics = streams.metrics()
    # the sources, the two join sides, the join results and the subscriptions and responses
    assert metrics["process-total"] > len(clicks) + len(orders) + len(products)

    # every order joined its product's category: the revenue per category is exact
    expected: dict[str, int] = {}
    category = {k: v["category"] for k, v, _ in products}
    for _, o, _ in orders:
        expected[category[o["product"]]] = expected.get(category[o["product"]], 0) + o["amount"]
    assert dict(streams.store("revenue").all()) == expected
    assert streams.close(30)
