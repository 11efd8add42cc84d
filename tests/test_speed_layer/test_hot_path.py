"""The speed layer's per-record path (issue 45, ``bench/bench_hot_path.py``): what a record
goes through between ``StreamTask.process`` and the record collector, counted in Python
frames (not seconds): a built-in processor with one child calls that child's ``process``
(a source or merge node is skipped), a sink with a fixed topic is its task's prepared
sender; and the tumbling-window fast path of the windowed aggregation against a plain
Python model of Kafka's KStreamWindowAggregate (counts, late drops)."""
from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speed_layer import Materialized, Processor, Produced, Record, Serdes, StreamsBuilder, TimeWindows, Topology, Windowed
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
J = Serdes.JSON()
CONFIG = {"default.key.serde": S, "default.value.serde": S}


class _FrameDriver(TopologyTestDriver):
    """The test driver whose collector notes, for each record sent, the functions on the
    stack between ``StreamTask._process_raw`` (the record's run through the sub-topology,
    under ``StreamTask.process`` or a run of ``StreamTask.process_run``) and this ``send``
    (innermost last)."""

    __test__ = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.chains: list[list[str]] = []
        super().__init__(*args, **kwargs)

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any, partition: int | None) -> None:
        chain: list[str] = []
        f = sys._getframe(1)
        while f is not None and f.f_code.co_qualname != "StreamTask._process_raw":
            chain.append(f.f_code.co_qualname)
            f = f.f_back
        assert f is not None, "send was not called under StreamTask._process_raw"
        self.chains.append(chain[::-1])
        super().send(topic, key, value, timestamp, headers, partition)


@pytest.mark.parametrize("fuse", [False, True])
def test_a_stateless_record_runs_through_its_working_processors_only(fuse: bool) -> None:
    """The anchors' stateless topology (filter, project, JSON out): the filter, the
    projection and the sink's sender, no source, forwarding or sink frame (before: 8);
    with ``fuse.stateless.chains``, one generated frame for the whole chain."""
    b = StreamsBuilder()
    (b.stream("in").filter(lambda k, v: v["distance"] > 500)
     .map_values(lambda v: {"dest": v["dest"], "distance": v["distance"]})
     .to("out", Produced.with_(S, J)))
    with _FrameDriver(b.build(), {**CONFIG, "default.value.serde": J, "fuse.stateless.chains": fuse}) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("EWR", {"dest": "IAH", "distance": 1400}, 1)
        inp.pipe_input("EWR", {"dest": "IAH", "distance": 400}, 2)
        out = d.create_output_topic("out", S, J).read_key_values_to_list()
        assert out == [("EWR", {"dest": "IAH", "distance": 1400})]
        assert [[q.rsplit(".", 1)[0] if q.endswith(".process") else q for q in c] for c in d.chains] == [
            ["fused_chain_from_KSTREAM-FILTER-0000000001"] if fuse
            else ["FilterProcessor", "MapValuesProcessor", "sink_sender.<locals>.send"]]


@pytest.mark.parametrize("fuse", [False, True])
def test_merged_streams_skip_their_sources_and_the_merge(fuse: bool) -> None:
    """Fused, both sources call the chain of the merge's only child (the merge is linked away)."""
    b = StreamsBuilder()
    b.stream("a").merge(b.stream("b")).map_values(lambda v: v + "!").to("out")
    with _FrameDriver(b.build(), {**CONFIG, "fuse.stateless.chains": fuse}) as d:
        d.create_input_topic("a").pipe_input("k", "1", 1)
        d.create_input_topic("b").pipe_input("k", "2", 2)
        assert d.create_output_topic("out").read_values_to_list() == ["1!", "2!"]
        assert d.chains == [["fused_chain_from_KSTREAM-MAPVALUES-0000000003"] if fuse
                            else ["MapValuesProcessor.process", "sink_sender.<locals>.send"]] * 2


