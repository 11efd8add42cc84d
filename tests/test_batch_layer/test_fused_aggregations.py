"""Fused aggregations (``batch_layer.translators._fused``) against the unfused plan, without
Spark: the same records through one fused pass (a trie of the views' step chains, one
``FusedFold`` over rows as Spark groups them) and through one ``chain_function`` and
fold per view must give the same view rows and the same dead letters; a step shared by
several views runs once per record.
About 0.5 s."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pandas as pd
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch_layer.translators import _fused as fu
from batch_layer.translators._agg_prep import AggPrepEmitter
from batch_layer.translators._chain import (
    DropNullKeyStep, FilterStep, MapStep, MapValuesStep, RawDecoder, Step, chain_function,
)
from batch_layer.translators._folds import PlainFold, SessionFold, TimeWindowFold
from batch_layer.translators._records import group_fn
from speed_layer import Serdes, SessionWindows, TimeWindows
from speed_layer.graph import ops


class _Acc:
    def __init__(self) -> None:
        self.value: dict = {}

    def add(self, x: Any) -> None:
        for k, v in x.items():
            self.value.setdefault(k, set()).update(v)


class _Max:
    value = -1

    def add(self, x: int) -> None:
        self.value = max(self.value, x)


class _Counting:
    """A mapValues mapper counting its calls; raises on x == 7 (a dead letter)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, v: dict) -> dict:
        self.calls += 1
        if v["x"] == 7:
            raise ValueError("seven")
        return {**v, "y": v["x"] * 2}


HOUR = 3_600_000


def _views(shared: Step) -> list[tuple[tuple[Step, ...], Any, type, Any]]:
    """(steps, emitter, fold class, op) of four views over one input: tumbling and hopping
    windows, sessions and a plain aggregation; three share the step ``shared``."""
    rekey = MapStep("rekey", lambda k, v: k + ("-odd" if v["x"] % 2 else "-even"), key_only=True)
    big = FilterStep("big", lambda k, v: v["y"] > 4, negate=False)
    add = lambda k, v, a: a + v["x"]  # noqa: E731
    tumbling = ops.AggregateOp("aggregate", "t", lambda: 0, add, TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(0)))
    hopping = ops.AggregateOp("aggregate", "h", lambda: [],
                              lambda k, v, a: None if v["x"] == 3 else a + [v["y"]],
                              TimeWindows.of_size_and_grace(timedelta(hours=3), timedelta(0)).advance_by(timedelta(hours=1)))
    sessions = ops.AggregateOp("aggregate", "s", lambda: 0, add, SessionWindows.of_inactivity_gap_and_grace(timedelta(hours=2), timedelta(0)),
                               lambda k, a, b: a + b)
    plain = ops.AggregateOp("aggregate", "p", lambda: {"n": 0}, lambda k, v, a: {"n": a["n"] + 1, "last": v["x"]}, None)
    t_em = AggPrepEmitter("t", None, HOUR, HOUR, 24 * HOUR, keep_null_values=True)
    h_em = AggPrepEmitter("h", None, 3 * HOUR, HOUR, 24 * HOUR, keep_null_values=True)
    return [
        ((shared,), t_em, TimeWindowFold, (tumbling, 24 * HOUR)),
        ((shared, rekey), h_em, TimeWindowFold, (hopping, 24 * HOUR)),
        ((shared, rekey, big), AggPrepEmitter("s", None, None, None, None, keep_null_values=True), SessionFold, (sessions,)),
        ((), AggPrepEmitter("p", None, None, None, None), PlainFold, (plain,)),
    ]


def _fold(cls: type, args: tuple[Any, ...], acc: _Acc) -> Any:
    op = args[0]
    return cls(op.store, op, args[1], acc) if cls is TimeWindowFold else cls(op.store, op, acc)


def _grouped(prep: pd.DataFrame, fn: Any, by: list[str]) -> list[tuple[Any, ...]]:
    if prep.empty:
        return []
    out = [fn(g.reset_index(drop=True)) for _, g in prep.groupby(by, sort=True)]
    return sorted((tuple(r) for r in pd.concat(out).itertuples(index=False)), key=repr)


def _spark_grouped(prep: pd.DataFrame, fold: fu.FusedFold) -> list[tuple[Any, ...]]:
    """``fold`` called as ``ExecContext.sorted_folds`` calls it: rows numbered in emission
    order (``mid``), shuffled (a group's rows come in no particular order), one Arrow table
    per block holding every view's rows of that block (several ``(cid, key)`` per group, as
    when hashes collide)."""
    if prep.empty:
        return []
    prep = prep.assign(mid=range(len(prep))).sample(frac=1, random_state=3)
    out = [fold(pa.Table.from_pandas(g, preserve_index=False)) for _, g in prep.groupby("blk", sort=False)]
    return sorted((tuple(r.values()) for t in out for r in t.to_pylist()), key=repr)


records = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 9), st.integers(0, 30 * HOUR)),
                   min_size=1, max_size=60)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_fused_pass_equals_one_pass_per_view(recs: list[tuple[str, int, int]]) -> None:
    values = [b'{"x": %d}' % x if x != 9 else b"not json" for _k, x, _t in recs]
    raw = pd.DataFrame({"key": [k.encode() for k, _x, _t in recs], "value": values, "timestamp": [t for *_, t in recs],
                        "partition": [i % 2 for i in range(len(recs))], "offset": list(range(len(recs)))})
    half = len(raw) // 2
    batches = [raw.iloc[:half].reset_index(drop=True), raw.iloc[half:].reset_index(drop=True)]

    def decoder() -> RawDecoder:
        return RawDecoder("src", Serdes.String(), Serdes.JSON(), None, 0, True)

    # unfused: one pass and one fold per view
    mapper = _Counting()
    shared = MapValuesStep("shared", mapper, with_key=False)
    acc_a, wm_a = _Acc(), _Max()
    expected = []
    for cid, (steps, emitter, cls, args) in enumerate(_views(shared)):
        prep = pd.concat(list(chain_function(decoder(), steps, emitter, acc_a, wm_a)(iter(batches))), ignore_index=True)
        rows = _grouped(prep, group_fn(_fold(cls, args, acc_a)), ["gk", "blk"])
        expected += [r + (cid,) for r in rows]
    calls_unfused = mapper.calls

    # fused: one pass, one fold over (cid, key, block)
    mapper = _Counting()
    shared = MapValuesStep("shared", mapper, with_key=False)
    acc_b, wm_b = _Acc(), _Max()
    views = _views(shared)
    consumers = [(cid, steps, emitter) for cid, (steps, emitter, _c, _a) in enumerate(views)]
    arrow = [pa.RecordBatch.from_pandas(b, preserve_index=False) for b in batches]
    out = list(fu.fused_chain_function(decoder(), consumers, acc_b, wm_b)(iter(arrow)))
    assert all(b.schema == fu.arrow_schema(fu.FUSED_AGG_SCHEMA) for b in out)
    prep = pd.concat([b.to_pandas() for b in out], ignore_index=True)
    fold = fu.FusedFold({cid: _fold(cls, args, acc_b) for cid, (_s, _e, cls, args) in enumerate(views)})
    got = _spark_grouped(prep, fold)

    assert sorted(expected, key=repr) == sorted(got, key=repr)
    assert acc_a.value == acc_b.value and wm_a.value == wm_b.value
    decoded = sum(1 for v in values if v != b"not json")
    assert mapper.calls == decoded and calls_unfused == 3 * decoded  # the shared step: once per record


def test_trie_shares_equal_prefixes_only() -> None:
    a, b, c = (DropNullKeyStep(n) for n in "abc")
    root = fu.step_trie([(0, (a, b), "e0"), (1, (a, c), "e1"), (2, (), "e2"), (3, (a, b), "e3")])
    assert root.ends == [(2, "e2", 0)] and list(root.children) == [id(a)]
    node_a = root.children[id(a)][1]
    assert [s for s, _n in node_a.children.values()] == [b, c]
    assert node_a.children[id(b)][1].ends == [(0, "e0", 0), (3, "e3", 0)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30))
def test_binary_array_equals_arrow_builder(values: list[bytes | None]) -> None:
    got = fu.binary_array(values)
    got.validate(full=True)
    assert got.equals(pa.array(values, type=pa.binary()))
    assert got.null_count == values.count(None)


def test_binary_array_falls_back_to_arrow_for_other_values() -> None:
    wide = memoryview(bytes(8)).cast("i")  # len() 2, 8 bytes
    for values in ([bytearray(b"ab"), None, memoryview(b"cd")], ["text", None], (b"x", b""), [b"a", wide]):
        got = fu.binary_array(values)
        got.validate(full=True)
        assert got.equals(pa.array(list(values), type=pa.binary()))


