"""A synthetic web shop as Kafka source records: deterministic given a seed, pure numpy.

Topics (keys and values as :mod:`pipelines.examples.shop.topology` reads them; every
timestamp is epoch ms, the record timestamp is the EVENT time):

* ``products`` (KTable, key ``p0001``..): ``{"name", "category", "price_cents"}``. The
  catalogue is a table record at :data:`START_MS`; catalogue changes (a product moved to
  another category, or repriced) are events during the month.
* ``clicks`` (KStream, key user ``u0001``..): ``{"user", "page", "product"}``; ``product``
  is set on ``"product"`` pages only.
* ``orders`` (KStream, key order ``o000001``..): ``{"order", "user", "product",
  "quantity", "amount_cents", "status"}`` with ``status`` ``"placed"``; a cancellation is a
  second record of the same order with ``status`` ``"cancelled"``.

Distributions (the defaults of :class:`ShopConfig`):

* Users: ``users`` = 2,500. Each has a browsing rate, sessions per day ~ Gamma(shape 2,
  mean 0.2); its sessions are a Poisson process of that rate over ``days`` = 30 days from
  2026-01-05T00:00Z, modulated by a diurnal cycle: intensity ``1 + 0.8 cos(2 pi (h - 20) /
  24)`` (peak 20:00 UTC, trough 08:00, 9x apart).
* A session: Geometric(p 0.25) clicks on 1, 2, .. (mean 4); think times between clicks ~
  Exponential(mean 45 s) capped at 20 min (so a visit is one 30-min session); the first page
  is home / search / product (0.4 / 0.3 / 0.3), the next ones product / search / category
  / cart (0.55 / 0.2 / 0.15 / 0.1).
* Products: ``products`` = 400, in 8 categories (uniform); prices ~ LogNormal(median
  25.00 EUR, sigma 0.9) in cents, clipped to [100, 200000]; popularity Zipf (weight
  ``1 / rank ** 1.1``) for every product page viewed.
* Orders: a session with a product view ends with an order with probability 0.15, placed
  Exponential(mean 4 min) after its last click (capped at 25 min); the product is one of the
  products viewed in the session (90 %) or a Zipf draw (10 %, an order not preceded by a
  view); quantity 1 + Poisson(0.4); ``amount_cents`` = quantity x the catalogue price at
  that time. 5 % of orders are cancelled Exponential(mean 6 h) later.
* Catalogue changes: Poisson, 2 a day; a Zipf-drawn product; half move it to another
  category, half reprice it by a factor Uniform(0.7, 1.3) (clipped as above).
* Late and out-of-order arrivals (clicks only; orders and catalogue changes arrive when
  they happen): 5 % of clicks arrive Exponential(mean 2 min) late (out of order, mostly
  within the topology's 10-min grace), 0.5 % arrive Uniform(1 h, 6 h) late (beyond any
  grace: the speed layer drops them as late, the batch layer counts them).

:func:`generate` returns the products table and the events in ARRIVAL order (the order a
producer sends them in), each with its event-time timestamp; events whose event time is
after the last day are not generated. The default size is about 61,000 events (59,400
clicks, 1,720 orders, 70 cancellations, 50 catalogue changes), generated in about 0.5 s.
"""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

import numpy as np

from pipelines.declaration.pipeline import SourceRecord

__all__ = ["ShopConfig", "ShopData", "START", "START_MS", "DAY_MS", "CATEGORIES", "generate", "shop_data"]

START = date(2026, 1, 5)
#: 2026-01-05T00:00Z: the catalogue's timestamp and the start of the first day
START_MS = int(datetime(START.year, START.month, START.day, tzinfo=timezone.utc).timestamp() * 1000)
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
CATEGORIES: tuple[str, ...] = ("books", "electronics", "home", "garden", "toys", "fashion", "sports", "beauty")
MIN_PRICE_CENTS, MAX_PRICE_CENTS = 100, 200_000
_FIRST_PAGES = (("home", "search", "product"), (0.4, 0.3, 0.3))
_NEXT_PAGES = (("product", "search", "category", "cart"), (0.55, 0.2, 0.15, 0.1))


