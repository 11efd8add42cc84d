"""The general executor (``batch_layer.general``) against the TopologyTestDriver fed the same
records in event-time order: topologies the relational translations do not cover.

Each scenario writes raw Delta tables, runs ``compile_topology(..., outputs=True)`` on the
shared Spark session, and compares every requested store (as view rows) and every output
topic (per key, in order) with the driver. The driver runs the topology as batch does
(``full_history``: window and session stores never expire), so stores hold every window.
"""
from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from batch_layer.compiler import BatchOptions, compile_topology
from batch_layer.general import full_history, store_rows
from speed_layer import (
    BufferConfig, JoinWindows, Materialized, Serdes, SlidingWindows, StreamsBuilder, Suppressed, TimeWindows,
)
from speed_layer.processor.api import Processor, PunctuationType, Record
from speed_layer.state.factories import Stores
from speed_layer.testing import TopologyTestDriver
from speed_layer.topology import Topology

sys.path.insert(0, str(Path(__file__).parents[1] / "test_equivalence"))
from equivalence_kit import Raw, batch_order, produce, write_raw  # noqa: E402

pytestmark = pytest.mark.spark
# user Processor classes travel to Spark's Python workers by value (a test module is not
# importable there; a user's own package would be)
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
MS = timedelta(milliseconds=1)
CONFIG = {"application.id": "general"}