def test_fused_pass_and_fold_run_under_the_given_gc_thresholds() -> None:
    """The pass and the fold raise the worker's collector thresholds while they run (the
    topology's ``python.gc.thresholds``) and put the interpreter's back afterwards."""
    import gc

    seen: list[tuple[int, int, int]] = []

    def mapper(v: dict) -> dict:
        seen.append(gc.get_threshold())
        return v

    def add(k: Any, v: dict, a: int) -> int:
        seen.append(gc.get_threshold())
        return a + v["x"]

    before = gc.get_threshold()
    wanted = (before[0] + 1234, before[1] + 1, before[2] + 1)
    op = ops.AggregateOp("aggregate", "p", lambda: 0, add, None)
    consumers = [(0, (MapValuesStep("m", mapper, with_key=False),), AggPrepEmitter("p", None, None, None, None))]
    raw = pa.RecordBatch.from_pydict({"key": [b"a", b"b"], "value": [b'{"x": 1}', b'{"x": 2}'], "timestamp": [1, 2],
                                      "partition": [0, 0], "offset": [0, 1]})
    decoder = RawDecoder("src", Serdes.String(), Serdes.JSON(), None, 0, True)
    out = list(fu.fused_chain_function(decoder, consumers, _Acc(), _Max(), wanted)(iter([raw])))
    assert seen == [wanted, wanted] and gc.get_threshold() == before
    prep = pd.concat([b.to_pandas() for b in out], ignore_index=True)
    rows = _spark_grouped(prep, fu.FusedFold({0: PlainFold("p", op, _Acc())}, wanted))
    assert [r[3] for r in rows] == ["1", "2"]
    assert seen == [wanted] * 4 and gc.get_threshold() == before


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records, st.sampled_from([2, 1 << 16]))
def test_counts_counted_in_the_pass_equal_counts_of_one_row_per_record(recs: list[tuple[str, int, int]],
                                                                        limit: int) -> None:
    """A count over tumbling and hopping windows (a size that is no multiple of the
    advance, a store key serde and none) gives the same view rows when the pass counts its
    records per key and set of windows (``precount``; also when the counts are emitted
    every batch, ``limit`` 2) as with one row per record; the other views are unchanged."""
    values = [b'{"x": %d}' % x if x != 9 else b"not json" for _k, x, _t in recs]
    raw = pd.DataFrame({"key": [k.encode() for k, _x, _t in recs], "value": values, "timestamp": [t for *_, t in recs],
                        "partition": [i % 2 for i in range(len(recs))], "offset": list(range(len(recs)))})
    half = len(raw) // 2
    arrow = [pa.RecordBatch.from_pandas(b.reset_index(drop=True), preserve_index=False)
             for b in (raw.iloc[:half], raw.iloc[half:])]
    rekey = MapStep("rekey", lambda k, v: k + ("-odd" if v["x"] % 2 else "-even"), key_only=True)
    tumbling = TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(0))
    hopping = TimeWindows.of_size_and_grace(timedelta(hours=3), timedelta(0)).advance_by(timedelta(hours=2))
    views = [((), AggPrepEmitter("t", None, HOUR, HOUR, 24 * HOUR, keep_null_values=True, value_free=True),
              ops.AggregateOp("count", "t", None, None, tumbling)),
             ((rekey,), AggPrepEmitter("h", Serdes.String(), 3 * HOUR, 2 * HOUR, 6 * HOUR, keep_null_values=True,
                                          value_free=True), ops.AggregateOp("count", "h", None, None, hopping)),
             ((rekey,), AggPrepEmitter("a", None, HOUR, HOUR, 24 * HOUR, keep_null_values=True),
              ops.AggregateOp("aggregate", "a", lambda: 0, lambda k, v, a: a + v["x"], tumbling))]

    def run(counted: bool) -> tuple[list[tuple[Any, ...]], dict, int]:
        acc = _Acc()
        folds = {cid: TimeWindowFold(op.store, op, em.block, acc) for cid, (_s, em, op) in enumerate(views)}
        assert [f.value_free for f in folds.values()] == [True, True, False]
        pre = {cid: f.precounting() for cid, f in folds.items() if f.precounting() is not None} if counted else {}
        consumers = [(cid, steps, em) for cid, (steps, em, _op) in enumerate(views)]
        fn = fu.fused_chain_function(RawDecoder("src", Serdes.String(), Serdes.JSON(), None, 0, True), consumers,
                                     acc, _Max(), None, frozenset(pre))
        out = list(fn(iter(arrow)))
        prep = pd.concat([b.to_pandas() for b in out], ignore_index=True)
        return _spark_grouped(prep, fu.FusedFold({**folds, **pre})), acc.value, int((prep["cid"] < 2).sum())

    import batch_layer.translators._fused as fused_module

    saved = fused_module.PRECOUNT_MAX
    fused_module.PRECOUNT_MAX = limit
    try:
        rows, errors, count_rows = run(True)
        rows_b, errors_b, count_rows_b = run(False)
        assert rows == rows_b and errors == errors_b and count_rows <= count_rows_b
    finally:
        fused_module.PRECOUNT_MAX = saved


def test_counts_of_an_abandoned_pass_do_not_reach_the_next_one() -> None:
    """A pass stopped before its input ends (a task that failed) leaves its counts behind
    in the function object; the next pass with that function (a retry in the same worker)
    starts from none."""
    op = ops.AggregateOp("count", "t", None, None, TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(0)))
    emitter = AggPrepEmitter("t", None, HOUR, HOUR, 24 * HOUR, keep_null_values=True, value_free=True)
    raw = pa.RecordBatch.from_pydict({"key": [b"a", b"a", b"b"], "value": [b'{"x": 1}'] * 3, "timestamp": [1, 2, 3],
                                      "partition": [0, 0, 0], "offset": [0, 1, 2]})
    fn = fu.fused_chain_function(RawDecoder("src", Serdes.String(), Serdes.JSON(), None, 0, True),
                                 [(0, (), emitter)], _Acc(), _Max(), None, frozenset({0}))
    abandoned = fn(iter([raw, raw]))
    next(abandoned)  # the first batch's rows are counted, not emitted yet
    abandoned.close()
    out = pd.concat([b.to_pandas() for b in fn(iter([raw]))], ignore_index=True)
    fold = TimeWindowFold("t", op, 24 * HOUR, _Acc()).precounting()
    assert sorted((r[0], r[3]) for r in _spark_grouped(out, fu.FusedFold({0: fold}))) == [("a", "2"), ("b", "1")]