def test_a_branch_and_a_topic_extractor_keep_their_own_frames() -> None:
    """A branch names the child it forwards to and is not linked; a sink with a topic
    extractor resolves the topic per record (``SinkProcessor.process``)."""
    b = StreamsBuilder()
    branches = b.stream("in").split().branch(lambda k, v: v == "x").default_branch()
    first, rest = branches.values()
    first.to("xs")
    rest.to(lambda k, v, ctx: "rest")
    with _FrameDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", "x", 1)
        inp.pipe_input("k", "y", 2)
        assert d.create_output_topic("xs").read_values_to_list() == ["x"]
        assert d.create_output_topic("rest").read_values_to_list() == ["y"]
        assert d.chains[0][0] == d.chains[1][0] == "BranchProcessor.process"
        assert d.chains[0][-1] == "sink_sender.<locals>.send"
        assert "SinkProcessor.process" in d.chains[1]


@pytest.mark.parametrize("fuse", [False, True])
def test_several_children_and_a_user_processor_reach_the_sinks_sender(fuse: bool) -> None:
    """A node with two children forwards through the context's list of their ``process``,
    bound once every processor's init ran: the sinks' senders, not ``SinkProcessor.process``;
    a Processor-API processor's ``context.forward`` to its one child too. Fused, the source
    runs both branches in one frame."""
    b = StreamsBuilder()
    s = b.stream("in")
    s.filter(lambda k, v: v == "a").to("as")
    s.filter_not(lambda k, v: v == "a").to("others")
    with _FrameDriver(b.build(), {**CONFIG, "fuse.stateless.chains": fuse}) as d:
        d.create_input_topic("in").pipe_input("k", "a", 1)
        assert d.create_output_topic("as").read_values_to_list() == ["a"]
        assert d.chains == [["fused_chain_from_KSTREAM-SOURCE-0000000000"] if fuse else
                            ["SourceProcessor.process", "ProcessorContextImpl.forward", "FilterProcessor.process", "sink_sender.<locals>.send"]]

    class Upper(Processor[Any, Any]):
        def process(self, record: Record[Any, Any]) -> None:
            self.context.forward(record.with_value(record.value.upper()))

    t = Topology().add_source("src", "in").add_processor("upper", Upper, "src").add_sink("sink", "out", "upper")
    with _FrameDriver(t, CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "v", 5)
        assert d.create_output_topic("out").read_values_to_list() == ["V"]
        assert d.chains == [["UserProcessor.process", "test_several_children_and_a_user_processor_reach_the_sinks_sender.<locals>.Upper.process",
                             "ProcessorContextImpl.link_children.<locals>.forward_one", "sink_sender.<locals>.send"]]


def _model(records: list[tuple[str, int]], size: int, grace: int) -> tuple[dict[tuple[str, int], int], int]:
    """Kafka's KStreamWindowAggregate for a tumbling count: per ``(key, window start)`` the
    count of the records not late (a window is closed once its end is at or before the
    observed stream time minus grace), and the number of late records."""
    counts: Counter[tuple[str, int]] = Counter()
    observed, late = -1, 0
    for key, ts in records:
        observed = max(observed, ts)
        start = ts - ts % size
        if start + size <= observed - grace:
            late += 1
        else:
            counts[(key, start)] += 1
    return dict(counts), late


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["EWR", "JFK", "LGA"]), st.integers(0, 200)), min_size=1, max_size=60),
       st.sampled_from([1, 10, 25]), st.sampled_from([0, 7]), st.booleans())
def test_tumbling_window_counts_and_late_drops_match_kafkas_model(records: list[tuple[str, int]], size: int, grace: int,
                                                                  caching: bool) -> None:
    """Each window's last update downstream is the model's count, late records are counted
    as dropped; with and without the store's cache (with it, the fast path for tumbling
    windows)."""
    b = StreamsBuilder()
    m = Materialized.as_("w") if caching else Materialized.as_("w").with_caching_disabled()
    (b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_and_grace(size, grace)).count(m)
     .to_stream().to("out", Produced.with_(Serdes.Pickle(), Serdes.Pickle())))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in")
        for key, ts in records:
            inp.pipe_input(key, "v", ts)
        last: dict[tuple[str, int], int] = {}
        for r in d.create_output_topic("out", Serdes.Pickle(), Serdes.Pickle()).read_records_to_list():
            assert isinstance(r.key, Windowed) and r.key.window.end == r.key.window.start + size
            last[(r.key.key, r.key.window.start)] = r.value
        counts, late = _model(records, size, grace)
        assert last == counts
        assert d.dropped_records() == late
