"""The Processor API through the TopologyTestDriver: ``Topology.add_source`` /
``add_processor`` / ``add_sink`` / ``add_state_store``, ``context.forward`` (to all children
or one), stores, record metadata, and punctuation as Kafka's PunctuationQueue: stream-time
punctuations are aligned to 0, fire at the first record, and after a gap fire once
(catch-up skips missed intervals); wall-clock punctuations start at schedule time +
interval and run on ``advance_wall_clock_time``."""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import (
    InvalidStateStoreException, Processor, PunctuationType, Record, Serdes, StreamsBuilder, StreamsException, Stores, Topology,
)
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}


class Upper(Processor[Any, Any]):
    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record.with_value(record.value.upper()))


class Router(Processor[Any, Any]):
    """Forwards to the child named by the value's first character."""

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record, "left" if record.value.startswith("l") else "right")


def test_source_processor_sink() -> None:
    t = Topology().add_source("src", "in").add_processor("upper", Upper, "src").add_sink("sink", "out", "upper")
    with TopologyTestDriver(t, CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "v", 5)
        r = d.create_output_topic("out").read_record()
        assert (r.key, r.value, r.timestamp) == ("k", "V", 5)


def test_forward_to_a_named_child() -> None:
    t = (Topology().add_source("src", "in").add_processor("router", Router, "src")
         .add_processor("left", Upper, "router").add_processor("right", Upper, "router")
         .add_sink("lsink", "l-out", "left").add_sink("rsink", "r-out", "right"))
    with TopologyTestDriver(t, CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", "lx", 1)
        inp.pipe_input("k", "rx", 2)
        assert d.create_output_topic("l-out").read_values_to_list() == ["LX"]
        assert d.create_output_topic("r-out").read_values_to_list() == ["RX"]


def test_forward_to_an_unknown_child_raises() -> None:
    class Bad(Processor[Any, Any]):
        def process(self, record: Record[Any, Any]) -> None:
            self.context.forward(record, "nope")

    t = Topology().add_source("src", "in").add_processor("bad", Bad, "src")
    with TopologyTestDriver(t, CONFIG) as d:
        with pytest.raises(StreamsException):
            d.create_input_topic("in").pipe_input("k", "v", 1)


class Counter(Processor[Any, Any]):
    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store("counts")

    def process(self, record: Record[Any, Any]) -> None:
        n = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, n)
        meta = self.context.record_metadata()
        self.context.forward(record.with_value(f"{n}@{meta.topic}:{meta.offset}"))