@dataclass(frozen=True)
class ShopConfig:
    """The generator's parameters (see the module docstring for what each one drives)."""

    seed: int = 2026
    users: int = 2_500
    products: int = 400
    days: int = 30
    sessions_per_user_day: float = 0.2
    order_probability: float = 0.15
    cancel_probability: float = 0.05
    catalogue_changes_per_day: float = 2.0
    delayed_fraction: float = 0.05
    delayed_mean_ms: int = 2 * MINUTE_MS
    very_late_fraction: float = 0.005
    very_late_ms: tuple[int, int] = (1 * HOUR_MS, 6 * HOUR_MS)

    @property
    def end_ms(self) -> int:
        """The end of the last day (exclusive), ms."""
        return START_MS + self.days * DAY_MS


@dataclass(frozen=True)
class ShopData:
    """``tables``: the catalogue (``{"products": records}``); ``events``: ``(topic, record)``
    in arrival order; ``arrivals``: the arrival time (ms) of each event, aligned with
    ``events`` (the record timestamp is the event time; ``arrival - timestamp`` is how late
    a click is)."""

    tables: dict[str, list[SourceRecord]]
    events: list[tuple[str, SourceRecord]]
    arrivals: list[int]


def _price(x: float) -> int:
    return int(min(MAX_PRICE_CENTS, max(MIN_PRICE_CENTS, round(x))))