def run_both(spark: Any, lake: Path, topology: Topology, raws: list[Raw], table_topics: set[str],
             config: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """``(batch, driver, views)``: each ``{"stores": {store: rows}, "topics": {topic: {key: [(value, ts)]}}}``."""
    cfg = {**CONFIG, **(config or {})}
    write_raw(lake, raws)
    plan = compile_topology(topology, config=cfg, outputs=True)
    assert plan.executor == "general"
    views = plan.execute(spark, lake)
    batch_stores = {s: sorted(tuple(r) for r in df.collect()) for s, df in views.items()}
    batch_topics: dict[str, dict[Any, list[Any]]] = {}
    for t, df in views.topics.items():
        per_key: dict[Any, list[Any]] = {}
        for r in df.orderBy("partition", "offset").collect():
            per_key.setdefault(None if r.key is None else bytes(r.key), []).append((None if r.value is None else bytes(r.value), r.timestamp))
        batch_topics[t] = per_key
    driver_stores: dict[str, Any] = {}
    driver_topics: dict[str, dict[Any, list[Any]]] = {}
    with TopologyTestDriver(full_history(topology), cfg) as d:
        for r in batch_order(raws, table_topics):
            d.pipe_raw(r.topic, r.key, r.value, r.timestamp)
        for s in views:
            driver_stores[s] = sorted(store_rows(d.get_state_store(s)))
        for t in d.produced_topic_names():
            per_key = {}
            for rec in d.create_output_topic(t, Serdes.Bytes(), Serdes.Bytes()).read_records_to_list():
                per_key.setdefault(rec.key, []).append((rec.value, rec.timestamp))
            driver_topics[t] = per_key
    return {"stores": batch_stores, "topics": batch_topics}, {"stores": driver_stores, "topics": driver_topics}, views


def fk_topology() -> Topology:
    """A foreign-key join (KIP-213): its subscription and response topics make two
    sub-topologies that feed each other."""
    b = StreamsBuilder()
    orders = b.table("orders", materialized=Materialized.as_("orders-store"))
    customers = b.table("customers", materialized=Materialized.as_("customers-store"))
    joined = orders.left_join(customers, lambda o: o["customer"], lambda o, c: {"order": o["n"], "tier": c and c["tier"]},
                              materialized=Materialized.as_("order-tiers").with_caching_disabled())
    joined.to_stream().to("order-tiers")
    return b.build()


def test_foreign_key_join_runs_its_two_sub_topologies_to_a_fixed_point(spark, tmp_path: Path) -> None:
    orders = [("o1", {"n": 1, "customer": "c1"}, 10), ("o2", {"n": 2, "customer": "c2"}, 11),
              ("o3", {"n": 3, "customer": "c1"}, 20), ("o1", {"n": 1, "customer": "c2"}, 30), ("o2", None, 40)]
    customers = [("c1", {"tier": "gold"}, 5), ("c2", {"tier": "silver"}, 15), ("c1", {"tier": "bronze"}, 25), ("c2", None, 35)]
    raws = produce("orders", orders, 3) + produce("customers", customers, 2)
    topology = fk_topology()
    plan = compile_topology(topology, config=CONFIG, outputs=True)  # the FK join alone is relational too
    assert any(g.cyclic for g in plan.groups), plan.explain()
    batch, driver, _ = run_both(spark, tmp_path, topology, raws, {"orders", "customers"})
    assert batch["stores"]["order-tiers"] == driver["stores"]["order-tiers"]
    assert batch["topics"]["order-tiers"] == driver["topics"]["order-tiers"]
    assert {r[0]: r[3] for r in batch["stores"]["order-tiers"]} == {"o1": '{"order":1,"tier":null}',
                                                                     "o3": '{"order":3,"tier":"bronze"}'}


class _RunningTotal(Processor):
    """Keeps a running total per key in store ``totals``; forwards each new total, and every
    10 ms of stream time forwards the number of keys seen (key ``"#keys"``)."""

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store("totals")
        context.schedule(10, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record: Record) -> None:
        total = (self.store.get(record.key) or 0) + record.value["amount"]
        self.store.put(record.key, total)
        self.context.forward(record.with_value(total))

    def punctuate(self, timestamp: int) -> None:
        self.context.forward(Record("#keys", sum(1 for _ in self.store.all()), timestamp))


def test_processor_api_with_a_store_and_stream_time_punctuation_after_a_repartition(spark, tmp_path: Path) -> None:
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store("totals", Serdes.String(), Serdes.JSON()))
    (b.stream("payments").select_key(lambda k, v: v["account"]).repartition()
     .process(_RunningTotal, "totals").to("totals-out"))
    topology = b.build()
    records = [(f"p{i}", {"account": f"a{i % 4}", "amount": i}, 3 * i) for i in range(40)]
    raws = produce("payments", records, 3)
    batch, driver, _ = run_both(spark, tmp_path, topology, raws, set())
    assert batch["stores"]["totals"] == driver["stores"]["totals"] and len(batch["stores"]["totals"]) == 4
    # repartitioned into 3 partitions: per-task stream time fires the punctuations per
    # task, so the "#keys" records differ from the driver's (one shared stream time);
    # every running total is the same
    for key in (b"a0", b"a1", b"a2", b"a3"):
        assert batch["topics"]["totals-out"][key] == driver["topics"]["totals-out"][key]
    assert b"#keys" in batch["topics"]["totals-out"]


def test_suppress_sliding_windows_and_stream_stream_outer_join_on_one_partition(spark, tmp_path: Path) -> None:
    b = StreamsBuilder()
    clicks, views_ = b.stream("clicks"), b.stream("page-views")
    (clicks.group_by_key().windowed_by(TimeWindows.of_size_and_grace(timedelta(milliseconds=10), 5 * MS))
     .count(Materialized.as_("clicks-10ms"))
     .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
     .to_stream().map(lambda wk, n: (f"{wk.key}@{wk.window.start}", n)).to("final-counts"))
    clicks.group_by_key().windowed_by(SlidingWindows.of_time_difference_and_grace(timedelta(milliseconds=6), 100 * MS)) \
        .reduce(lambda a, c: {"n": a["n"] + c["n"]}, Materialized.as_("sliding-sum"))
    clicks.outer_join(views_, lambda c, v: {"c": c and c["n"], "v": v and v["n"]},
                      JoinWindows.of_time_difference_and_grace(timedelta(milliseconds=3), 2 * MS)).to("click-views")
    topology = b.build()
    clicks_in = [(f"u{i % 3}", {"n": i}, i * 2) for i in range(30)] + [("u0", {"n": 99}, 61)]
    views_in = [(f"u{i % 2}", {"n": 100 + i}, i * 5 + 1) for i in range(12)]
    raws = produce("clicks", clicks_in, 1) + produce("page-views", views_in, 1)
    batch, driver, _ = run_both(spark, tmp_path, topology, raws, set())
    assert batch["stores"] == driver["stores"]
    assert batch["topics"] == driver["topics"]
    assert len(batch["topics"]["final-counts"]) > 5 and sum(map(len, batch["topics"]["click-views"].values())) > 10


