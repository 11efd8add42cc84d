"""Worker-side code of a fused chain of stateless nodes: the decoders (raw Delta rows or a
stream frame to record tuples), the stateless nodes' steps, the stream emitter, and the
``mapInPandas`` function that runs a chain (:func:`chain_function`).

Record tuples, frames and error accounting are those of :mod:`._records`.
"""
from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterator

import pandas as pd

from speed_layer.state.keys import decode_key, encode_key

from ._accumulators import flush
from ._records import RECORD_COLUMNS, STREAM_SCHEMA, Errors, Rec, add_error, dumps, rid, typed_frame


# --------------------------------------------------------------------------- decoders
class RawDecoder:
    """Decodes rows of a raw Delta table (``key, value, timestamp, partition, offset``) with
    the source node's serdes and timestamp extractor, as ``StreamTask.process`` does.

    The extractor is called as ``extractor(key, value, record_timestamp, -1)``: the batch layer
    has no per-task stream time, and Kafka documents ``-1`` as "partition time unknown".
    A record whose extracted timestamp is None or negative is dropped and counted.
    """

    def __init__(self, node: str, key_serde: Any, value_serde: Any, extractor: Any, src: int, watermark: bool) -> None:
        self.node, self.key_serde, self.value_serde = node, key_serde, value_serde
        self.extractor, self.src, self.watermark = extractor, src, watermark
        self.wm = -1

    def records(self, pdf: pd.DataFrame, errs: Errors) -> Iterator[Rec]:
        ks, vs, ex, src, node = self.key_serde, self.value_serde, self.extractor, self.src, self.node
        stamps = pdf["timestamp"].fillna(-1).astype("int64").tolist()
        wm = self.wm
        for kb, vb, raw_ts, p, o in zip(pdf["key"].tolist(), pdf["value"].tolist(), stamps,
                                        pdf["partition"].astype("int64").tolist(), pdf["offset"].astype("int64").tolist()):
            try:
                key = ks.deserialize(kb)
                value = vs.deserialize(vb)
                ts = ex(key, value, raw_ts, -1) if ex is not None else raw_ts
                if ts is None or ts < 0:
                    raise ValueError(f"invalid (negative) timestamp {ts}")
                ts = int(ts)
            except Exception:  # noqa: BLE001 - a dead letter of the speed layer
                add_error(errs, node, (src, p, o))
                continue
            if ts > wm:
                wm = ts
            yield (key, value, ts, p, o, src, "")
        if self.watermark:
            self.wm = wm


class FrameDecoder:
    """Decodes rows of a stream frame (see :mod:`._records`)."""

    wm = -1
    watermark = False

    def records(self, pdf: pd.DataFrame, errs: Errors) -> Iterator[Rec]:
        for kb, vb, ts, p, o, src, seq in zip(pdf["k"].tolist(), pdf["v"].tolist(), pdf["ts"].tolist(), pdf["p"].tolist(),
                                               pdf["o"].tolist(), pdf["src"].tolist(), pdf["seq"].tolist()):
            yield (None if kb is None else decode_key(kb), None if vb is None else pickle.loads(vb), ts, p, o, src, seq)


# --------------------------------------------------------------------------- steps
class Step(ABC):
    """One stateless node of a fused chain: ``step(rec) -> list of records`` (may raise:
    the record is then counted as an error of ``node``)."""

    node: str = ""
    expensive = False

    @abstractmethod
    def __call__(self, r: Rec) -> list[Rec] | None:
        """The records ``r`` becomes (None or [] drops it)."""


