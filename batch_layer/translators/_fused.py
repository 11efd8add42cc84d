"""Worker-side code of fused aggregations: several aggregation views computed by ONE
``mapInArrow`` pass per input and ONE shuffle (``ExecContext.views``).

A plan whose views are several aggregations of one stream (the flights pipeline: four views
of one joined stream) would otherwise decode and join the stream once, persist it, then
read it back, unpickle and re-pickle it once per view, each view with its own shuffle. Fused:

* each input (a raw topic, or an already computed stream frame) is decoded once; its
  records run through a TRIE of the consumers' step chains (a step shared by several
  views, i.e. the same ``Step`` object at the same position, runs once per record, as in
  the speed layer where a node forwards one record to each of its children); each view's
  records are emitted by its ``AggPrepEmitter``, tagged with the view's consumer id ``cid``
  (:data:`FUSED_AGG_SCHEMA`). A step's output object goes to every chain below it (as a
  speed-layer node forwards one object to each child), and a key or value object emitted
  for several views is encoded once (the emitters' ``memo``, by object identity, per input
  record): user functions must not mutate their input in place, as in the speed layer;
* one shuffle by a hash of ``(cid, key bucket, block)``, and one ``applyInArrow`` per
  group (:class:`FusedFold`) that calls each view's own fold on its rows, each key's rows
  sorted in batch order, each fold exactly the function the unfused plan would call on
  the same rows, so the results and error counts are the same. Rows enter and leave
  Python as Arrow arrays (no pandas frames).

Record tuples, frames and error accounting are those of :mod:`._records`.
"""
from __future__ import annotations

from array import array
from itertools import accumulate, groupby
from operator import itemgetter
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from speed_layer.runtime import gc_tuning

from ._accumulators import flush
from ._agg_prep import Memo, window_starts_range
from ._chain import Step
from ._records import AGG_SCHEMA, VIEW_SCHEMA, Errors, Rec, add_error, rid

#: :data:`_records.AGG_SCHEMA` rows tagged with the consumer (view) they feed
FUSED_AGG_SCHEMA = "cid int, " + AGG_SCHEMA
#: :data:`_records.VIEW_SCHEMA` rows tagged with the consumer (view) they belong to
FUSED_VIEW_SCHEMA = VIEW_SCHEMA + ", cid int"


class _TrieNode:
    """Consumers whose step chains share a prefix: ``ends`` emit here, ``children`` run one
    more step (keyed by the step object's identity)."""

    __slots__ = ("ends", "children")

    def __init__(self) -> None:
        self.ends: list[tuple[int, Any, int]] = []  # (cid, emitter, rank)
        self.children: dict[int, tuple[Step, _TrieNode]] = {}


def step_trie(consumers: list[tuple[Any, ...]]) -> _TrieNode:
    """The trie of ``consumers`` ``(cid, steps, emitter[, rank])``: equal step prefixes (the
    same ``Step`` objects in the same order) share their path."""
    root = _TrieNode()
    for cid, steps, emitter, *rank in consumers:
        node = root
        for step in steps:
            entry = node.children.get(id(step))
            if entry is None:
                entry = node.children[id(step)] = (step, _TrieNode())
            node = entry[1]
        node.ends.append((cid, emitter, rank[0] if rank else 0))
    return root


#: the most ``(key, set of windows)`` counts a fused pass holds before it emits them
#: (``fused_chain_function``'s ``precount``)
PRECOUNT_MAX = 1 << 16