def _session_starts(rng: np.random.Generator, cfg: ShopConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(user index, start ms)`` of every session, sorted by start: per user a Poisson
    number of sessions, placed by thinning against the diurnal intensity."""
    rate = rng.gamma(2.0, cfg.sessions_per_user_day / 2.0, cfg.users)
    counts = rng.poisson(rate * cfg.days)
    users = np.repeat(np.arange(cfg.users), counts)
    n = len(users)
    starts = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while len(todo):  # accept t with probability intensity(t) / max intensity
        t = rng.integers(0, cfg.days * DAY_MS, len(todo))
        hour = (t % DAY_MS) / HOUR_MS
        keep = rng.random(len(todo)) * 1.8 < 1 + 0.8 * np.cos(2 * np.pi * (hour - 20) / 24)
        starts[todo[keep]] = START_MS + t[keep]
        todo = todo[~keep]
    order = np.argsort(starts, kind="stable")
    return users[order], starts[order]


@functools.lru_cache(maxsize=4)
def generate(cfg: ShopConfig = ShopConfig()) -> ShopData:
    """The shop's records for ``cfg`` (cached: the same config gives the same object)."""
    rng = np.random.default_rng(cfg.seed)
    pids = [f"p{i + 1:04d}" for i in range(cfg.products)]
    category = [CATEGORIES[i] for i in rng.integers(0, len(CATEGORIES), cfg.products)]
    price = [_price(x) for x in rng.lognormal(np.log(2_500), 0.9, cfg.products)]
    popularity = 1.0 / np.arange(1, cfg.products + 1) ** 1.1
    popularity = popularity[rng.permutation(cfg.products)]
    popularity /= popularity.sum()
    catalogue = [SourceRecord(p, {"name": f"product {p}", "category": c, "price_cents": pr}, START_MS)
                 for p, c, pr in zip(pids, category, price)]

    # catalogue changes, Poisson in time; each product's history of (from ms, price) for the orders
    n_changes = int(rng.poisson(cfg.catalogue_changes_per_day * cfg.days))
    change_ts = np.sort(START_MS + rng.integers(HOUR_MS, cfg.days * DAY_MS, n_changes))
    change_pid = rng.choice(cfg.products, n_changes, p=popularity)
    recategorize = rng.random(n_changes) < 0.5
    change_cat = rng.integers(1, len(CATEGORIES), n_changes)
    change_factor = rng.uniform(0.7, 1.3, n_changes)
    history: list[list[tuple[int, int]]] = [[(START_MS, pr)] for pr in price]
    categories = list(category)
    # (arrival, event ts, seq, topic, key, value); seq keeps the generation order of ties
    rows: list[tuple[int, int, int, str, str, dict[str, Any]]] = []
    for i in range(n_changes):
        p, ts = int(change_pid[i]), int(change_ts[i])
        if recategorize[i]:
            categories[p] = CATEGORIES[(CATEGORIES.index(categories[p]) + int(change_cat[i])) % len(CATEGORIES)]
        else:
            history[p].append((ts, _price(history[p][-1][1] * change_factor[i])))
        value = {"name": f"product {pids[p]}", "category": categories[p], "price_cents": history[p][-1][1]}
        rows.append((ts, ts, i, "products", pids[p], value))

    users, starts = _session_starts(rng, cfg)
    n = len(users)
    lengths = rng.geometric(0.25, n)
    total = int(lengths.sum())
    think = np.minimum(rng.exponential(45_000, total), 20 * MINUTE_MS).astype(np.int64)
    first_page = rng.choice(len(_FIRST_PAGES[0]), total, p=_FIRST_PAGES[1])
    next_page = rng.choice(len(_NEXT_PAGES[0]), total, p=_NEXT_PAGES[1])
    product_of = rng.choice(cfg.products, total, p=popularity)
    delay = np.zeros(total, dtype=np.int64)
    u = rng.random(total)
    mild = u < cfg.delayed_fraction
    late = (u >= cfg.delayed_fraction) & (u < cfg.delayed_fraction + cfg.very_late_fraction)
    delay[mild] = rng.exponential(cfg.delayed_mean_ms, int(mild.sum())).astype(np.int64)
    delay[late] = rng.integers(cfg.very_late_ms[0], cfg.very_late_ms[1], int(late.sum()))
    ordered = rng.random(n) < cfg.order_probability
    order_gap = np.minimum(rng.exponential(4 * MINUTE_MS, n), 25 * MINUTE_MS).astype(np.int64)
    from_view = rng.random(n) < 0.9
    pick = rng.random(n)
    zipf_product = rng.choice(cfg.products, n, p=popularity)
    quantity = 1 + rng.poisson(0.4, n)
    cancelled = rng.random(n) < cfg.cancel_probability
    cancel_after = rng.exponential(6 * HOUR_MS, n).astype(np.int64)

    end = cfg.end_ms
    n_orders = 0
    c = 0  # next click draw
    seq = n_changes
    for s in range(n):
        user = f"u{users[s] + 1:04d}"
        t = int(starts[s])
        viewed: list[int] = []
        for j in range(int(lengths[s])):
            if j:
                t += int(think[c])
            page = (_FIRST_PAGES[0][first_page[c]] if j == 0 else _NEXT_PAGES[0][next_page[c]])
            product = None
            if page == "product":
                viewed.append(int(product_of[c]))
                product = pids[product_of[c]]
            if t < end:
                rows.append((t + int(delay[c]), t, seq, "clicks", user, {"user": user, "page": page, "product": product}))
                seq += 1
            c += 1
        if not (viewed and ordered[s]):
            continue
        t += int(order_gap[s])
        if t >= end:
            continue
        p = viewed[int(pick[s] * len(viewed))] if from_view[s] else int(zipf_product[s])
        n_orders += 1
        oid = f"o{n_orders:06d}"
        hist = history[p]
        unit = hist[bisect.bisect_right(hist, (t, MAX_PRICE_CENTS + 1)) - 1][1]  # the price in force at t
        order = {"order": oid, "user": user, "product": pids[p], "quantity": int(quantity[s]),
                 "amount_cents": int(quantity[s]) * unit, "status": "placed"}
        rows.append((t, t, seq, "orders", oid, order))
        seq += 1
        tc = t + int(cancel_after[s])
        if cancelled[s] and tc < end:
            rows.append((tc, tc, seq, "orders", oid, {**order, "status": "cancelled"}))
            seq += 1
    rows.sort(key=lambda r: (r[0], r[2]))
    return ShopData(tables={"products": catalogue},
                    events=[(topic, SourceRecord(key, value, ts)) for _, ts, _, topic, key, value in rows],
                    arrivals=[r[0] for r in rows])


def shop_data(seed: int = ShopConfig.seed) -> ShopData:
    """The default-size shop for ``seed``."""
    return generate(ShopConfig(seed=seed))
