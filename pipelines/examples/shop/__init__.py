"""A web shop, declared: clicks, orders and a product catalogue (synthetic, seeded).

``duet run --pipeline pipelines.examples.shop:pipeline`` runs it. Of another shape than the
flights: a stream-stream join (orders attributed to product views), a session window
(browsing sessions) and a foreign-key table-table join feeding a KGroupedTable aggregation
(revenue per category, a plain table view). The topology is
:mod:`pipelines.examples.shop.topology`, the generator :mod:`pipelines.examples.shop.data`.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pipelines.examples.shop.data import MAX_PRICE_CENTS, MIN_PRICE_CENTS, START, ShopConfig
from pipelines.examples.shop.topology import DLQ_TOPIC, INPUT_TOPICS, STREAMS_CONFIG, build_topology
from pipelines.declaration.pipeline import Highlights, Partitioning, Pipeline, Sample, Source, View

__all__ = ["pipeline", "sample", "top_categories"]


def sample(limit: int | None = None) -> Sample:
    """The catalogue, then the first ``limit`` events in arrival order (late clicks
    included) of the default shop (:mod:`pipelines.examples.shop.data`)."""
    from pipelines.examples.shop.data import generate

    data = generate(ShopConfig())
    return Sample(tables=data.tables, events=data.events[:limit] if limit is not None else data.events)


def top_categories(lake: Path | str, n: int = 8) -> Highlights | None:
    """The ``n`` categories with the most revenue in the served ``revenue_by_category``;
    ``None`` before it is published."""
    import json

    from batch_layer.delta.io import table_exists
    from batch_layer.delta.layout import LakeLayout
    from batch_layer.delta.storage import delta_uri, storage_options
    from deltalake import DeltaTable

    path = LakeLayout(lake).serving_view("revenue_by_category")
    if not table_exists(path):
        return None
    df = DeltaTable(delta_uri(path), storage_options=storage_options(path)).to_pandas()
    rows = []
    for key, value, source in zip(df["key"], df["value"], df["source"]):
        v = json.loads(value)
        rows.append((int(v["revenue_cents"]), str(key), int(v["orders"]), int(v["units"]), str(source)))
    rows.sort(key=lambda r: (-r[0], r[1]))
    return Highlights(
        title=f"top {n} categories by revenue (merged revenue_by_category)",
        columns=("category", "revenue (EUR)", "orders", "units", "source"),
        rows=[(cat, f"{cents / 100:,.2f}", str(o), str(u), src) for cents, cat, o, u, src in rows[:n]],
    )


_DAYS = ShopConfig().days
pipeline = Pipeline(
    name="shop",
    description="A synthetic web shop (30 days, 2,500 users, 400 products): browsing sessions, orders attributed "
    "to product views (stream-stream join) per hour, revenue per category (foreign-key join + table aggregation).",
    topology=build_topology,
    config=STREAMS_CONFIG,
    sources=[
        Source(topic="clicks", partitions=INPUT_TOPICS["clicks"], description="page views, key user, timestamp = "
               "event time; 5 % arrive a few minutes late, 0.5 % hours late"),
        Source(topic="orders", partitions=INPUT_TOPICS["orders"], description="orders and their cancellations, key "
               "order id, timestamp = event time"),
        Source(topic="products", partitions=INPUT_TOPICS["products"], kind="table", description="the catalogue by "
               "product id: category, price in cents"),
    ],
    dead_letter_topic=DLQ_TOPIC,
    views=[
        # a session holds at least its first click; product and cart views are clicks
        View(store="browsing_sessions", description="per user, sessions with a 30 min inactivity gap, grace 10 min: "
             "clicks, product views, cart views",
             fields={"clicks": (1, None), "product_views": (0, None), "cart_views": (0, None)},
             expectations=[("expect_column_pair_values_a_to_be_greater_than_b",
                            {"column_A": "value.clicks", "column_B": "value.product_views", "or_equal": True})]),
        # every unit is sold at a catalogue price, which the generator keeps in [1.00, 2000.00] EUR
        View(store="conversions_hourly", description="per product, tumbling 1 h (order time), grace 10 min: orders "
             "placed within 30 min after a view of the product by the same user, one per (order, view) pair: "
             "conversions, units, amount_cents, unit_price_cents",
             fields={"conversions": (1, None), "units": (1, None), "amount_cents": (MIN_PRICE_CENTS, None),
                     "unit_price_cents": (MIN_PRICE_CENTS, MAX_PRICE_CENTS)},
             expectations=[("expect_column_pair_values_a_to_be_greater_than_b",
                            {"column_A": "value.units", "column_B": "value.conversions", "or_equal": True})]),
        # totals of the orders not cancelled; a category whose orders all left it stays at 0
        View(store="revenue_by_category", description="per category (its products' current category), not windowed: "
             "orders not cancelled, units, revenue_cents",
             fields={"orders": (0, None), "units": (0, None), "revenue_cents": (0, None)},
             expectations=[("expect_column_pair_values_a_to_be_greater_than_b",
                            {"column_A": "value.units", "column_B": "value.orders", "or_equal": True})]),
    ],
    partitions=Partitioning(start=START, end=START + timedelta(days=_DAYS)),
    sample=sample,
    highlights=top_categories,
)