_ARROW_TYPES = {"binary": pa.binary(), "long": pa.int64(), "int": pa.int32(), "string": pa.string()}


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a DDL string of :mod:`._records` (binary, long, int, string)."""
    return pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in (f.split() for f in ddl.split(","))])


def fused_chain_function(decoder: Any, consumers: list[tuple[Any, ...]], errors_acc: Any, wm_acc: Any,
                         gc_thresholds: tuple[int, int, int] | None = None, precount: frozenset[int] = frozenset(),
                         ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one input feeding several consumers ``(cid, steps,
    emitter[, rank])`` (``_agg_prep.AggPrepEmitter`` objects): decode each row once (the batch converted to
    pandas as ``mapInPandas`` would), run it through the step trie (a step that raises drops
    the record for every consumer below it and counts it at the step's node, as
    ``_chain.chain_function`` does), emit each consumer's records with its ``cid``
    (:data:`FUSED_AGG_SCHEMA`, built as Arrow arrays: no pandas frame on the way out).

    Rows of one input record come in the order of their consumers' ``rank`` (default 0),
    then in the order the trie walk emits them: a view reading the input through several
    paths (branches merged again) gets ranks in the order the speed layer delivers a
    record along those paths (``ExecContext._fused``), which the fold keeps for rows with
    equal order keys (``mid``).

    ``gc_thresholds`` (the topology's ``python.gc.thresholds``, see
    ``speed_layer.runtime.gc_tuning``) are the worker's collector thresholds while the pass
    runs: the rows of a batch live until it is converted, so with CPython's defaults they
    set off a young collection every 700 rows and walk the worker's heap again and again.

    ``precount``: consumers whose fold is a count over time windows
    (``_folds.TimeWindowFold.precounting``). Their records are not emitted one row each:
    the pass counts them per ``(key, set of windows)`` (the records of one key whose
    timestamps fall in the same windows) and emits one row per such set and block, its
    ``ts`` the largest of the set and its ``v`` the number of records (ASCII digits), when
    the task's input ends or the counts reach :data:`PRECOUNT_MAX` entries. A count's
    aggregator (``agg + 1``, the speed layer's) ignores key, value and order and cannot
    fail, so the sums are the counts; the view's timestamp is the largest record timestamp
    of the window either way."""
    root = step_trie(consumers)
    schema = arrow_schema(FUSED_AGG_SCHEMA)
    ranks = 1 + max((c[3] for c in consumers if len(c) > 3), default=0)

    def walk(node: _TrieNode, recs: list[Rec], outs: list[list[tuple[Any, ...]]], errs: Errors,
             memo: tuple[Memo, Memo]) -> None:
        for cid, emitter, rank in node.ends:
            if cid in precount:
                count(cid, emitter, recs, errs, memo)
                continue
            append = outs[rank].append
            for r in recs:
                prep = emitter.prepare(r, errs, memo)
                if prep is not None:
                    gk, blocks, kb, vb = prep
                    for b in blocks:
                        append((cid, gk, b, kb, vb, r[2], r[3], r[4], r[5], r[6]))
        for step, child in node.children.values():
            nxt: list[Rec] = []
            for r in recs:
                try:
                    res = step(r)
                except Exception:  # noqa: BLE001 - a dead letter of the speed layer
                    add_error(errs, step.node, rid(r))
                    continue
                if res:
                    nxt.extend(res)
            if nxt:
                walk(child, nxt, outs, errs, memo)

    # (cid, gk, kb, first and last window start) -> [n, max ts, p, o, src, seq, blocks]
    counts: dict[tuple[Any, ...], list[Any]] = {}

    def count(cid: int, emitter: Any, recs: list[Rec], errs: Errors, memo: tuple[Memo, Memo]) -> None:
        size, adv = emitter.size, emitter.adv
        for r in recs:
            prep = emitter.prepare(r, errs, memo)
            if prep is not None and prep[1]:
                gk, blocks, kb, _ = prep
                ts = r[2]
                first, last = window_starts_range(ts, size, adv)
                slot = (cid, gk, kb, first, last)
                entry = counts.get(slot)
                if entry is None:
                    counts[slot] = [1, ts, r[3], r[4], r[5], r[6], blocks]
                else:
                    entry[0] += 1
                    if ts > entry[1]:
                        entry[1] = ts

    def counted() -> list[tuple[Any, ...]]:
        rows = [(cid, gk, b, kb, b"%d" % n, ts, p, o, src, seq)
                for (cid, gk, kb, _f, _l), (n, ts, p, o, src, seq, blocks) in counts.items() for b in blocks]
        counts.clear()
        return rows

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        held = gc_tuning.acquire(gc_thresholds)
        try:
            yield from passes(batches)
        finally:
            if held:
                gc_tuning.release()

    def passes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        errs: Errors = {}
        counts.clear()  # nothing left from a task that failed in this worker
        for batch in batches:
            out: list[tuple[Any, ...]] = []
            if ranks == 1:
                outs = [out]
                for rec in decoder.records(batch.to_pandas(), errs):
                    walk(root, [rec], outs, errs, ({}, {}))
            else:
                for rec in decoder.records(batch.to_pandas(), errs):
                    outs = [[] for _ in range(ranks)]
                    walk(root, [rec], outs, errs, ({}, {}))
                    for rows in outs:
                        out.extend(rows)
            if len(counts) >= PRECOUNT_MAX:
                out.extend(counted())
            yield arrow_batch(schema, out)
        if counts:
            yield arrow_batch(schema, counted())
        flush(errors_acc, errs, wm_acc if decoder.watermark else None, decoder.wm)

    return run


