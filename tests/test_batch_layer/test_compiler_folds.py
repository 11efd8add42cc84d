"""The batch layer's worker-side code (``batch_layer.translators._chain``, ``_agg_prep``,
``_folds``) against the speed layer's processors, without Spark: random records go through
the ``TopologyTestDriver`` and through the batch layer's decoder / fused steps / aggregation
folds called on pandas frames as Spark would call them. Results must be identical (value
JSON text and timestamp)."""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch_layer.translators._agg_prep import AggPrepEmitter
from batch_layer.translators._chain import (
    BranchSelectStep, FilterStep, FlatMapStep, MapValuesStep, RawDecoder, StreamEmitter, chain_function,
)
from batch_layer.translators._folds import PlainFold, SessionFold, TimeWindowFold
from speed_layer import Materialized, Produced, Serdes, SessionWindows, StreamsBuilder, TimeWindows
from speed_layer.state.keys import encode_key
from speed_layer.testing import TopologyTestDriver


class _Acc:
    def __init__(self) -> None:
        self.value: dict = {}

    def add(self, x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                self.value.setdefault(k, set()).update(v)


def _agg_functions(kind: str) -> tuple[Any, Any, Any]:
    """(initializer, aggregator, merger) of a few aggregation shapes, incl. an
    order-sensitive one and one that returns None (deletes)."""
    if kind == "list":
        return (lambda: []), (lambda k, v, a: a + [v["x"]]), (lambda k, a, b: a + b)
    if kind == "sum_or_delete":  # None deletes the window / key / session: restart from init
        return (lambda: 0), (lambda k, v, a: None if v["x"] == 0 else a + v["x"]), (lambda k, a, b: a + b)
    return (lambda: {"n": 0, "last": None}), (lambda k, v, a: {"n": a["n"] + 1, "last": v["x"]}), \
        (lambda k, a, b: {"n": a["n"] + b["n"], "last": b["last"]})


def _topology(windows: Any, kind: str, op: str):
    b = StreamsBuilder()
    g = b.stream("in").group_by_key()
    w = g.windowed_by(windows) if windows is not None else g
    init, agg, merger = _agg_functions(kind)
    m = Materialized.as_("view")
    if op == "count":
        t = w.count(m)
    elif op == "reduce":
        t = w.reduce(lambda a, v: {"x": a["x"] * 3 + v["x"]}, m)
    elif isinstance(windows, SessionWindows):
        t = w.aggregate(init, agg, merger, m)
    else:
        t = w.aggregate(init, agg, m)
    key_serde = Serdes.WindowedJSON(Serdes.String()) if windows is not None else Serdes.String()
    t.to_stream().to("out", Produced(key_serde=key_serde, value_serde=Serdes.JSON()))
    return b.build()


def _speed(topo, records, windowed: bool) -> dict:
    with TopologyTestDriver(topo) as d:
        for k, v, ts in records:
            d.pipe_raw("in", None if k is None else k.encode(), json.dumps(v).encode(), ts)
        out = d.create_output_topic("out", Serdes.WindowedJSON(Serdes.String()) if windowed else Serdes.String(), Serdes.Bytes())
        m: dict = {}
        for r in out.read_records_to_list():
            ident = (r.key.key, r.key.window.start, r.key.window.end) if windowed else (r.key, None, None)
            if r.value is None:
                m.pop(ident, None)
            else:
                m[ident] = (r.value.decode(), r.timestamp)
    return m


def _batch(topo, records) -> dict:
    node = topo.nodes[topo.store_writers["view"]]
    op = node.op
    w = op.windows
    acc = _Acc()
    src = next(n for n in topo.nodes.values() if type(n.op).__name__ == "SourceOp" and not n.op.repartition)
    dec = RawDecoder(src.name, Serdes.String(), Serdes.JSON(), None, 0, True)
    block = None
    if isinstance(w, TimeWindows):
        from batch_layer.translators.aggregate import block_ms

        block = block_ms(w, 4 * w.size_ms)
        emitter = AggPrepEmitter(node.name, None, w.size_ms, w.advance_ms, block)
    else:
        emitter = AggPrepEmitter(node.name, None, None, None, None)
    raw = pd.DataFrame({
        "key": [None if k is None else k.encode() for k, _, _ in records],
        "value": [json.dumps(v).encode() for _, v, _ in records],
        "timestamp": [ts for _, _, ts in records], "partition": [0] * len(records), "offset": list(range(len(records))),
    })
    prep = pd.concat(list(chain_function(dec, (), emitter, acc, None)(iter([raw[:7], raw[7:]]))), ignore_index=True)
    if isinstance(w, TimeWindows):
        fold = TimeWindowFold(node.name, op, block, acc)
        groups = [g for _, g in prep.groupby("blk")] if len(prep) else []
    else:
        fold = SessionFold(node.name, op, acc) if isinstance(w, SessionWindows) else PlainFold(node.name, op, acc)
        groups = [prep] if len(prep) else []
    out: dict = {}
    for g in groups:
        for r in fold(g.sample(frac=1, random_state=1)).itertuples(index=False):  # input order must not matter
            out[(r.key, r.window_start, r.window_end)] = (r.value, int(r.timestamp))
    assert not acc.value
    return out


records_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(0, 5), st.integers(0, 120)),
    min_size=1, max_size=40,
).map(lambda rows: sorted([(k, {"x": x}, 1_000_000 + t * 1000) for k, x, t in rows], key=lambda r: r[2]))

