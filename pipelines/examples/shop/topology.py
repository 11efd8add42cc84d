"""The shop pipeline's topology: clicks, orders and a product catalogue into three views.

Sources (all 4 partitions; keys are strings, values JSON, record timestamp = event time in
ms; :mod:`pipelines.examples.shop.data` describes the records):

* ``clicks``: KStream keyed by user; ``orders``: KStream keyed by order (an order, then
  possibly its cancellation: the same key with ``status`` ``"cancelled"``);
  ``products``: KTable keyed by product.

Views (each a store written by an aggregation and the topic of the same name):

1. ``browsing_sessions``, a session window: clicks grouped by user into sessions with a
   30-min inactivity gap (Kafka's ``SessionWindows``: a click within the gap of a session
   extends it, one bridging two sessions merges them; the topic gets a tombstone for each
   merged-away session).
2. ``conversions_hourly``, a stream-stream join then a tumbling window: each placed order
   joined with every view of the same product by the same user in the 30 min before the
   order (``JoinWindows`` before 30 min, after 0, grace 12 h; both streams re-keyed by
   ``user|product``, so both are repartitioned), re-keyed by product, counted per 1-h window
   of the result's timestamp (the order's time: a join result takes the larger timestamp of
   its two records).
3. ``revenue_by_category``, a foreign-key table-table join then a KGroupedTable aggregation:
   the orders as a table (``toTable``: the latest record per order) without the cancelled
   ones (a table filter: a cancellation deletes the row), joined with ``products`` by the
   order's product id (KIP-213: a product's category change re-joins every order of it),
   re-grouped by category and summed with an adder and a subtractor (Kafka's
   ``KGroupedTable.aggregate``: a row leaving a category is subtracted from it). Not
   windowed: the current totals, a count back at 0 stays as 0.

Lateness, by Kafka's rules on each processor's stream time (10 min of grace for the
windows): a session closes at its end + gap + grace, an hourly window at its end + grace. A
click at most 10 min late is never dropped; a later one may be (``dropped-records``, with
the window it missed) and the batch layer, which reads in event-time order, counts it. The
join keeps a record for before + after + its grace (12 h 30 min): a record its window store
drops as expired (Kafka's ``expired-window-record-drop``) loses its join results without a
trace the agreement report could follow to a view's window, so the join's grace covers the
data's lateness and a late click's join result reaches the hourly aggregation, which drops
it as late and names its window. A record whose value cannot be parsed or lacks a field the pipeline
reads goes to the dead-letter topic ``shop-dlq``, with the reason in its headers.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from speed_layer import (
    Consumed, Grouped, JoinWindows, Materialized, Produced, Serde, Serdes, SessionWindows, StreamJoined,
    StreamsBuilder, TimeWindows, Topology,
)

__all__ = [
    "DLQ_TOPIC", "STREAMS_CONFIG", "INPUT_TOPICS", "VIEW_NAMES", "PAGES", "GRACE", "JOIN_GRACE", "SESSION_WINDOWS", "CONVERSION_JOIN",
    "CONVERSION_WINDOWS", "CLICK_SERDE", "ORDER_SERDE", "PRODUCT_SERDE", "build_topology",
]

DLQ_TOPIC = "shop-dlq"
#: source topic -> partitions (the joined streams must be co-partitioned)
INPUT_TOPICS: dict[str, int] = {"clicks": 4, "orders": 4, "products": 4}
#: the view (= store = output topic) names, in declaration order
VIEW_NAMES: tuple[str, ...] = ("browsing_sessions", "conversions_hourly", "revenue_by_category")
PAGES: frozenset[str] = frozenset({"home", "search", "category", "product", "cart"})
GRACE = timedelta(minutes=10)
SESSION_WINDOWS = SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=30), GRACE)
#: how long the join keeps a record beyond its window: longer than any click is late (the
#: generator's latest are 6 h late), so no record is lost in the join's stores; a late join
#: result is then dropped, and reported with its window, by the hourly aggregation
JOIN_GRACE = timedelta(hours=12)
#: an order (this side, at t) joins the product views (other side) in [t - 30 min, t]
CONVERSION_JOIN = JoinWindows.of_time_difference_and_grace(timedelta(minutes=30), JOIN_GRACE).after(0)
CONVERSION_WINDOWS = TimeWindows.of_size_and_grace(timedelta(hours=1), GRACE)

#: Streams config of the pipeline (merged with the caller's application id and brokers)
STREAMS_CONFIG: dict[str, Any] = {
    "deserialization.exception.handler": "dead_letter",
    "processing.exception.handler": "dead_letter",
    "errors.dead.letter.queue.topic.name": DLQ_TOPIC,
}

_json = Serdes.JSON()


def _checked_json(name: str, check: Callable[[dict[str, Any]], str | None]) -> Serde[Any]:
    """A JSON serde whose reader raises ``ValueError`` (-> the DLQ) on a value that is not
    an object or that ``check`` rejects (it returns the reason)."""
    def read(data: bytes) -> dict[str, Any]:
        value = _json.deserializer(data)
        if not isinstance(value, dict):
            raise ValueError(f"a {name} must be a JSON object, got {type(value).__name__}")
        reason = check(value)
        if reason:
            raise ValueError(f"{name}: {reason}")
        return value

    return Serde(name, _json.serializer, read)


def _is_str(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def _is_count(v: Any, least: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def _check_click(v: dict[str, Any]) -> str | None:
    if not _is_str(v.get("user")):
        return "no user"
    if v.get("page") not in PAGES:
        return f"page {v.get('page')!r} is not one of {sorted(PAGES)}"
    if v["page"] == "product" and not _is_str(v.get("product")):
        return "a product page without a product"
    return None


def _check_order(v: dict[str, Any]) -> str | None:
    missing = [f for f in ("user", "product") if not _is_str(v.get(f))]
    if missing:
        return f"lacks {missing}"
    if not _is_count(v.get("quantity"), 1) or not _is_count(v.get("amount_cents"), 0):
        return "quantity must be an integer >= 1 and amount_cents an integer >= 0"
    if v.get("status") not in ("placed", "cancelled"):
        return f"status {v.get('status')!r} is not 'placed' or 'cancelled'"
    return None


def _check_product(v: dict[str, Any]) -> str | None:
    if not _is_str(v.get("category")) or not _is_count(v.get("price_cents"), 1):
        return "needs a category and an integer price_cents >= 1"
    return None


CLICK_SERDE: Serde[Any] = _checked_json("Click", _check_click)
ORDER_SERDE: Serde[Any] = _checked_json("Order", _check_order)
PRODUCT_SERDE: Serde[Any] = _checked_json("Product", _check_product)


# ---------------------------------------------------------------- sessions
def session_init() -> dict[str, int]:
    """A ``browsing_sessions`` value: clicks of the session, of which product pages and
    cart pages (counts); the window is ``[first click, last click]`` in ms."""
    return {"clicks": 0, "product_views": 0, "cart_views": 0}


def session_add(user: str, click: dict[str, Any], agg: dict[str, int]) -> dict[str, int]:
    return {"clicks": agg["clicks"] + 1, "product_views": agg["product_views"] + (click["page"] == "product"),
            "cart_views": agg["cart_views"] + (click["page"] == "cart")}


def session_merge(user: str, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Two sessions bridged by a click: the sums."""
    return {k: a[k] + b[k] for k in a}