@pytest.mark.parametrize("in_memory", [True, False])
def test_state_store_and_record_metadata(in_memory: bool) -> None:
    t = (Topology().add_source("src", "in").add_processor("count", Counter, "src")
         .add_state_store(Stores.key_value_store("counts", in_memory=in_memory), "count").add_sink("sink", "out", "count"))
    with TopologyTestDriver(t, CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("a", "x", 1)
        inp.pipe_input("a", "x", 2)
        assert d.create_output_topic("out").read_values_to_list() == ["1@in:0", "2@in:1"]
        assert d.get_key_value_store("counts").get("a") == 2


def test_unconnected_store_is_not_accessible() -> None:
    class Sneaky(Processor[Any, Any]):
        def init(self, context: Any) -> None:
            context.get_state_store("counts")

        def process(self, record: Record[Any, Any]) -> None: ...

    t = (Topology().add_source("src", "in").add_processor("count", Counter, "src").add_processor("sneaky", Sneaky, "src")
         .add_state_store(Stores.key_value_store("counts"), "count"))
    with pytest.raises(InvalidStateStoreException):
        TopologyTestDriver(t, CONFIG)


class Ticker(Processor[Any, Any]):
    """Records every punctuation time; a STREAM_TIME punctuation every 10 ms and, when
    asked, a WALL_CLOCK_TIME one every 100 ms."""

    fired: list[tuple[str, int]] = []
    wall = False

    def init(self, context: Any) -> None:
        self.context = context
        self.cancellable = context.schedule(10, PunctuationType.STREAM_TIME, lambda ts: Ticker.fired.append(("stream", ts)))
        if Ticker.wall:
            context.schedule(100, PunctuationType.WALL_CLOCK_TIME, self._wall)

    def _wall(self, ts: int) -> None:
        Ticker.fired.append(("wall", ts))
        self.context.forward(Record("tick", str(ts), ts))

    def process(self, record: Record[Any, Any]) -> None:
        if record.value == "cancel":
            self.cancellable.cancel()


def _ticker_driver(wall: bool = False, start: int = 0) -> TopologyTestDriver:
    Ticker.fired = []
    Ticker.wall = wall
    t = Topology().add_source("src", "in").add_processor("tick", Ticker, "src").add_sink("sink", "out", "tick")
    return TopologyTestDriver(t, CONFIG, initial_wall_clock_time_ms=start)


def test_stream_time_punctuation_first_fires_at_the_first_record_then_catches_up() -> None:
    with _ticker_driver() as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", "v", 3)    # due 0: fires with stream time 3, next due 10
        inp.pipe_input("k", "v", 9)    # not due
        inp.pipe_input("k", "v", 10)   # due 10: fires, next 20
        inp.pipe_input("k", "v", 47)   # missed 20, 30, 40: fires once, next 50
        inp.pipe_input("k", "v", 5)    # stream time stays 47
        inp.pipe_input("k", "v", 50)
        assert Ticker.fired == [("stream", 3), ("stream", 10), ("stream", 47), ("stream", 50)]


def test_cancelled_punctuation_stops() -> None:
    with _ticker_driver() as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", "v", 0)
        inp.pipe_input("k", "cancel", 5)
        inp.pipe_input("k", "v", 30)
        assert Ticker.fired == [("stream", 0)]


def test_wall_clock_punctuation_runs_on_advance_and_its_records_are_produced() -> None:
    with _ticker_driver(wall=True, start=1000) as d:
        d.advance_wall_clock_time(99)
        assert [f for f in Ticker.fired if f[0] == "wall"] == []
        d.advance_wall_clock_time(1)     # 1100: due
        d.advance_wall_clock_time(250)   # 1350: missed 1200 and 1300 -> fires once, next 1400
        d.advance_wall_clock_time(50)    # 1400
        assert [f for f in Ticker.fired if f[0] == "wall"] == [("wall", 1100), ("wall", 1350), ("wall", 1400)]
        assert d.create_output_topic("out").read_values_to_list() == ["1100", "1350", "1400"]


def test_punctuation_has_no_record_metadata() -> None:
    seen: list[Any] = []

    class P(Processor[Any, Any]):
        def init(self, context: Any) -> None:
            self.context = context
            context.schedule(1, PunctuationType.STREAM_TIME, lambda ts: seen.append(context.record_metadata()))

        def process(self, record: Record[Any, Any]) -> None:
            seen.append(self.context.record_metadata().topic)

    t = Topology().add_source("src", "in").add_processor("p", P, "src")
    with TopologyTestDriver(t, CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "v", 5)
    assert seen == ["in", None]


def test_dsl_process_with_a_store_added_to_the_builder() -> None:
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store("counts"))
    b.stream("in").process(Counter, "counts").to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("in").pipe_input("a", "x", 1)
        assert d.create_output_topic("out").read_values_to_list() == ["1@in:0"]


def test_topology_validation() -> None:
    from speed_layer import TopologyException

    t = Topology().add_source("src", "in")
    with pytest.raises(TopologyException):
        t.add_source("src", "other")          # duplicate name
    with pytest.raises(TopologyException):
        t.add_source("src2", "in")            # topic already read
    with pytest.raises(TopologyException):
        t.add_processor("p", Upper)           # no parent
    with pytest.raises(TopologyException):
        t.add_processor("p", Upper, "nope")   # unknown parent
    t.add_sink("sink", "out", "src")
    with pytest.raises(TopologyException):
        t.add_processor("p", Upper, "sink")   # a sink is no parent


def test_stream_time_is_shared_by_all_sub_topologies_in_the_driver() -> None:
    """Kafka's TopologyTestDriver runs the whole topology as one task: a punctuation after a
    repartition sees the stream time of records that never reached it."""
    fired: list[int] = []

    class P(Processor[Any, Any]):
        def init(self, context: Any) -> None:
            self.context = context
            context.schedule(10, PunctuationType.STREAM_TIME, fired.append)

        def process(self, record: Record[Any, Any]) -> None:
            pass

    b = StreamsBuilder()
    s = b.stream("in")
    s.filter(lambda k, v: v == "keep").repartition().process(P)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", "keep", 1)
        inp.pipe_input("k", "drop", 25)  # filtered out before the repartition
        assert fired == [1, 25]
