"""Fused chains of stateless processors (``fuse.stateless.chains``,
:mod:`speed_layer.processor.fused_chains`) against the processors run one by one: on random
chains of filter, filter_not, map, select_key, map_values (with and without key),
flat_map, flat_map_values, peek, merge, fan-out to a side sink, a Processor-API processor
(reading the record context) and values a sink cannot serialize, with a processor raising
mid-chain, under each ``processing.exception.handler`` / ``production.exception.handler``
(log_and_continue, dead_letter, log_and_fail): the same records on every topic (keys,
values, timestamps, headers), the same dead letters (their headers; the stack trace's last
line, the frames differ by design), the same peeks, the same task counters and the same
fatal error."""
from __future__ import annotations

from typing import Any, Callable

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from speed_layer import Materialized, Processor, Record, Serdes, StreamsBuilder, StreamsException
from speed_layer.options import Produced
from speed_layer.testing import TopologyTestDriver

S, J, B = Serdes.String(), Serdes.JSON(), Serdes.Bytes()

Step = tuple[str, int]
STEPS = ["filter", "filter_not", "map_values", "map_values_k", "map", "select_key", "flat_map", "flat_map_values",
         "flat_map_values_k", "peek", "boom", "fork", "merge", "user", "unserializable"]


class _AddOffset(Processor[Any, Any]):
    """Forwards the value plus the record's offset mod 5 (the record context)."""

    def process(self, record: Record[Any, Any]) -> None:
        meta = self.context.record_metadata()
        self.context.forward(record.with_value(record.value + meta.offset % 5))


def _boom(m: int) -> Callable[[Any], Any]:
    def f(v: Any) -> Any:
        if v % m == 0:
            raise ValueError(f"boom on {v}")
        return v + 1
    return f


def _build(steps: list[Step], peeks: list[Any]) -> Any:
    """The topology of ``steps`` from topic ``in`` to ``out`` (``side<i>`` for forks)."""
    b = StreamsBuilder()
    s = b.stream("in")
    for i, (kind, m) in enumerate(steps):
        if kind == "filter":
            s = s.filter(lambda k, v, m=m: v % m != 0)
        elif kind == "filter_not":
            s = s.filter_not(lambda k, v, m=m: v % m == 1)
        elif kind == "map_values":
            s = s.map_values(lambda v, m=m: v * m + 1)
        elif kind == "map_values_k":
            s = s.map_values(lambda k, v: v + len(k), with_key=True)
        elif kind == "map":
            s = s.map(lambda k, v, m=m: (k + "x" if v % m else k, v - 1))
        elif kind == "select_key":
            s = s.select_key(lambda k, v: k[:3])
        elif kind == "flat_map":
            s = s.flat_map(lambda k, v: [(k, v), (k + "y", v * 2)][: v % 3])
        elif kind == "flat_map_values":
            s = s.flat_map_values(lambda v: [v, v + 1, v + 2][: v % 4])
        elif kind == "flat_map_values_k":
            s = s.flat_map_values(lambda k, v: [v, len(k)][: v % 3], with_key=True)
        elif kind == "peek":
            s = s.peek(lambda k, v, i=i: peeks.append((i, k, v)))
        elif kind == "boom":
            s = s.map_values(_boom(m))
        elif kind == "fork":
            s.to(f"side{i}", Produced.with_(S, J))
        elif kind == "merge":
            s = s.merge(b.stream("in2").map_values(lambda v: v + 100))
        elif kind == "user":
            s = s.process(_AddOffset)
        elif kind == "unserializable":
            s = s.map_values(lambda v, m=m: {v} if v % m == 0 else v)
    s.to("out", Produced.with_(S, J))
    return b.build()


def _run(steps: list[Step], records: list[tuple[str, str, int]], handler: str, fuse: bool) -> dict[str, Any]:
    peeks: list[Any] = []
    config = {"default.key.serde": S, "default.value.serde": J, "processing.exception.handler": handler,
              "production.exception.handler": handler, "errors.dead.letter.queue.topic.name": "dlq",
              "fuse.stateless.chains": fuse}
    fatal = None
    with TopologyTestDriver(_build(steps, peeks), config) as d:
        fused = [n for t in d.tasks for n, p in t.processors.items()
                 if getattr(p.process, "__name__", "").startswith("fused_chain_from_")]
        inputs = {t: d.create_input_topic(t, S, J) for t in ("in", "in2")}
        for i, (topic, key, ts) in enumerate(records):
            try:
                inputs[topic].pipe_input(key, i, ts, headers=[("h", str(i).encode())])
            except StreamsException as exc:
                fatal = str(exc)
                break
        topics = {}
        for name in sorted(d.produced_topic_names()):
            topics[name] = [(r.key, r.value, r.timestamp,
                             [(h, v.decode().strip().rsplit("\n", 1)[-1] if h == "__streams.errors.stacktrace" else v)
                              for h, v in r.headers])
                            for r in d.create_output_topic(name, B, B).read_records_to_list()]
        counters = dict(d.metrics.counters)
    return {"topics": topics, "peeks": peeks, "counters": counters, "fatal": fatal, "fused": fused}


