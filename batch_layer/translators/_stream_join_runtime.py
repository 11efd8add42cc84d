"""Worker-side code of the KStream-KStream join translation (``stream_joins``): replays the
speed layer's own join processors (``JoinWindowProcessor`` and ``StreamStreamJoinProcessor``
of both sides, as Kafka's KStreamJoinWindow and KStreamKStreamJoin since 3.1) over
in-memory stores, fed one group's records in batch order, and returns what the join
forwards as a stream frame.

Input rows (one ``applyInPandas`` call): both sides' records as stream-frame columns plus
``side`` (0: the left stream, 1: the right one). A call is either a bucket of keys (inner
join: a result depends only on its key's records, so the rows are replayed key by key)
or one task's records (left / outer join: unmatched records are emitted from the shared
outer-join store when the task's stream time passes their window's close, so the whole
task is replayed in batch order, ``groupBy("p")``).

Each output record carries the order key of the record whose processing forwarded it
(``ts, p, o, src``; ``seq`` extended by 8 hex digits: its place among that record's
outputs), which is where the general executor places it. An inner result's timestamp is
``max`` of both records', i.e. the later record's: with the input in batch order it equals
the order key's timestamp. An unmatched left / outer record keeps its own, older
timestamp (see ``stream_joins``).

A record whose processing raises (a joiner that fails) stops there, as the speed layer's
processing-exception handler stops it: what was forwarded before stays forwarded; the
record is not put into its window store (``JoinWindowProcessor`` forwards before it puts)
and is counted as an error of the join node.
"""
from __future__ import annotations

import pickle
from dataclasses import replace
from typing import Any

import pandas as pd

from speed_layer.graph.nodes import GraphNode, StoreSpec
from speed_layer.processor.api import Record
from speed_layer.processor.builtin.joins import JoinWindowProcessor, StreamStreamJoinProcessor
from speed_layer.state.factories import build_store
from speed_layer.state.keys import decode_key, encode_key

from ..general.topology import FULL_HISTORY_MS
from ._accumulators import flush
from ._records import ORDER, Errors, _stream_frame, add_error, dumps, sorted_rows
from ._replay_context import ReplayContext


class JoinSpec:
    """What a replay needs: the four nodes (``windowed[side]``, ``joins[side]``) and the
    join's store specs."""

    def __init__(self, windowed: tuple[GraphNode, GraphNode], joins: tuple[GraphNode, GraphNode],
                 stores: tuple[StoreSpec, ...]) -> None:
        self.windowed, self.joins = windowed, joins
        self.stores = tuple(replace(s, in_memory=True, caching=False, logging=False,
                                    retention_ms=FULL_HISTORY_MS if s.kind == "window" else s.retention_ms)
                            for s in stores)


class StreamJoinGroup:
    """``applyInPandas`` over a bucket of keys (``by_task`` False) or one task's records
    (``by_task`` True): the join's output records (stream frame), see the module docstring."""

    def __init__(self, spec: JoinSpec, by_task: bool, errors_acc: Any) -> None:
        self.spec, self.by_task, self.errors_acc = spec, by_task, errors_acc

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        out: list[tuple[Any, ...]] = []
        spec = self.spec
        stores = {s.name: build_store(s, None, None) for s in spec.stores}
        emitted: list[Record[Any, Any]] = []
        joins = []
        windowed = []
        task_locals: dict[Any, Any] = {}  # one task: both sides share the join's time tracker
        for side in (0, 1):
            j = StreamStreamJoinProcessor(spec.joins[side])
            j.init(ReplayContext(stores, emitted.append, task_locals))
            w = JoinWindowProcessor(spec.windowed[side])
            w.init(ReplayContext(stores, j.process))
            joins.append(j)
            windowed.append(w)
        if self.by_task:
            rows = sorted_rows(pdf, "p", ORDER + ["side"], ["k", "v"])
            rows = [(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows]  # drop the group column
        else:
            keyed = sorted_rows(pdf, "k", ORDER + ["side"], ["v"])
            rows = [(r[1], r[2], r[3], r[4], r[5], r[6], r[0], r[7]) for r in keyed]
        for ts, p, o, src, seq, side, kb, vb in rows:
            key = None if kb is None else decode_key(kb)
            value = None if vb is None else pickle.loads(vb)
            emitted.clear()
            try:
                windowed[side].process(Record(key, value, ts))
            except Exception:  # noqa: BLE001 - the processing-exception handler stops the record here
                add_error(errs, spec.joins[side].name, (src, p, o))
            for i, rec in enumerate(emitted):
                out.append((None if rec.key is None else encode_key(rec.key), None if rec.value is None else dumps(rec.value),
                            rec.timestamp, p, o, src, f"{seq}{i:08x}"))
        flush(self.errors_acc, errs)
        return _stream_frame(out)


__all__ = ["JoinSpec", "StreamJoinGroup"]
