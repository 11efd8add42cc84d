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
* one ``groupBy(cid, key bucket, block).applyInPandas`` calls the view's own fold on its
  groups (:class:`FusedFold`), each fold exactly the function the unfused plan would call
  on the same rows, so the results and error counts are the same.

Record tuples, frames and error accounting are those of :mod:`._runtime`.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import pandas as pd
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
    emitter)`` (emitters of :data:`_runtime.AGG_SCHEMA`): decode each row once (the batch
    converted to pandas as ``mapInPandas`` would), run it through the step trie (a step that
    raises drops the record for every consumer below it and counts it at the step's node,
    as ``_runtime.chain_function`` does), emit each consumer's records with its ``cid``
    (:data:`FUSED_AGG_SCHEMA`, built as Arrow arrays: no pandas frame on the way out)."""
    root = step_trie(consumers)
    cids = sorted({c for c, _s, _e in consumers})
    schema = arrow_schema(FUSED_AGG_SCHEMA)

    def walk(node: _TrieNode, recs: list[rt.Rec], bufs: dict[int, list[list[Any]]], errs: rt.Errors, memo: dict[Any, Any]) -> None:
        for cid, emitter in node.ends:
            buf = bufs[cid]
            for r in recs:
                emitter.emit(r, buf, errs, memo)
        for step, child in node.children.values():
            nxt: list[rt.Rec] = []
            for r in recs:
                try:
                    out = step(r)
                except Exception:  # noqa: BLE001 - a dead letter of the speed layer
                    rt.add_error(errs, step.node, rt.rid(r))
                    continue
                if out:
                    nxt.extend(out)
            if nxt:
                walk(child, nxt, bufs, errs, memo)

    emitters = {cid: emitter for cid, _s, emitter in consumers}

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        errs: rt.Errors = {}
        for batch in batches:
            bufs = {cid: emitters[cid].start() for cid in cids}
            for rec in decoder.records(batch.to_pandas(), errs):
                walk(root, [rec], bufs, errs, {})
            cols: list[list[Any]] = [[]]
            for cid in cids:
                buf = bufs[cid]
                cols[0].extend([cid] * len(buf[0]))
                for i, col in enumerate(buf, 1):
                    if i == len(cols):
                        cols.append([])
                    cols[i].extend(col)
            yield pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)
        rt.flush(errors_acc, errs, wm_acc if decoder.watermark else None, decoder.wm)

    return run


class FusedFold:
    """``applyInPandas`` over one group of :data:`FUSED_AGG_SCHEMA` rows (one ``cid``): the
    fold of consumer ``cid`` (``folds[cid]``, a ``_runtime._Fold``), its view rows tagged
    with ``cid`` (:data:`FUSED_VIEW_SCHEMA`)."""

    def __init__(self, folds: dict[int, Callable[[pd.DataFrame], pd.DataFrame]]) -> None:
        self.folds = folds

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        cid = int(pdf["cid"].iloc[0])
        out = self.folds[cid](pdf)
        out["cid"] = pd.Series([cid] * len(out), dtype="int32")
        return out
