"""The shop example pipeline: its generator, its topology on hand-written records, its
dead letters, its declared checks on the whole month, and speed == batch on the sample.

Speed against batch, two ways: the speed layer fed the sample in event-time order equals
the batch layer on every window and key (the batch contract); fed in ARRIVAL order (late
clicks included) it equals the batch layer on every window and key no late click could
touch, and differs on some of those it did touch (the batch value, which counts the
clicks the speed layer dropped, is the correct one).
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pipelines.examples.shop import pipeline, sample
from pipelines.examples.shop.data import CATEGORIES, DAY_MS, START_MS, ShopConfig, generate
from pipelines.examples.shop.topology import (
    CONVERSION_JOIN, DLQ_TOPIC, GRACE, INPUT_TOPICS, SESSION_WINDOWS, STREAMS_CONFIG, VIEW_NAMES, build_topology,
)
from speed_layer import Serdes
from speed_layer.testing import TopologyTestDriver

MIN = 60_000
HOUR = 60 * MIN
T = START_MS + 9 * HOUR  # 2026-01-05T09:00Z
TABLE_TOPICS = {"products"}
WINDOWED = {v: pipeline.windows_of(v) is not None for v in VIEW_NAMES}
#: events of the speed-vs-batch sample (about two days, with some 20 clicks hours late)
SAMPLE_EVENTS = 4_000

View = dict[Any, tuple[Any, int]]


def _driver() -> TopologyTestDriver:
    return TopologyTestDriver(build_topology(), {**STREAMS_CONFIG, "application.id": "shop-test"})


def _read_views(d: TopologyTestDriver) -> dict[str, View]:
    """Each view topic as ``{key or (key, start, end): (value, timestamp)}`` (last record
    per key; a tombstone removes it)."""
    out: dict[str, View] = {}
    for name, windowed in WINDOWED.items():
        topic = d.create_output_topic(name, Serdes.WindowedJSON(Serdes.String()) if windowed else Serdes.String(),
                                      Serdes.JSON())
        rows: View = {}
        for rec in topic.read_records_to_list():
            k = (rec.key.key, rec.key.window.start, rec.key.window.end) if windowed else rec.key
            if rec.value is None:
                rows.pop(k, None)
            else:
                rows[k] = (rec.value, rec.timestamp)
        out[name] = rows
    return out


# ---------------------------------------------------------------------------- generator
def test_the_generator_is_deterministic_in_arrival_order_with_stated_late_clicks() -> None:
    generate.cache_clear()
    started = time.perf_counter()
    data = generate(ShopConfig())
    seconds = time.perf_counter() - started
    generate.cache_clear()
    assert generate(ShopConfig()).events == data.events
    assert generate(ShopConfig(seed=1)).events != data.events

    by_topic = Counter(t for t, _ in data.events)
    assert 50_000 <= len(data.events) <= 100_000 and len(data.events) / seconds > 5_000
    assert by_topic["orders"] > 1_000 and 20 <= by_topic["products"] <= 100
    assert data.arrivals == sorted(data.arrivals)
    end = ShopConfig().end_ms
    assert all(START_MS <= r.timestamp < end for _, r in data.events)
    assert {r.value["category"] for r in data.tables["products"]} == set(CATEGORIES)

    lateness = [a - r.timestamp for (t, r), a in zip(data.events, data.arrivals) if t == "clicks"]
    assert all(x >= 0 for x in lateness)
    assert all(a == r.timestamp for (t, r), a in zip(data.events, data.arrivals) if t != "clicks")
    late = sum(x > 0 for x in lateness) / len(lateness)
    hours_late = sum(x >= HOUR for x in lateness) / len(lateness)
    assert 0.05 <= late <= 0.06 and 0.004 <= hours_late <= 0.006
    out_of_order = sum(b.timestamp < a.timestamp for (_, a), (_, b) in zip(data.events, data.events[1:]))
    assert out_of_order > 1_000

    orders = [r.value for t, r in data.events if t == "orders"]
    placed = {o["order"] for o in orders if o["status"] == "placed"}
    cancelled = [o["order"] for o in orders if o["status"] == "cancelled"]
    assert set(cancelled) <= placed and 0.03 <= len(cancelled) / len(placed) <= 0.07

    limited = sample(100)
    assert limited.events == data.events[:100] and limited.tables == data.tables


def test_the_declaration_derives_windows_and_partitions_cover_the_data() -> None:
    specs = pipeline.view_specs
    assert (specs["browsing_sessions"].window_kind, specs["browsing_sessions"].gap_ms) == ("session", 30 * MIN)
    assert (specs["conversions_hourly"].window_kind, specs["conversions_hourly"].size_ms) == ("tumbling", HOUR)
    assert not specs["revenue_by_category"].windowed
    assert pipeline.archived_topics == ("clicks", "orders", "products", DLQ_TOPIC)
    assert pipeline.partitions.day_range_ms(str(pipeline.partitions.start))[0] == START_MS
    assert pipeline.partitions.end is not None
    days = (pipeline.partitions.end - pipeline.partitions.start).days
    assert START_MS + days * DAY_MS == ShopConfig().end_ms


# ---------------------------------------------------------------------------- topology
def test_each_view_on_hand_written_records() -> None:
    with _driver() as d:
        products = d.create_input_topic("products", Serdes.String(), Serdes.JSON())
        clicks = d.create_input_topic("clicks", Serdes.String(), Serdes.JSON())
        orders = d.create_input_topic("orders", Serdes.String(), Serdes.JSON())

        def click(user: str, page: str, at: int, product: str | None = None) -> None:
            clicks.pipe_input(user, {"user": user, "page": page, "product": product}, at)

        def order(oid: str, user: str, product: str, qty: int, amount: int, at: int, status: str = "placed") -> None:
            orders.pipe_input(oid, {"order": oid, "user": user, "product": product, "quantity": qty,
                                    "amount_cents": amount, "status": status}, at)

        products.pipe_input("p1", {"name": "a book", "category": "books", "price_cents": 1000}, START_MS)
        products.pipe_input("p2", {"name": "a kite", "category": "toys", "price_cents": 500}, START_MS)
        click("u1", "home", T)
        click("u1", "product", T + 1 * MIN, "p1")
        click("u1", "cart", T + 2 * MIN)
        order("o1", "u1", "p1", 2, 2000, T + 10 * MIN)  # 9 min after u1 viewed p1: a conversion
        order("o3", "u2", "p1", 1, 1000, T + 15 * MIN)  # u2 never viewed p1: none
        click("u1", "product", T + 40 * MIN, "p2")  # 38 min after the cart: a second session
        click("u1", "search", T + 20 * MIN)  # 20 min late, within the grace: bridges both sessions
        order("o2", "u1", "p2", 1, 500, T + 80 * MIN)  # 40 min after the view of p2: too late
        order("o3", "u2", "p1", 1, 1000, T + 90 * MIN, status="cancelled")
        products.pipe_input("p2", {"name": "a kite", "category": "games", "price_cents": 450}, T + 100 * MIN)
        click("u3", "home", T + 100 * MIN)  # the clicks' stream time: T + 100 min
        assert d.dropped_records() == 0
        # 95 min late: the session [T, T+40m] it would join closed at T+40m + gap + grace =
        # T+80m (dropped-records); the join still holds o1 (its grace, 12 h, covers the
        # lateness) and joins it: a second conversion of o1 in the window [T, T+1h), whose
        # aggregation has seen nothing newer than T+10m (o2 joined nothing), so it is open
        click("u1", "product", T + 5 * MIN, "p1")
        assert d.dropped_records() == 1
        views = _read_views(d)

    # the two sessions [T, T+2m] and [T+40m] merged by the click at T+20m (their tombstones applied)
    assert views["browsing_sessions"] == {
        ("u1", T, T + 40 * MIN): ({"clicks": 5, "product_views": 2, "cart_views": 1}, T + 40 * MIN),
        ("u3", T + 100 * MIN, T + 100 * MIN): ({"clicks": 1, "product_views": 0, "cart_views": 0}, T + 100 * MIN)}
    # o1 with each of u1's two views of p1 (T+1m, and T+5m arriving 95 min late): Kafka's
    # inner join emits one result per pair, as the batch layer does in event-time order
    assert views["conversions_hourly"] == {
        ("p1", T, T + HOUR): ({"conversions": 2, "units": 4, "amount_cents": 4000, "unit_price_cents": 1000},
                              T + 10 * MIN)}
    # o3 cancelled (subtracted from books), p2 moved to games with o2 (re-joined by the FK join)
    assert {k: v for k, (v, _) in views["revenue_by_category"].items()} == {
        "books": {"orders": 1, "units": 2, "revenue_cents": 2000},
        "toys": {"orders": 0, "units": 0, "revenue_cents": 0},
        "games": {"orders": 1, "units": 1, "revenue_cents": 500},
    }


def test_malformed_records_go_to_the_dead_letter_topic_with_their_reason() -> None:
    bad = [
        ("clicks", b"u1", b"{not json"),
        ("clicks", b"u1", json.dumps({"user": "u1", "page": "checkout"}).encode()),
        ("clicks", b"u1", json.dumps({"user": "u1", "page": "product"}).encode()),
        ("orders", b"o9", json.dumps({"order": "o9", "user": "u1", "product": "p1", "quantity": 0,
                                      "amount_cents": 0, "status": "placed"}).encode()),
        ("orders", b"o9", json.dumps([1, 2]).encode()),
        ("products", b"p9", json.dumps({"name": "x", "price_cents": 100}).encode()),
    ]
    with _driver() as d:
        for i, (topic, key, value) in enumerate(bad):
            d.pipe_raw(topic, key, value, T + i)
        d.pipe_raw("clicks", b"u1", json.dumps({"user": "u1", "page": "home"}).encode(), T + 10)
        dlq = d.create_output_topic(DLQ_TOPIC, Serdes.Bytes(), Serdes.Bytes()).read_records_to_list()
        views = _read_views(d)
    assert [(r.key, r.value) for r in dlq] == [(k, v) for _, k, v in bad]
    for rec, (topic, _, _) in zip(dlq, bad):
        headers = {k: v for k, v in rec.headers}
        assert headers["__streams.errors.topic"] == topic.encode()
        assert headers["__streams.errors.message"]
    assert b"checkout" in dict(dlq[1].headers)["__streams.errors.message"]
    assert [v for v, _ in views["browsing_sessions"].values()] == [{"clicks": 1, "product_views": 0, "cart_views": 0}]


def test_the_declared_checks_pass_on_the_whole_month() -> None:
    """The month in arrival order through the speed layer; every view's declared Great
    Expectations suite (standard checks + field limits + extra expectations) passes."""
    from serving.quality.suite import run_suite

    data = generate(ShopConfig())
    with _driver() as d:
        for r in data.tables["products"]:
            d.pipe_raw("products", r.key.encode(), json.dumps(r.value).encode(), r.timestamp)
        for topic, r in data.events:
            d.pipe_raw(topic, r.key.encode(), json.dumps(r.value).encode(), r.timestamp)
        dropped = d.dropped_records()
        views = _read_views(d)
    assert 0 < dropped < 0.01 * len(data.events)
    assert len(views["browsing_sessions"]) > 10_000 and len(views["conversions_hourly"]) > 500
    assert set(views["revenue_by_category"]) == set(CATEGORIES)
    for name, rows in views.items():
        df = pd.DataFrame(
            [{"key": k[0] if WINDOWED[name] else k, "window_start": k[1] if WINDOWED[name] else None,
              "window_end": k[2] if WINDOWED[name] else None, "value": json.dumps(v), "timestamp": ts}
             for k, (v, ts) in rows.items()])
        result = run_suite(name, df, pipeline.expectations(name))
        assert result.success, (name, [c for c in result.checks if not c.success])


def test_the_highlights_read_the_served_view(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    from pipelines.examples.shop import top_categories

    assert top_categories(tmp_path) is None
    rows = [("books", {"orders": 2, "units": 3, "revenue_cents": 4_500}, "batch"),
            ("toys", {"orders": 1, "units": 1, "revenue_cents": 123_456}, "speed")]
    write_deltalake(str(tmp_path / "serving" / "revenue_by_category"), pd.DataFrame(
        {"key": [k for k, _, _ in rows], "value": [json.dumps(v) for _, v, _ in rows], "timestamp": [T, T],
         "source": [s for _, _, s in rows]}))
    h = top_categories(tmp_path)
    assert h is not None and h.rows == [("toys", "1,234.56", "1", "1", "speed"), ("books", "45.00", "2", "3", "batch")]


# ---------------------------------------------------------------------------- speed vs batch
def _touched(events: list[tuple[str, Any]], arrivals: list[int]) -> dict[str, set[tuple[str, int, int]]]:
    """``{view: {(key, lo, hi)}}``: the time ranges per key a click more than the grace late
    may change. A click arriving at most the grace late cannot be dropped: stream time
    never exceeds the arrival time (every other record arrives on time), and every window
    containing the click ends after it."""
    gap, grace = SESSION_WINDOWS.gap_ms, GRACE.total_seconds() * 1000
    out: dict[str, set[tuple[str, int, int]]] = {v: set() for v in VIEW_NAMES}
    for (topic, r), arrival in zip(events, arrivals):
        if topic == "clicks" and arrival - r.timestamp > grace:
            out["browsing_sessions"].add((r.key, r.timestamp - gap, r.timestamp + gap))
            if r.value["page"] == "product":  # the orders of the product up to 30 min after the view
                out["conversions_hourly"].add((r.value["product"], r.timestamp, r.timestamp + CONVERSION_JOIN.before_ms))
    return out


def _is_touched(view: str, ident: tuple[str, int | None, int | None], touched: dict[str, set]) -> bool:
    key, start, end = ident
    return any(k == key and start <= hi and end >= lo for k, lo, hi in touched[view])


def _speed_views_in_order(raws: list[Any]) -> tuple[dict[str, Any], int]:
    """The kit's view maps (``{(key, start, end): (value JSON text, timestamp)}``) of the
    speed layer fed ``raws`` in THIS order (not sorted)."""
    out: dict[str, Any] = {}
    with _driver() as d:
        for r in raws:
            d.pipe_raw(r.topic, r.key, r.value, r.timestamp)
        for name, windowed in WINDOWED.items():
            topic = d.create_output_topic(name, Serdes.WindowedJSON(Serdes.String()) if windowed else Serdes.String(),
                                          Serdes.Bytes())
            m: dict[Any, tuple[str, int]] = {}
            for rec in topic.read_records_to_list():
                ident = (rec.key.key, rec.key.window.start, rec.key.window.end) if windowed else (rec.key, None, None)
                if rec.value is None:
                    m.pop(ident, None)
                else:
                    m[ident] = (rec.value.decode(), rec.timestamp)
            out[name] = m
        return out, d.dropped_records()


@pytest.mark.spark
def test_batch_equals_speed_on_the_sample(spark: Any, tmp_path: Path, equivalence_kit: Any) -> None:
    kit = equivalence_kit
    Raw, assert_views_equal, batch_views, produce = kit.Raw, kit.assert_views_equal, kit.batch_views, kit.produce
    raw_frames, speed_views, write_raw_batch = kit.raw_frames, kit.speed_views, kit.write_raw_batch

    from batch_layer.run import run_batch

    data = generate(ShopConfig())
    events, arrivals = data.events[:SAMPLE_EVENTS], data.arrivals[:SAMPLE_EVENTS]
    catalogue = data.tables["products"]
    # serialized and partitioned as the loader produces them (the catalogue first)
    by_topic: dict[str, list[Raw]] = {}
    for topic, partitions in INPUT_TOPICS.items():
        records = [(r.key, r.value, r.timestamp) for r in data.tables.get(topic, [])]
        records += [(r.key, r.value, r.timestamp) for t, r in events if t == topic]
        by_topic[topic] = produce(topic, records, partitions)
    raws = [r for rs in by_topic.values() for r in rs]
    produced = {t: iter(rs) for t, rs in by_topic.items()}
    in_arrival = [next(produced["products"]) for _ in catalogue] + [next(produced[t]) for t, _ in events]

    path = write_raw_batch(tmp_path, raws)
    frames, cached = raw_frames(spark, path, INPUT_TOPICS)
    try:
        res = run_batch(spark, build_topology(), tmp_path, views=list(VIEW_NAMES), config=STREAMS_CONFIG,
                        input_frames=frames)
    finally:
        cached.unpersist()
    assert res.dropped == 0
    batch = batch_views(tmp_path, VIEW_NAMES)

    # 1. in event-time order (the batch order): nothing is late, every row equal
    in_order, dropped = speed_views(build_topology(), raws, TABLE_TOPICS, WINDOWED, STREAMS_CONFIG)
    assert dropped == 0
    assert_views_equal(batch, in_order)
    assert len(batch["browsing_sessions"]) > 500 and len(batch["conversions_hourly"]) > 50
    assert len(batch["revenue_by_category"]) == len(CATEGORIES)

    # 2. in arrival order: equal wherever no late click could reach
    arrival_views, late_dropped = _speed_views_in_order(in_arrival)
    touched = _touched(events, arrivals)
    assert late_dropped > 0 and touched["browsing_sessions"] and touched["conversions_hourly"]
    differing = 0
    for name in VIEW_NAMES:
        b, s = batch[name], arrival_views[name]
        kept_b = {k: v for k, v in b.items() if not _is_touched(name, k, touched)}
        kept_s = {k: v for k, v in s.items() if not _is_touched(name, k, touched)}
        assert_views_equal({name: kept_b}, {name: kept_s})
        assert len(kept_b) > 0.9 * len(b)
        differing += sum(1 for k in set(b) | set(s) if b.get(k) != s.get(k))
    assert differing > 0  # the late clicks the speed layer dropped do change some touched windows