WINDOWS = {
    "tumbling": TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(days=1)),
    "hopping": TimeWindows.of_size_and_grace(timedelta(seconds=30), timedelta(days=1)).advance_by(timedelta(seconds=7)),
    "session": SessionWindows.of_inactivity_gap_and_grace(timedelta(seconds=9), timedelta(days=1)),
    "plain": None,
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, window=st.sampled_from(sorted(WINDOWS)), op=st.sampled_from(["count", "reduce", "aggregate"]),
       kind=st.sampled_from(["list", "sum_or_delete", "dict"]))
def test_folds_equal_the_speed_layer(records: list, window: str, op: str, kind: str) -> None:
    topo = _topology(WINDOWS[window], kind, op)
    speed = _speed(topo, records, WINDOWS[window] is not None)
    batch = _batch(_topology(WINDOWS[window], kind, op), records)
    assert batch == speed


def test_fused_steps_match_the_speed_layer_stateless_processors() -> None:
    """filter, map, flat_map (with sub-record order), branch, and errors counted per node."""
    acc = _Acc()
    steps = (
        FilterStep("f", lambda k, v: v["x"] != 3, False),
        FlatMapStep("fm", lambda k, v: [(k, v), (k + "!", {"x": v["x"] * 10})], values_only=False, with_key=True),
        MapValuesStep("mv", lambda v: {"x": 1 // (v["x"] - 20)} if v["x"] >= 10 else v, with_key=False),
        BranchSelectStep("br", (lambda k, v: k.endswith("!"), None), 1),
    )
    dec = RawDecoder("src", Serdes.String(), Serdes.JSON(), None, 4, True)
    raw = pd.DataFrame({"key": [b"a", b"b", b"c", b"d"], "value": [b'{"x": 1}', b'{"x": 2}', b'{"x": 3}', b"oops"],
                        "timestamp": [5, 6, 7, 8], "partition": [1, 1, 0, 0], "offset": [10, 11, 12, 13]})
    wm = type("W", (), {"value": -1, "add": lambda self, x: setattr(self, "value", max(self.value, x))})()
    (frame,) = list(chain_function(dec, steps, StreamEmitter(), acc, wm)(iter([raw])))
    assert frame["k"].tolist() == [encode_key("a"), encode_key("b")] and frame["seq"].tolist() == ["00000000"] * 2
    assert acc.value == {"src": {(4, 0, 13)}, "mv": {(4, 1, 11)}}  # bad JSON; 1 // 0 on b's copy
    assert wm.value == 7