def arrow_batch(schema: pa.Schema, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """A record batch of ``schema`` from row tuples (one value per field, in order)."""
    cols: list[Any] = list(zip(*rows)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays([binary_array(c) if f.type == _BINARY else pa.array(c, type=f.type)
                                       for c, f in zip(cols, schema)], schema=schema)


_BINARY = pa.binary()
_MAX_OFFSET = (1 << 31) - 1


def binary_array(values: Any) -> pa.Array:
    """``pa.array(values, pa.binary())`` (``bytes`` or None), built from one ``b"".join``
    and its offsets: ``pa.array`` appends the values one by one, a cost that grows with
    their size (the fused pass's ~450-byte joined flights). Anything else (past 32-bit
    offsets, a value ``join`` refuses) goes to ``pa.array``."""
    n = len(values)
    nulls = values.count(None)
    if nulls == n:
        return pa.nulls(n, _BINARY)
    valid, present = None, values
    if nulls:
        valid = pa.array([x is not None for x in values], pa.bool_()).buffers()[1]
        present = [b"" if x is None else x for x in values]
    try:
        data = b"".join(present)
    except TypeError:
        return pa.array(values, type=_BINARY)
    if len(data) > _MAX_OFFSET:
        return pa.array(values, type=_BINARY)
    offsets = array("i", [0])
    offsets.extend(accumulate(map(len, present)))
    if offsets[-1] != len(data):  # a buffer whose len() counts items wider than a byte
        return pa.array(values, type=_BINARY)
    return pa.Array.from_buffers(_BINARY, n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


#: the columns of :data:`FUSED_AGG_SCHEMA` a fold reads, in the order of the rows
#: ``_Fold.per_key`` gives (``k`` null: the key bytes are ``gk``'s, see ``AggPrepEmitter``)
_FOLD_COLUMNS = ("gk", "ts", "p", "o", "src", "seq", "k", "v")
#: batch order of one key's rows, ``(ts, [table change first,] p, o, src, seq)``, then
#: ``mid``; ``rank`` is inserted after ``ts`` when a fold mixes table changes in
_ORDER = ("ts", "p", "o", "src", "seq", "mid")


class FusedFold:
    """``applyInArrow`` over one group of :data:`FUSED_AGG_SCHEMA` rows plus ``mid`` (a
    ``monotonically_increasing_id`` taken right after the ``mapInArrow`` pass): the rows of
    one or more ``(cid, block)`` pairs (``ExecContext.sorted_folds`` groups by a hash of
    ``(cid, key bucket, block)``, so that Spark sorts the groups by one long, a radix sort).

    Arrow sorts the group by ``(cid, blk, gk)`` and then each key's rows in batch order
    ``(ts, table changes first, p, o, src, seq)`` as ``_records.ranked_rows`` orders them
    (a table change is a row whose ``src`` is in its fold's ``table_srcs``), then by
    ``mid``: rows of one source record that share its order key keep the order in which
    the pass emitted them. Then the fold of consumer ``cid`` (``folds[cid]``, a
    ``_folds._Fold``) runs over each ``(cid, blk)``'s keys, each key's rows
    ``(gk, ts, p, o, src, seq, k, v)`` (``k`` is ``gk`` where the row has none); its view
    rows are tagged with ``cid`` (:data:`FUSED_VIEW_SCHEMA`, an Arrow table). The worker's
    collector thresholds are ``gc_thresholds`` during the call (see
    :func:`fused_chain_function`)."""

    def __init__(self, folds: dict[int, Any], gc_thresholds: tuple[int, int, int] | None = None) -> None:
        self.folds = folds
        self.schema = arrow_schema(FUSED_VIEW_SCHEMA)
        self.gc_thresholds = gc_thresholds

    def sorted_table(self, table: pa.Table) -> pa.Table:
        """``table`` sorted by ``(cid, blk, gk)`` then batch order (see the class docstring)."""
        order = list(_ORDER)
        cids = pc.unique(table.column("cid")).to_pylist()
        ranked = [c for c in cids if self.folds[c].table_srcs]
        if ranked:
            src = table.column("src")
            rank = pa.repeat(1, table.num_rows).cast(pa.int8())
            for c in ranked:  # 0 for a table change of a fold mixing tables in
                change = pc.is_in(src, value_set=pa.array(sorted(self.folds[c].table_srcs), pa.int32()))
                if len(cids) > 1:
                    change = pc.and_(change, pc.equal(table.column("cid"), c))
                rank = pc.if_else(change, pa.scalar(0, pa.int8()), rank)
            table = table.append_column("rank", rank)
            order.insert(1, "rank")
        keys = [(c, "ascending") for c in ("cid", "blk", "gk", *order)]
        return table.take(pc.sort_indices(table, sort_keys=keys))

    def __call__(self, table: pa.Table) -> pa.Table:
        held = gc_tuning.acquire(self.gc_thresholds)
        try:
            return self.folded(table)
        finally:
            if held:
                gc_tuning.release()

    def folded(self, table: pa.Table) -> pa.Table:
        """The view rows of ``table`` (see the class docstring)."""
        out: list[tuple[Any, ...]] = []
        if table.num_rows:
            table = self.sorted_table(table)
            cols = {c: table.column(c).to_pylist() for c in _FOLD_COLUMNS}
            k = table.column("k")
            if k.null_count == len(k):
                cols["k"] = cols["gk"]
            elif k.null_count:
                cols["k"] = [g if x is None else x for g, x in zip(cols["gk"], cols["k"])]
            rows = list(zip(*(cols[c] for c in _FOLD_COLUMNS)))
            cid, blk = table.column("cid").to_pylist(), table.column("blk").to_pylist()
            i, n = 0, len(rows)
            while i < n:  # one (cid, blk) at a time (almost always the whole group)
                j = n if cid[i] == cid[-1] and blk[i] == blk[-1] else _run_end(cid, blk, i)
                fold = self.folds[cid[i]]
                errs: Errors = {}
                view_rows = fold.fold(groupby(rows[i:j] if j - i < n else rows, key=itemgetter(0)), blk[i], errs)
                flush(fold.errors_acc, errs)
                c = cid[i]
                out.extend(r + (c,) for r in view_rows)
                i = j
        return pa.Table.from_batches([arrow_batch(self.schema, out)])


def _run_end(cid: list[int], blk: list[int], i: int) -> int:
    """The end of the run of rows with ``(cid[i], blk[i])`` starting at ``i``."""
    j = i + 1
    while j < len(cid) and cid[j] == cid[i] and blk[j] == blk[i]:
        j += 1
    return j


def arrow_group_fn(obj: Callable[[pa.Table], pa.Table]) -> Callable[[pa.Table], pa.Table]:
    """A one-argument function for ``applyInArrow`` (Spark inspects the signature, as for
    ``_records.group_fn``)."""

    def fn(table: pa.Table) -> pa.Table:
        return obj(table)

    return fn