class FilterStep(Step):
    def __init__(self, node: str, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        self.node, self.predicate, self.negate = node, predicate, negate

    def __call__(self, r: Rec) -> list[Rec] | None:
        return [r] if bool(self.predicate(r[0], r[1])) != self.negate else None


class MapStep(Step):
    def __init__(self, node: str, mapper: Callable[[Any, Any], Any], key_only: bool) -> None:
        self.node, self.mapper, self.key_only = node, mapper, key_only

    def __call__(self, r: Rec) -> list[Rec]:
        if self.key_only:
            return [(self.mapper(r[0], r[1]),) + r[1:]]
        k, v = self.mapper(r[0], r[1])
        return [(k, v) + r[2:]]


class MapValuesStep(Step):
    def __init__(self, node: str, mapper: Callable[..., Any], with_key: bool) -> None:
        self.node, self.mapper, self.with_key = node, mapper, with_key

    def __call__(self, r: Rec) -> list[Rec]:
        v = self.mapper(r[0], r[1]) if self.with_key else self.mapper(r[1])
        return [(r[0], v) + r[2:]]


class FlatMapStep(Step):
    def __init__(self, node: str, mapper: Callable[..., Any], values_only: bool, with_key: bool) -> None:
        self.node, self.mapper, self.values_only, self.with_key = node, mapper, values_only, with_key

    def __call__(self, r: Rec) -> list[Rec]:
        head, seq = r[2:6], r[6]
        if self.values_only:
            vs = list(self.mapper(r[0], r[1]) if self.with_key else self.mapper(r[1]))
            return [(r[0], v) + head + (f"{seq}{i:08x}",) for i, v in enumerate(vs)]
        kvs = list(self.mapper(r[0], r[1]))
        return [(k, v) + head + (f"{seq}{i:08x}",) for i, (k, v) in enumerate(kvs)]


class BranchSelectStep(Step):
    """Keeps records whose FIRST matching predicate is number ``index`` (None matches all)."""

    def __init__(self, node: str, predicates: tuple[Any, ...], index: int) -> None:
        self.node, self.predicates, self.index = node, predicates, index

    def __call__(self, r: Rec) -> list[Rec] | None:
        for i, pred in enumerate(self.predicates):
            if pred is None or pred(r[0], r[1]):
                return [r] if i == self.index else None
        return None


class DropNullKeyStep(Step):
    """A KTable source / global store ignores records with a null key (not an error)."""

    def __init__(self, node: str) -> None:
        self.node = node

    def __call__(self, r: Rec) -> list[Rec] | None:
        return None if r[0] is None else [r]


class RoundTripStep(Step):
    """A record written to a topic by a sink and read back by a source of the same topology:
    serialize with the sink's serdes, deserialize with the source's, then re-extract the
    timestamp when the source has an extractor."""

    def __init__(self, node: str, sink_serdes: tuple[Any, Any], source_serdes: tuple[Any, Any], extractor: Any) -> None:
        self.node, self.sink_serdes, self.source_serdes, self.extractor = node, sink_serdes, source_serdes, extractor

    def __call__(self, r: Rec) -> list[Rec] | None:
        k = self.source_serdes[0].deserialize(self.sink_serdes[0].serialize(r[0]))
        v = self.source_serdes[1].deserialize(self.sink_serdes[1].serialize(r[1]))
        ts = r[2]
        if self.extractor is not None:
            ts = self.extractor(k, v, ts, -1)
            if ts is None or ts < 0:
                raise ValueError(f"invalid (negative) timestamp {ts}")
            ts = int(ts)
        return [(k, v, ts) + r[3:]]



# --------------------------------------------------------------------------- emitters
class StreamEmitter:
    """Writes records as a stream frame (:data:`STREAM_SCHEMA`)."""

    schema = STREAM_SCHEMA

    def start(self) -> list[list[Any]]:
        return [[], [], [], [], [], [], []]

    def emit(self, r: Rec, buf: list[list[Any]], errs: Errors) -> None:
        k, v = r[0], r[1]
        buf[0].append(None if k is None else encode_key(k))
        buf[1].append(None if v is None else dumps(v))
        for i in range(2, 7):
            buf[i].append(r[i])

    def frame(self, buf: list[list[Any]]) -> pd.DataFrame:
        return typed_frame(RECORD_COLUMNS, buf)



# --------------------------------------------------------------------------- fused chain
def chain_function(decoder: Any, steps: tuple[Step, ...], emitter: Any, errors_acc: Any, wm_acc: Any) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The ``mapInPandas`` function: decode each row, run it through ``steps`` (each input
    may give 0..n records), emit the survivors."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        errs: Errors = {}
        for pdf in batches:
            buf = emitter.start()
            for rec in decoder.records(pdf, errs):
                cur: list[Rec] = [rec]
                for step in steps:
                    nxt: list[Rec] = []
                    for r in cur:
                        try:
                            out = step(r)
                        except Exception:  # noqa: BLE001 - a dead letter of the speed layer
                            add_error(errs, step.node, rid(r))
                            continue
                        if out:
                            nxt.extend(out)
                    cur = nxt
                    if not cur:
                        break
                for r in cur:
                    emitter.emit(r, buf, errs)
            yield emitter.frame(buf)
        flush(errors_acc, errs, wm_acc if decoder.watermark else None, decoder.wm)

    return run

