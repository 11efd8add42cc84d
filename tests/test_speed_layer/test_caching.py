"""Record caches (Kafka's ThreadCache / NamedCache) as seen through the test driver.

As in Kafka's TopologyTestDriver, every task commits after each processed record, so a
cache folds only the updates made while one record is processed: with caching on, several
updates of one key from one record reach downstream once (the last value, the old value
from the store); with caching off every update is forwarded. Flushes go in order of each
entry's last update (NamedCache's dirty-key order).
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Materialized, Produced, Serdes, StreamsBuilder
from speed_layer.processor.api import Change, Processor, Record
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}
LONG = Produced.with_(S, Serdes.Long())


def _counts(caching: bool) -> list[tuple[Any, Any, int]]:
    b = StreamsBuilder()
    m = Materialized.as_("c") if caching else Materialized.as_("c").with_caching_disabled()
    # no key change: the three words of one line are aggregated while that line is processed
    b.stream("in").flat_map_values(lambda v: v.split()).group_by_key().count(m).to_stream().to("out", LONG)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", "a b c", 1)
        inp.pipe_input("k", "d", 2)
        inp.pipe_input("j", "e f", 3)
        return [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", value_serde=Serdes.Long()).read_records_to_list()]


def test_caching_folds_the_updates_of_one_record() -> None:
    assert _counts(True) == [("k", 3, 1), ("k", 4, 2), ("j", 2, 3)]


def test_without_caching_every_update_is_forwarded() -> None:
    assert _counts(False) == [("k", 1, 1), ("k", 2, 1), ("k", 3, 1), ("k", 4, 2), ("j", 1, 3), ("j", 2, 3)]


def test_flush_order_is_the_order_of_last_update() -> None:
    b = StreamsBuilder()
    b.stream("in").flat_map(lambda k, v: [(w, w) for w in v.split()]).group_by_key().count().to_stream().to("out", LONG)
    topo = b.build()
    # the flat_map changes keys: each word goes through the repartition topic and is
    # committed on its own, so every update is visible
    with TopologyTestDriver(topo, CONFIG) as d:
        d.create_input_topic("in").pipe_input("x", "b a b", 1)
        assert [(r.key, r.value) for r in d.create_output_topic("out", value_serde=Serdes.Long()).read_records_to_list()] == [
            ("b", 1), ("a", 1), ("b", 2)]


class _ThreePuts(Processor[Any, Any]):
    """Puts keys b, a, b into a cached store while processing one record."""

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store("kv")

        def listener(key: Any, new: Any, old: Any) -> None:
            context.forward(Record(key, Change(None if new is None else new.value, None if old is None else old.value), new.timestamp if new else 0))

        self.store.flush_listener = listener

    def process(self, record: Record[Any, Any]) -> None:
        for i, k in enumerate(["b", "a", "b"]):
            self.store.put(k, f"{record.value}{i}", record.timestamp)


class _Print(Processor[Any, Any]):
    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record.with_value(f"{record.value.new}<-{record.value.old}"))


@pytest.mark.parametrize("in_memory", [True, False])
def test_named_cache_dirty_key_order_through_the_processor_api(in_memory: bool) -> None:
    from speed_layer import Stores, Topology

    t = Topology()
    t.add_source("src", "in")
    t.add_processor("puts", _ThreePuts, "src")
    t.add_processor("print", _Print, "puts")
    t.add_sink("sink", "out", "print")
    t.add_state_store(Stores.with_caching_enabled(Stores.key_value_store("kv", in_memory=in_memory, timestamped=True)), "puts")
    with TopologyTestDriver(t, CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("x", "v", 1)
        inp.pipe_input("x", "w", 2)
        out = d.create_output_topic("out").read_key_values_to_list()
        # "b" moved behind "a" by its second update; old values come from the store
        assert out == [("a", "v1<-None"), ("b", "v2<-None"), ("a", "w1<-v1"), ("b", "w2<-v2")]


@pytest.mark.parametrize("windowed", [False, True])
def test_aggregations_send_old_values_only_when_a_downstream_table_operation_asks(windowed: bool) -> None:
    """Kafka's sendOldValues: an aggregation forwards ``Change(new, None)`` until a table
    operation that needs old values (here ``filter``) enables them on its node."""
    from speed_layer import TimeWindows

    b = StreamsBuilder()
    grouped: Any = b.stream("in").group_by_key()
    if windowed:
        grouped = grouped.windowed_by(TimeWindows.of_size_with_no_grace(10))
    plain = grouped.count(Materialized.as_("plain"))
    asked = grouped.count(Materialized.as_("asked"))
    asked.filter(lambda k, v: v > 1)
    nodes = b.topology.nodes
    assert nodes[plain.node].op.send_old_values is False
    assert nodes[asked.node].op.send_old_values is True


def test_a_cache_flush_without_old_values_does_not_read_the_old_value() -> None:
    """A caching window store flushing for a listener that takes no old values passes None
    (and only reads the bytes store for deletes, to skip deletes of absent windows)."""
    from speed_layer.state.backends import InMemoryBytesStore
    from speed_layer.state.stores import WindowStore

    seen: list[tuple[Any, Any, Any]] = []
    for send_old in (True, False):
        store = WindowStore("w", InMemoryBytesStore("w"), S, Serdes.Long(), window_size_ms=10, retention_ms=100, caching=True)
        store.send_old_values = send_old
        store.flush_listener = lambda k, new, old: seen.append((send_old, new.value if new else None, old.value if old else None))
        store.put("k", 1, 0, 5)
        store.flush_cache()
        store.put("k", 2, 0, 6)
        store.flush_cache()
    assert seen == [(True, 1, None), (True, 2, 1), (False, 1, None), (False, 2, None)]
