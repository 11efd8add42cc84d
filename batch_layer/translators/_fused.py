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

Record tuples, frames and error accounting are those of :mod:`._runtime`.
"""
from __future__ import annotations

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

    def walk(node: _TrieNode, recs: list[rt.Rec], out: list[tuple[Any, ...]], errs: rt.Errors, memo: tuple[rt.Memo, rt.Memo]) -> None:
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
                walk(root, [rec], out, errs, ({}, {}))
            yield arrow_batch(schema, out)
        rt.flush(errors_acc, errs, wm_acc if decoder.watermark else None, decoder.wm)

    return run


def arrow_batch(schema: pa.Schema, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """A record batch of ``schema`` from row tuples (one value per field, in order)."""
    cols: list[Any] = list(zip(*rows)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)


#: the columns of :data:`FUSED_AGG_SCHEMA` a fold reads, as ``_Fold.per_key`` gives them,
#: then ``mid`` (see :class:`FusedFold`)
_FOLD_COLUMNS = ("gk", "ts", "p", "o", "src", "seq", "k", "v", "mid")
_BATCH_ORDER = itemgetter(1, 2, 3, 4, 5, 8)  # ts, p, o, src, seq, mid


class FusedFold:
    """``applyInArrow`` over one group of :data:`FUSED_AGG_SCHEMA` rows plus ``mid`` (a
    ``monotonically_increasing_id`` taken right after the ``mapInArrow`` pass): the rows of
    one or more ``(cid, block)`` pairs (``ExecContext.sorted_folds`` groups by a hash of
    ``(cid, key bucket, block)``, so that Spark sorts the groups by one long, a radix sort).
    Each pair's rows are split by key and each key's rows sorted in batch order ``(ts, table
    changes first, p, o, src, seq)`` as ``_runtime.ranked_rows`` sorts them (a table change
    is a row whose ``src`` is in its fold's ``table_srcs``), then by ``mid``: rows of one
    source record that share its order key keep the order in which the pass emitted them.
    Then the fold of consumer ``cid`` (``folds[cid]``, a ``_runtime._Fold``) runs over them;
    its view rows are tagged with ``cid`` (:data:`FUSED_VIEW_SCHEMA`, an Arrow table)."""

    def __init__(self, folds: dict[int, Any]) -> None:
        self.folds = folds
        self.schema = arrow_schema(FUSED_VIEW_SCHEMA)

    def __call__(self, table: pa.Table) -> pa.Table:
        parts: dict[tuple[int, int], dict[bytes, list[tuple[Any, ...]]]] = {}  # (cid, blk) -> key -> rows
        for cid, blk, row in zip(table.column("cid").to_pylist(), table.column("blk").to_pylist(),
                                 zip(*[table.column(c).to_pylist() for c in _FOLD_COLUMNS])):
            by_key = parts.get((cid, blk))
            if by_key is None:
                by_key = parts[(cid, blk)] = {}
            rows_of = by_key.get(row[0])
            if rows_of is None:
                rows_of = by_key[row[0]] = []
            rows_of.append(row)
        out: list[tuple[Any, ...]] = []
        for (cid, blk), by_key in parts.items():
            fold = self.folds[cid]
            order: Callable[[tuple[Any, ...]], Any] = _BATCH_ORDER
            if fold.table_srcs:
                tables = fold.table_srcs
                order = lambda r: (r[1], 0 if r[4] in tables else 1, r[2], r[3], r[4], r[5], r[8])  # noqa: E731
            keys = []
            for gk, rows_of in by_key.items():
                rows_of.sort(key=order)
                keys.append((gk, [r[:8] for r in rows_of]))  # without mid: the rows of _Fold.per_key
            errs: rt.Errors = {}
            rows = fold.fold(keys, blk, errs)
            rt.flush(fold.errors_acc, errs)
            out.extend(r + (cid,) for r in rows)
        return pa.Table.from_batches([arrow_batch(self.schema, out)])


def arrow_group_fn(obj: Callable[[pa.Table], pa.Table]) -> Callable[[pa.Table], pa.Table]:
    """A one-argument function for ``applyInArrow`` (Spark inspects the signature, as for
    ``_runtime.group_fn``)."""

    def fn(table: pa.Table) -> pa.Table:
        return obj(table)

    return fn