@settings(max_examples=100, deadline=None)
@given(st.tuples(st.lists(st.tuples(st.sampled_from(STEPS), st.integers(2, 5)), min_size=1, max_size=7), st.booleans())
       .map(lambda s: s[0] + [("unserializable", 2)] if s[1] else s[0]),  # then the sink's serializer fails on even values
       st.lists(st.tuples(st.sampled_from(["in", "in", "in2"]), st.sampled_from(["EWR", "JFK", "LGA"]),
                          st.integers(0, 50)), min_size=1, max_size=12),
       st.sampled_from(["log_and_continue", "dead_letter", "log_and_fail"]))
def test_fused_chains_match_the_processors_one_by_one(steps: list[Step], records: list[tuple[str, str, int]],
                                                      handler: str) -> None:
    fused, unfused = _run(steps, records, handler, True), _run(steps, records, handler, False)
    assert unfused["fused"] == [], "the key switches fusion off"
    event(f"fused nodes: {len(fused['fused'])}")
    for part in ("topics", "peeks", "counters", "fatal"):
        assert fused[part] == unfused[part], part


def test_a_processor_raising_mid_chain_under_each_handler() -> None:
    """Fixed cases of the property above: a map_values raising between a filter and a
    projection; log_and_continue drops and counts it, dead_letter sends the source record
    with its headers, log_and_fail stops with the same error."""
    steps: list[Step] = [("filter", 5), ("boom", 3), ("map_values", 2), ("peek", 0)]
    records = [("in", "EWR", t) for t in range(8)]
    for handler in ("log_and_continue", "dead_letter", "log_and_fail"):
        fused, unfused = _run(steps, records, handler, True), _run(steps, records, handler, False)
        assert fused == {**unfused, "fused": fused["fused"]}
        assert fused["fused"] and not unfused["fused"]
        if handler == "log_and_fail":
            assert fused["fatal"] and "boom on 3" in fused["fatal"]
        else:
            assert fused["counters"][("0_0", "dropped-records")] == 2  # values 3 and 6
            assert len(fused["topics"]["out"]) == 4  # 1, 2, 4, 7 pass (0 and 5 filtered)
        if handler == "dead_letter":
            (letter, letter2) = fused["topics"]["dlq"]
            headers = dict(letter[3])
            assert letter[1] == b"3" and headers["h"] == b"3" and headers["__streams.errors.offset"] == b"3"
            assert headers["__streams.errors.stacktrace"] == "ValueError: boom on 3"


def _table_run(handler: str, caching: bool, fuse: bool) -> dict[str, Any]:
    """A materialized table's changes through ``to_stream`` (with a key mapper) and a chain
    raising on some values: the records a cache flush forwards fail downstream of the
    table's node (the dead letter names it: ``__streams.errors.node``)."""
    b = StreamsBuilder()
    m = Materialized.as_("t") if caching else Materialized.as_("t").with_caching_disabled()
    (b.table("in", materialized=m).to_stream(lambda k, v: k + "!").map_values(_boom(4)).filter(lambda k, v: v % 3)
     .to("out", Produced.with_(S, J)))
    config = {"default.key.serde": S, "default.value.serde": J, "processing.exception.handler": handler,
              "errors.dead.letter.queue.topic.name": "dlq", "fuse.stateless.chains": fuse}
    fatal = None
    with TopologyTestDriver(b.build(), config) as d:
        inp = d.create_input_topic("in", S, J)
        try:
            for i in range(12):
                inp.pipe_input(["a", "b", "c"][i % 3], i, i)
            d.tasks[0].commit()  # the cache's flush forwards
        except StreamsException as exc:
            fatal = str(exc)
        topics = {name: [(r.key, r.value, r.timestamp,
                          [(h, v.decode().strip().rsplit("\n", 1)[-1] if h == "__streams.errors.stacktrace" else v)
                           for h, v in r.headers])
                         for r in d.create_output_topic(name, B, B).read_records_to_list()]
                  for name in sorted(d.produced_topic_names())}
        fused = [n for n, p in d.tasks[0].processors.items() if getattr(p.process, "__name__", "").startswith("fused_chain_from_")]
        return {"topics": topics, "counters": dict(d.metrics.counters), "fatal": fatal, "fused": fused}


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("handler", ["log_and_continue", "dead_letter", "log_and_fail"])
def test_a_tables_changes_through_to_stream_fused_and_not(handler: str, caching: bool) -> None:
    fused, unfused = _table_run(handler, caching, True), _table_run(handler, caching, False)
    assert fused == {**unfused, "fused": fused["fused"]}
    assert sorted(n.split("-")[1] for n in fused["fused"]) == ["FILTER", "MAPVALUES", "TOSTREAM"] and not unfused["fused"]
    if handler == "log_and_fail":
        assert fused["fatal"] and "boom on" in fused["fatal"]
    else:
        assert fused["counters"][("0_0", "dropped-records")] >= 1
        assert fused["topics"]["out"]
    if handler == "dead_letter" and caching:
        assert fused["topics"]["dlq"]
        assert all(dict(letter[3])["__streams.errors.node"].startswith(b"KTABLE-SOURCE") for letter in fused["topics"]["dlq"])