# ---------------------------------------------------------------- conversions
def is_product_view(user: str, click: dict[str, Any]) -> bool:
    """A click on a product page."""
    return click["page"] == "product"


def is_placed(key: str, order: dict[str, Any]) -> bool:
    """An order record that is not a cancellation."""
    return order["status"] == "placed"


def user_product(key: str, value: dict[str, Any]) -> str:
    """The join key of clicks and orders: ``"<user>|<product>"``."""
    return f"{value['user']}|{value['product']}"


def attribute(order: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    """The join result: the order (its product, quantity, amount)."""
    return {"product": order["product"], "quantity": order["quantity"], "amount_cents": order["amount_cents"]}


def conversions_init() -> dict[str, int]:
    """A ``conversions_hourly`` value: (order, view) pairs, their units, their amount and
    mean unit price (cents, rounded)."""
    return {"conversions": 0, "units": 0, "amount_cents": 0, "unit_price_cents": 0}


def conversions_add(product: str, c: dict[str, Any], agg: dict[str, int]) -> dict[str, int]:
    units, amount = agg["units"] + c["quantity"], agg["amount_cents"] + c["amount_cents"]
    return {"conversions": agg["conversions"] + 1, "units": units, "amount_cents": amount,
            "unit_price_cents": round(amount / units)}


# ---------------------------------------------------------------- revenue by category
def with_category(order: dict[str, Any], product: dict[str, Any]) -> dict[str, Any]:
    """The FK join result: the order's units and amount (cents, at the order's price) under
    its product's current category."""
    return {"category": product["category"], "quantity": order["quantity"], "amount_cents": order["amount_cents"]}


def revenue_init() -> dict[str, int]:
    """A ``revenue_by_category`` value: orders not cancelled, their units and amount (cents)."""
    return {"orders": 0, "units": 0, "revenue_cents": 0}


def revenue_add(category: str, row: dict[str, Any], agg: dict[str, int]) -> dict[str, int]:
    return {"orders": agg["orders"] + 1, "units": agg["units"] + row["quantity"],
            "revenue_cents": agg["revenue_cents"] + row["amount_cents"]}


def revenue_subtract(category: str, row: dict[str, Any], agg: dict[str, int]) -> dict[str, int]:
    return {"orders": agg["orders"] - 1, "units": agg["units"] - row["quantity"],
            "revenue_cents": agg["revenue_cents"] - row["amount_cents"]}


def build_topology() -> Topology:
    """The shop Topology: three sources, two repartitioned join sides, three views."""
    b = StreamsBuilder()
    text = Serdes.String()
    clicks = b.stream("clicks", Consumed(key_serde=text, value_serde=CLICK_SERDE))
    orders = b.stream("orders", Consumed(key_serde=text, value_serde=ORDER_SERDE))
    products = b.table("products", Consumed(key_serde=text, value_serde=PRODUCT_SERDE), Materialized.as_("products-store"))
    windowed_out = Produced(key_serde=Serdes.WindowedJSON(text), value_serde=_json)

    def view_store(name: str) -> Materialized:
        # keep the month's windows queryable in the speed layer (interactive queries)
        return Materialized.as_(name).with_retention(timedelta(days=60))

    (clicks.group_by_key()
     .windowed_by(SESSION_WINDOWS)
     .aggregate(session_init, session_add, session_merge, view_store("browsing_sessions"))
     .to_stream().to("browsing_sessions", windowed_out))

    views = clicks.filter(is_product_view).select_key(user_product)
    (orders.filter(is_placed).select_key(user_product)
     .join(views, attribute, CONVERSION_JOIN, StreamJoined(name="conversions", store_name="conversions"))
     .select_key(lambda key, c: c["product"])
     .group_by_key(Grouped.as_("conversions-by-product"))
     .windowed_by(CONVERSION_WINDOWS)
     .aggregate(conversions_init, conversions_add, view_store("conversions_hourly"))
     .to_stream().to("conversions_hourly", windowed_out))

    open_orders = orders.to_table("orders-table", Materialized.as_("orders-store")).filter(is_placed)
    (open_orders.join(products, lambda order: order["product"], with_category)
     .group_by(lambda order_id, row: (row["category"], row), Grouped.as_("orders-by-category"))
     .aggregate(revenue_init, revenue_add, revenue_subtract, Materialized.as_("revenue_by_category"))
     .to_stream().to("revenue_by_category", Produced(key_serde=text, value_serde=_json)))
    return b.build()
