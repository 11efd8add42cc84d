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
* one shuffle by ``(cid, key bucket, block)``, sorted by Spark within each partition in
  batch order (:func:`fold_order`), and one ``groupBy(cid, key bucket, block).applyInArrow``
  calls the view's own fold on its groups (:class:`FusedFold`), each fold exactly the
  function the unfused plan would call on the same rows, so the results and error counts
  are the same. The rows reach Python already in batch order (no sort in Python) and
  leave it as Arrow arrays (no pandas frames on either side).

Record tuples, frames and error accounting are those of :mod:`._runtime`.
"""
from __future__ import annotations

from itertools import groupby
from operator import itemgetter
from typing import Any, Callable, Iterator

import pyarrow as pa

from . import _runtime as rt

#: :data:`_runtime.AGG_SCHEMA` rows tagged with the consumer (view) they feed
FUSED_AGG_SCHEMA = "cid int, " + rt.AGG_SCHEMA
#: :data:`_runtime.VIEW_SCHEMA` rows tagged with the consumer (view) they belong to
FUSED_VIEW_SCHEMA = rt.VIEW_SCHEMA + ", cid int"


class _TrieNode:
    """Consumers whose step chains share a prefix: ``ends`` emit here, ``children`` run one
    more step (keyed by the step object's identity)."""

    __slots__ = ("ends", "children")

    def __init__(self) -> None:
        self.ends: list[tuple[int, Any]] = []  # (cid, emitter)
        self.children: dict[int, tuple[rt.Step, _TrieNode]] = {}


def step_trie(consumers: list[tuple[int, tuple[rt.Step, ...], Any]]) -> _TrieNode:
    """The trie of ``consumers`` ``(cid, steps, emitter)``: equal step prefixes (the same
    ``Step`` objects in the same order) share their path."""
    root = _TrieNode()
    for cid, steps, emitter in consumers:
        node = root
        for step in steps:
            entry = node.children.get(id(step))
            if entry is None:
                entry = node.children[id(step)] = (step, _TrieNode())
            node = entry[1]
        node.ends.append((cid, emitter))
    return root


_ARROW_TYPES = {"binary": pa.binary(), "long": pa.int64(), "int": pa.int32(), "string": pa.string()}


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a DDL string of :mod:`._runtime` (binary, long, int, string)."""
    return pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in (f.split() for f in ddl.split(","))])


def fused_chain_function(decoder: Any, consumers: list[tuple[int, tuple[rt.Step, ...], Any]], errors_acc: Any,
                         wm_acc: Any) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one input feeding several consumers ``(cid, steps,
    emitter)`` (``_runtime.AggPrepEmitter`` objects): decode each row once (the batch converted to
    pandas as ``mapInPandas`` would), run it through the step trie (a step that raises drops
    the record for every consumer below it and counts it at the step's node, as
    ``_runtime.chain_function`` does), emit each consumer's records with its ``cid``
    (:data:`FUSED_AGG_SCHEMA`, built as Arrow arrays: no pandas frame on the way out). Rows
    of one input record come in the order the trie walk emits them."""
    root = step_trie(consumers)
    schema = arrow_schema(FUSED_AGG_SCHEMA)

    def walk(node: _TrieNode, recs: list[rt.Rec], out: list[tuple[Any, ...]], errs: rt.Errors, memo: dict[Any, Any]) -> None:
        for cid, emitter in node.ends:
            for r in recs:
                prep = emitter.prepare(r, errs, memo)
                if prep is not None:
                    gk, blocks, kb, vb = prep
                    for b in blocks:
                        out.append((cid, gk, b, kb, vb, r[2], r[3], r[4], r[5], r[6]))
        for step, child in node.children.values():
            nxt: list[rt.Rec] = []
            for r in recs:
                try:
                    res = step(r)
                except Exception:  # noqa: BLE001 - a dead letter of the speed layer
                    rt.add_error(errs, step.node, rt.rid(r))
                    continue
                if res:
                    nxt.extend(res)
            if nxt:
                walk(child, nxt, out, errs, memo)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        errs: rt.Errors = {}
        for batch in batches:
            out: list[tuple[Any, ...]] = []
            for rec in decoder.records(batch.to_pandas(), errs):
                walk(root, [rec], out, errs, {})
            yield arrow_batch(schema, out)
        rt.flush(errors_acc, errs, wm_acc if decoder.watermark else None, decoder.wm)

    return run


def arrow_batch(schema: pa.Schema, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """A record batch of ``schema`` from row tuples (one value per field, in order)."""
    cols: list[Any] = list(zip(*rows)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)


#: the columns of :data:`FUSED_AGG_SCHEMA` a fold reads, as ``_Fold.per_key`` gives them
_FOLD_COLUMNS = ("gk", "ts", "p", "o", "src", "seq", "k", "v")


def fold_order(folds: dict[int, Any]) -> list[Any]:
    """Spark sort columns putting the rows of :data:`FUSED_AGG_SCHEMA` (plus ``mid``, a
    ``monotonically_increasing_id`` taken right after the ``mapInArrow`` pass) in the order
    :class:`FusedFold` needs: by group ``(cid, bk, blk)``, then key ``gk``, then batch order
    ``(ts, table changes first, p, o, src, seq)`` as ``_runtime.ranked_rows`` sorts (a
    table change is a row whose ``src`` is in its fold's ``table_srcs``), then ``mid``: rows
    of one source record that share its order key keep the order in which the pass emitted
    them (a stable sort's order). Binary and string columns compare as Python compares
    ``bytes`` and ``str`` of ASCII (unsigned bytes, lexicographic)."""
    from pyspark.sql import functions as F

    table = None
    for cid, fold in sorted(folds.items()):
        if fold.table_srcs:
            cond = (F.col("cid") == cid) & F.col("src").isin(sorted(fold.table_srcs))
            table = cond if table is None else table | cond
    rank = [] if table is None else [F.when(table, F.lit(0)).otherwise(F.lit(1))]
    return [F.col(c) for c in ("cid", "bk", "blk", "gk", "ts")] + rank + [F.col(c) for c in ("p", "o", "src", "seq", "mid")]


class FusedFold:
    """``applyInArrow`` over one group of :data:`FUSED_AGG_SCHEMA` rows (one ``cid``, one key
    bucket, one block), sorted by :func:`fold_order`: the fold of consumer ``cid``
    (``folds[cid]``, a ``_runtime._Fold``) over the group's keys in that order, its view rows
    tagged with ``cid`` (:data:`FUSED_VIEW_SCHEMA`, an Arrow table)."""

    def __init__(self, folds: dict[int, Any]) -> None:
        self.folds = folds
        self.schema = arrow_schema(FUSED_VIEW_SCHEMA)

    def __call__(self, table: pa.Table) -> pa.Table:
        cid = table.column("cid")[0].as_py()
        fold = self.folds[cid]
        cols = [table.column(c).to_pylist() for c in _FOLD_COLUMNS]
        errs: rt.Errors = {}
        rows = fold.fold(groupby(zip(*cols), key=itemgetter(0)), table.column("blk")[0].as_py(), errs)
        rt.flush(fold.errors_acc, errs)
        return pa.Table.from_batches([arrow_batch(self.schema, [r + (cid,) for r in rows])])


def arrow_group_fn(obj: Callable[[pa.Table], pa.Table]) -> Callable[[pa.Table], pa.Table]:
    """A one-argument function for ``applyInArrow`` (Spark inspects the signature, as for
    ``_runtime.group_fn``)."""

    def fn(table: pa.Table) -> pa.Table:
        return obj(table)

    return fn