def test_dead_letters_go_to_the_dead_letter_topic_with_their_reason(spark, tmp_path: Path) -> None:
    b = StreamsBuilder()
    b.stream("events").map_values(lambda v: {"x": 10 // v["d"]}).to("ratios")
    topology = b.build()
    records = [("k1", {"d": 2}, 1), ("k2", b"{oops", 2), ("k3", {"d": 0}, 3), ("k4", {"d": 5}, 4)]
    raws = produce("events", records, 2)
    config = {"errors.dead.letter.queue.topic.name": "events-dlq", "deserialization.exception.handler": "dead_letter",
              "processing.exception.handler": "dead_letter"}
    batch, driver, views = run_both(spark, tmp_path, topology, raws, set(), config)
    assert batch["topics"]["ratios"] == driver["topics"]["ratios"] == {b"k1": [(b'{"x":5}', 1)], b"k4": [(b'{"x":2}', 4)]}
    assert sorted(batch["topics"]["events-dlq"]) == [b"k2", b"k3"]
    assert views.dropped_by_node() == {topology.source_topics()["events"]: 2}
    assert views.watermark_ms() == 4


def test_log_and_fail_drops_and_counts_in_batch(spark, tmp_path: Path) -> None:
    """A failing record never stops a recompute of history: under ``log_and_fail`` batch
    drops and counts it (as the relational path)."""
    b = StreamsBuilder()
    b.stream("events").group_by_key().count(Materialized.as_("n"))
    raws = produce("events", [("a", {"v": 1}, 1), ("a", b"{", 2), ("b", {"v": 2}, 3)], 1)
    write_raw(tmp_path, raws)
    views = compile_topology(b.build(), config=CONFIG, options=BatchOptions(executor="general")).execute(spark, tmp_path)
    assert sorted((r.key, r.value) for r in views["n"].collect()) == [("a", "1"), ("b", "1")]
    assert views.dropped() == 1


def test_records_a_cache_flush_forwards_that_fail_downstream_are_counted(spark, tmp_path: Path) -> None:
    """A record that fails downstream of an aggregation's record cache (in ``toStream``'s
    mapValues, reached by the cache flush) is dropped under ``log_and_continue`` as in the
    speed layer (``StreamTask.handle_flush_error``, Kafka's ``ProcessorNode#process`` since
    3.9, KIP-1033) and counted in the recompute's ``dropped``, at the aggregation's node."""
    b = StreamsBuilder()
    (b.stream("events").group_by_key().count(Materialized.as_("n"))
     .to_stream().map_values(lambda n: 10 // (n - 2)).to("ratios"))
    topology = b.build()
    raws = produce("events", [("a", {"v": 1}, 1), ("a", {"v": 2}, 2), ("a", {"v": 3}, 3), ("b", {"v": 4}, 4)], 1)
    config = {"processing.exception.handler": "log_and_continue"}
    batch, driver, views = run_both(spark, tmp_path, topology, raws, set(), config)
    assert batch["topics"]["ratios"] == driver["topics"]["ratios"]
    assert [v for v, _ in batch["topics"]["ratios"][b"a"]] == [b"-10", b"10"]  # the count of 2 divided by zero
    count_node = topology.store_writers["n"]
    assert views.dropped_by_node() == {count_node: 1}
