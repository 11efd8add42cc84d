"""Worker-side code of the batch layer: runs the user's Python functions inside Spark's
``mapInPandas`` / ``applyInPandas`` exactly as the speed layer's processors would.

Everything here is pickled (cloudpickle) into Spark's Python workers: it holds no driver
state and needs no SparkSession (only pyspark's ``AccumulatorParam`` base class).

Record tuples
    A record in flight is the tuple ``(key, value, ts, p, o, src, seq)``: the Python key and
    value, the record timestamp (ms), and the order key of the ORIGINAL source record: its
    source partition ``p``, offset ``o``, the index ``src`` of its source topic in the
    topology, and ``seq``, a string growing by 8 hex digits per ``flat_map`` level (the
    position of the record among the outputs of one input). Batch order is
    ``(ts, p, o, src, seq)``: ``(timestamp, source partition, offset)`` as the architecture
    defines it, then tie-breakers for records sharing a source record.

Stream frames (Spark)
    ``k binary`` (the key encoded with the stores' order-preserving key encoding
    ``speed_layer.state.keys.encode_key``; null for a null key), ``v binary`` (pickled value;
    null for None), ``ts long`` (ms), ``p int``, ``o long``, ``src int``, ``seq string``.

Errors
    A record whose deserialization, timestamp extraction or processing raises is dropped at
    that node and recorded in an accumulator as ``{node: {(src, p, o), ...}}`` (the speed
    layer's dead letters). Sets make the count idempotent when Spark recomputes a partition.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
import copy
import pickle
from bisect import bisect_left, bisect_right
from itertools import groupby
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator, Sequence

import pandas as pd
from pyspark.accumulators import AccumulatorParam

from speed_layer.processor.builtin.aggregate import aggregate_functions
from speed_layer.state.keys import decode_key, encode_key

from ..general.store_rows import json_value, key_text  # noqa: F401 - one view encoding for both executors
from ._values import FreshValues, decode_value, encode_value

Rec = tuple  # (key, value, ts, p, o, src, seq)
Errors = dict  # node name -> set of (src, p, o)

STREAM_SCHEMA = "k binary, v binary, ts long, p int, o long, src int, seq string"
#: contracts.md: one row per table key (and window) of a view
VIEW_SCHEMA = "key string, window_start long, window_end long, value string, timestamp long"
#: rows of an as-of join: side 0 = table change, 1 = stream record to look up, 2 = already
#: joined (left join with a null lookup key: ``gjk`` null, ``nb`` spreads them over buckets)
JOIN_SCHEMA = "gjk binary, nb int, side int, k binary, v binary, ts long, p int, o long, src int, seq string"
#: rows of an aggregation: store key bytes and (time windows) block of window starts
AGG_SCHEMA = "gk binary, blk long, k binary, v binary, ts long, p int, o long, src int, seq string"
#: table changes to index for a broadcast as-of join
TABLE_ROWS_SCHEMA = "gjk binary, ts long, p int, o long, src int, seq string, v binary"

ORDER = ["ts", "p", "o", "src", "seq"]
_NULL_BUCKETS = 16


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


def loads_or_none(data: bytes | None) -> Any:
    return None if data is None else pickle.loads(data)


def rid(rec: Rec) -> tuple[int, int, int]:
    """Identity of the source record: ``(src, partition, offset)``."""
    return (rec[5], rec[3], rec[4])


def add_error(errs: Errors, node: str, ident: tuple[int, int, int]) -> None:
    errs.setdefault(node, set()).add(ident)




def _opt_int(values: Any) -> list[Any]:
    return [None if v is None else int(v) for v in values]


# --------------------------------------------------------------------------- accumulators
class ErrorsParam(AccumulatorParam):
    """Accumulates ``{node: set of record ids}`` (set union: idempotent on recomputation)."""

    def zero(self, value: Errors) -> Errors:
        return {}

    def addInPlace(self, a: Errors, b: Errors) -> Errors:  # noqa: N802 - pyspark's name
        for node, ids in b.items():
            a.setdefault(node, set()).update(ids)
        return a


class MaxParam(AccumulatorParam):
    """Accumulates the maximum of ints (``-1`` when nothing was seen)."""

    def zero(self, value: int) -> int:
        return -1

    def addInPlace(self, a: int, b: int) -> int:  # noqa: N802
        return a if a >= b else b


def flush(errors_acc: Any, errs: Errors, wm_acc: Any = None, wm: int = -1) -> None:
    if errs:
        errors_acc.add(errs)
    if wm_acc is not None and wm >= 0:
        wm_acc.add(wm)


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
    """Decodes rows of a stream frame (see the module docstring)."""

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


class TableStages:
    """KTable filter / mapValues applied to one value (``None`` stays ``None``), as
    ``TableFilterProcessor._keep`` and ``TableMapValuesProcessor._map``. Each stage is
    ``("filter", node, predicate, negate, send_old_values, materialized)`` or
    ``("map", node, mapper, with_key, None, materialized)``."""

    def __init__(self, stages: tuple[tuple[Any, ...], ...]) -> None:
        self.stages = stages

    def apply_one(self, stage: tuple[Any, ...], key: Any, value: Any) -> Any:
        if value is None:
            return None
        kind, _node, fn, flag = stage[:4]
        if kind == "filter":
            return value if bool(fn(key, value)) != flag else None
        return fn(key, value) if flag else fn(value)

    def apply(self, key: Any, value: Any) -> Any:
        for stage in self.stages:
            value = self.apply_one(stage, key, value)
        return value


class _JoinLogic:
    """The part of ``StreamTableJoinProcessor.process`` before and after the lookup."""

    def __init__(self, node: str, op: Any, key_serde: Any) -> None:
        self.node, self.op, self.key_serde = node, op, key_serde

    def lookup_key(self, r: Rec) -> tuple[bool, Any]:
        """``(keep, lookup_key)`` (KIP-962, as the speed layer's ``StreamTableJoinProcessor``
        and Kafka >= 4.1's ``KStreamKTableJoinProcessor#maybeDropRecord``): a left join
        joins a record whose join key (a GlobalKTable key selector's result included) is
        null with None; otherwise a null join key or a null value drops the record (``keep``
        False; counted by the speed layer in ``dropped-records``, not a batch error, so not
        in ``BatchResult.dropped``)."""
        op = self.op
        lk = op.key_selector(r[0], r[1]) if op.key_selector else r[0]
        if op.left and lk is None and r[1] is not None:
            return True, None
        if lk is None or r[1] is None:
            return False, None
        return True, lk

    def join(self, r: Rec, other: Any) -> list[Rec] | None:
        op = self.op
        if other is None and not op.left:
            return None
        joined = op.joiner(r[0], r[1], other) if op.joiner_with_key else op.joiner(r[1], other)
        return [(r[0], joined) + r[2:]]


class BroadcastJoinStep(Step, _JoinLogic):
    """Stream-table as-of join against a broadcast index ``{store key bytes: (sorted
    timestamps, pickled values)}``: the table value with the latest timestamp <= the record's
    (ties: the table record comes first, so it is visible). Each table value is unpickled once
    per worker and handed to the joiner as a fresh object (``_values.FreshValues``)."""

    expensive = True

    def __init__(self, node: str, op: Any, key_serde: Any, index: Any) -> None:
        _JoinLogic.__init__(self, node, op, key_serde)
        self.index = index  # a pyspark Broadcast
        self._values: FreshValues | None = None
        self._index: dict[bytes, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_values": None, "_index": None}  # decoded values stay in their worker

    def __call__(self, r: Rec) -> list[Rec] | None:
        keep, lk = self.lookup_key(r)
        if not keep:
            return None
        other = None
        if lk is not None:
            jk = self.key_serde.serialize(lk)
            index = self._index
            if index is None:
                index = self._index = self.index.value
            entry = index.get(jk)
            if entry is not None:
                i = bisect_right(entry[0], r[2]) - 1
                if i >= 0 and entry[1][i] is not None:
                    values = self._values
                    if values is None:
                        values = self._values = FreshValues()
                    other = values.get((jk, i), entry[1][i])
        return self.join(r, other)


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


class TableRowsEmitter:
    """Writes table changes for an as-of join: store key bytes, order, staged value
    (:data:`JOIN_SCHEMA` when ``for_shuffle``, else :data:`TABLE_ROWS_SCHEMA`)."""

    def __init__(self, node: str, key_serde: Any, stages: TableStages, for_shuffle: bool) -> None:
        self.node, self.key_serde, self.stages, self.for_shuffle = node, key_serde, stages, for_shuffle
        self.schema = JOIN_SCHEMA if for_shuffle else TABLE_ROWS_SCHEMA

    def start(self) -> list[list[Any]]:
        return [[], [], [], [], [], [], []]

    def emit(self, r: Rec, buf: list[list[Any]], errs: Errors) -> None:
        try:
            jk = self.key_serde.serialize(r[0])
            v = self.stages.apply(r[0], r[1])
            vb = None if v is None else dumps(v)
        except Exception:  # noqa: BLE001
            add_error(errs, self.node, rid(r))
            return
        for i, x in enumerate((jk, r[2], r[3], r[4], r[5], r[6], vb)):
            buf[i].append(x)

    def frame(self, buf: list[list[Any]]) -> pd.DataFrame:
        n = len(buf[0])
        cols = {
            "gjk": pd.Series(buf[0], dtype=object), "ts": pd.Series(buf[1], dtype="int64"),
            "p": pd.Series(buf[2], dtype="int32"), "o": pd.Series(buf[3], dtype="int64"),
            "src": pd.Series(buf[4], dtype="int32"), "seq": pd.Series(buf[5], dtype=object),
            "v": pd.Series(buf[6], dtype=object),
        }
        if not self.for_shuffle:
            return pd.DataFrame(cols)
        return pd.DataFrame({
            "gjk": cols["gjk"], "nb": pd.Series([0] * n, dtype="int32"), "side": pd.Series([0] * n, dtype="int32"),
            "k": pd.Series([None] * n, dtype=object), "v": cols["v"], "ts": cols["ts"], "p": cols["p"], "o": cols["o"],
            "src": cols["src"], "seq": cols["seq"],
        })


class JoinPrepEmitter(_JoinLogic):
    """Stream side of a shuffled as-of join (:data:`JOIN_SCHEMA`): side 1 rows keyed by the
    store key bytes of the lookup key; a left join's records with a null lookup key are
    joined with None right here (side 2)."""

    schema = JOIN_SCHEMA

    def start(self) -> list[list[Any]]:
        return [[] for _ in range(10)]

    def emit(self, r: Rec, buf: list[list[Any]], errs: Errors) -> None:
        try:
            keep, lk = self.lookup_key(r)
            if not keep:
                return
            if lk is None:
                out = self.join(r, None)
                if not out:
                    return
                r = out[0]
                row = (None, 1 + r[4] % _NULL_BUCKETS, 2)
            else:
                row = (self.key_serde.serialize(lk), 0, 1)
            kb = None if r[0] is None else encode_key(r[0])
            vb = None if r[1] is None else dumps(r[1])
        except Exception:  # noqa: BLE001
            add_error(errs, self.node, rid(r))
            return
        for i, x in enumerate(row + (kb, vb) + r[2:7]):
            buf[i].append(x)

    def frame(self, buf: list[list[Any]]) -> pd.DataFrame:
        return typed_frame((("gjk", object), ("nb", "int32"), ("side", "int32")) + RECORD_COLUMNS, buf)


class AggPrepEmitter:
    """Input of an aggregation (:data:`AGG_SCHEMA`): drops null keys and, unless
    ``keep_null_values``, null values (as the speed layer's aggregate processors; not
    errors: the time and session window processors drop null keys only, as Kafka's
    KStreamWindowAggregate and KStreamSessionWindowAggregate, and aggregate a null value),
    computes the store key bytes ``gk`` and, for time windows, one row per block of window
    starts the record contributes to. ``k`` is the encoded key, null when it equals ``gk``
    (no store key serde); ``v`` is the value encoded by
    ``_values.encode_value``, or null when ``value_free`` (a count, whose fold never reads
    the value: see ``_Fold.value_free``)."""

    schema = AGG_SCHEMA

    def __init__(self, node: str, store_key_serde: Any, size_ms: int | None, advance_ms: int | None, block_ms: int | None,
                 keep_null_values: bool = False, value_free: bool = False) -> None:
        self.node, self.store_key_serde = node, store_key_serde
        self.size, self.adv, self.block = size_ms, advance_ms, block_ms
        self.keep_null_values, self.value_free = keep_null_values, value_free

    def start(self) -> list[list[Any]]:
        return [[] for _ in range(9)]

    def prepare(self, r: Rec, errs: Errors, memo: "tuple[Memo, Memo] | None" = None
                ) -> tuple[bytes, Iterable[int], bytes | None, bytes | None] | None:
        """``(gk, blocks, key bytes or None when they equal gk, value bytes or None)`` of record ``r``, or None when it is dropped
        (a null key, a null value unless kept, or an encoding error, added to ``errs``).
        ``memo`` (the fused pass, one pair per input record): encodings of key and of value
        objects already encoded for another view of the same record, by object identity
        (:data:`Memo`)."""
        k, v = r[0], r[1]
        if k is None or (v is None and not self.keep_null_values):
            return None
        try:
            if memo is None:
                kb = encode_key(k)
                vb = None if self.value_free else encode_value(v)
            else:  # the memo lookups inline: the fused pass's hot path
                key_memo, value_memo = memo
                hit = key_memo.get(id(k))
                if hit is not None and hit[0] is k:
                    kb = hit[1]
                else:
                    kb = encode_key(k)
                    key_memo[id(k)] = (k, kb)
                if self.value_free:
                    vb = None
                else:
                    hit = value_memo.get(id(v))
                    if hit is not None and hit[0] is v:
                        vb = hit[1]
                    else:
                        vb = encode_value(v)
                        value_memo[id(v)] = (v, vb)
            if self.store_key_serde is None:
                gk, kb = kb, None  # k would repeat gk: null, the folds read gk
            else:
                gk = self.store_key_serde.serialize(k)
        except Exception:  # noqa: BLE001
            add_error(errs, self.node, rid(r))
            return None
        size = self.size
        if size is None:
            return gk, _ONE_BLOCK, kb, vb
        first, last = window_starts_range(r[2], size, self.adv)
        if first > last:
            return gk, (), kb, vb
        b0, b1 = first // self.block, last // self.block
        return gk, ((b0,) if b0 == b1 else range(b0, b1 + 1)), kb, vb

    def emit(self, r: Rec, buf: list[list[Any]], errs: Errors) -> None:
        """Appends ``r``'s rows to ``buf`` (:meth:`prepare`)."""
        prep = self.prepare(r, errs)
        if prep is None:
            return
        gk, blocks, kb, vb = prep
        for b in blocks:
            for i, x in enumerate((gk, b, kb, vb) + r[2:7]):
                buf[i].append(x)

    def frame(self, buf: list[list[Any]]) -> pd.DataFrame:
        return typed_frame((("gk", object), ("blk", "int64")) + RECORD_COLUMNS, buf)


#: ``id(object) -> (object, its encoding)``: holding the object keeps its id unique
Memo = dict
#: the blocks of a record of an aggregation without blocks of window starts
_ONE_BLOCK = (0,)
#: key types whose decoded object the folds hand to every record of the key instead of
#: decoding the same bytes again (immutable: no user function can tell the difference)
_SHAREABLE_KEYS = frozenset({str, int, float, bool, bytes})


def _no_value(data: bytes | None) -> None:
    """The value of a row of a ``value_free`` fold: never read (None)."""
    return None


def window_starts_range(ts: int, size: int, advance: int) -> tuple[int, int]:
    """``(first, last)`` window start of the time windows containing ``ts``: the same
    arithmetic as ``TimeWindows.windows_for`` (starts step by ``advance``)."""
    first = max(0, ts - size + advance)
    first -= first % advance
    return first, ts - ts % advance if ts >= 0 else -1


def block_window_starts(ts: int, size: int, advance: int, lo: int, hi: int) -> tuple[int, int]:
    """:func:`window_starts_range` of ``ts`` (>= 0, ms) clipped to the starts ``[lo, hi]`` of
    a block (one call per record of a fold: the arithmetic is written out)."""
    first = ts - size + advance
    if first < 0:
        first = 0
    first -= first % advance
    last = ts - ts % advance
    return (first if first > lo else lo), (last if last < hi else hi)


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


# --------------------------------------------------------------------------- group functions
def group_fn(obj: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A one-argument function for ``applyInPandas`` (Spark inspects the signature: a
    callable object's ``__call__(self, pdf)`` would be taken for ``(key, pdf)``)."""

    def fn(pdf: pd.DataFrame) -> pd.DataFrame:
        return obj(pdf)

    return fn


#: the columns of a stream record in a pandas batch (key, value bytes, timestamp, and the
#: order key: partition, offset, source index, sequence)
RECORD_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("k", object), ("v", object), ("ts", "int64"), ("p", "int32"), ("o", "int64"), ("src", "int32"), ("seq", object),
)


def typed_frame(columns: Sequence[tuple[str, Any]], cols: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """A pandas frame of ``cols`` (one sequence per column), named and typed by ``columns``
    (``(name, dtype)`` pairs, in order)."""
    return pd.DataFrame({name: pd.Series(col, dtype=dtype) for (name, dtype), col in zip(columns, cols)})


def rows_frame(columns: Sequence[tuple[str, Any]], rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """:func:`typed_frame` of row tuples (an empty frame of the right types when ``rows`` is empty)."""
    return typed_frame(columns, list(zip(*rows)) if rows else [[] for _ in columns])


def _stream_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return rows_frame(RECORD_COLUMNS, rows)


def _view_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return rows_frame((("key", object), ("window_start", object), ("window_end", object), ("value", object),
                       ("timestamp", "int64")), rows)


def sorted_rows(pdf: pd.DataFrame, group: str, order: list[str], rest: list[str]) -> list[tuple[Any, ...]]:
    """Rows of one ``applyInPandas`` call (a bucket of keys) as tuples
    ``(group key, *order, *rest)`` sorted by the group key, then ``order``."""
    cols = [pdf[c].tolist() for c in [group, *order, *rest]]
    n = 1 + len(order)
    if group == "gjk":  # a null join key (already joined rows) sorts as b""
        cols[0] = [b"" if x is None else x for x in cols[0]]
    return sorted(zip(*cols), key=itemgetter(*range(n)))


def ranked_rows(pdf: pd.DataFrame, group: str, rest: list[str], table_srcs: frozenset[int]) -> list[tuple[Any, ...]]:
    """:func:`sorted_rows` ``(group, ts, p, o, src, seq, *rest)`` in the batch order of
    records from several input topics: ``(timestamp, table changes first, partition,
    offset, topic)`` (``table_srcs``: the ``src`` of the KTable / GlobalKTable topics; the
    general executor's ``rank``). Without table topics this is :data:`ORDER`."""
    if not table_srcs or table_srcs.isdisjoint(pdf["src"].unique().tolist()):
        return sorted_rows(pdf, group, ORDER, rest)
    cols = [pdf[c].tolist() for c in [group, *ORDER, *rest]]
    rank = [0 if s in table_srcs else 1 for s in cols[4]]
    order = sorted(range(len(rank)), key=lambda i: (cols[0][i], cols[1][i], rank[i], cols[2][i], cols[3][i], cols[4][i], cols[5][i]))
    return [tuple(c[i] for c in cols) for i in order]


class AsOfJoinGroup(_JoinLogic):
    """``applyInPandas`` over a bucket of join keys (:data:`JOIN_SCHEMA` in, stream frame
    out): per key, rows in ``(ts, side, p, o, src, seq)`` order, carrying the last table
    value (table changes sort before stream records of the same timestamp)."""

    def __init__(self, node: str, op: Any, key_serde: Any, errors_acc: Any) -> None:
        _JoinLogic.__init__(self, node, op, key_serde)
        self.errors_acc = errors_acc

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        out: list[tuple[Any, ...]] = []
        current: bytes | None = None
        last_key: Any = object()
        for jk, ts, side, p, o, src, seq, kb, vb in sorted_rows(pdf, "gjk", ["ts", "side", "p", "o", "src", "seq"], ["k", "v"]):
            if jk != last_key:
                last_key, current = jk, None
            if side == 0:
                current = vb
                continue
            if side == 2:
                out.append((kb, vb, ts, p, o, src, seq))
                continue
            r = (None if kb is None else decode_key(kb), loads_or_none(vb), ts, p, o, src, seq)
            try:
                res = self.join(r, loads_or_none(current))
                if not res:
                    continue
                j = res[0]
                out.append((kb, None if j[1] is None else dumps(j[1]), ts, p, o, src, seq))
            except Exception:  # noqa: BLE001
                add_error(errs, self.node, rid(r))
        flush(self.errors_acc, errs)
        return _stream_frame(out)


class _Fold(ABC):
    """Base of the aggregation folds: one ``applyInPandas`` call gets a bucket of keys
    (:data:`AGG_SCHEMA`), folded key by key in batch order.

    Subclasses implement :meth:`fold` over rows already grouped by key in batch order, so
    that the same fold serves ``applyInPandas`` (``__call__``: the rows sorted here) and the
    fused ``applyInArrow`` pass (``_fused.FusedFold``: rows sorted by Spark)."""

    #: indexes ``src`` of the KTable / GlobalKTable topics (see :func:`ranked_rows`)
    table_srcs: frozenset[int] = frozenset()
    #: True when the fold never reads a record's value, so its rows need not carry it
    #: (``AggPrepEmitter(value_free=True)``): a count, whose aggregator ``agg + 1`` ignores
    #: the value, in the folds below whose code passes the value only to the aggregator
    #: (time windows, sessions, plain); not a sliding window's replayed processor
    value_free: bool = False
    #: the fold's code hands a record's value to the aggregator and nowhere else
    _value_to_aggregator_only: bool = False

    def __init__(self, node: str, op: Any, errors_acc: Any) -> None:
        self.node, self.op, self.errors_acc = node, op, errors_acc
        self.initializer, self.aggregator = aggregate_functions(op)
        self.value_free = self._value_to_aggregator_only and op.kind == "count"

    def per_key(self, pdf: pd.DataFrame) -> Iterator[tuple[bytes, Iterator[tuple[Any, ...]]]]:
        """``(gk, rows)`` with rows ``(gk, ts, p, o, src, seq, k, v)`` in batch order (a
        null ``k`` is ``gk``: ``AggPrepEmitter`` leaves out key bytes equal to them)."""
        if pdf["k"].isna().any():
            pdf = pdf.assign(k=pdf["k"].where(pdf["k"].notna(), pdf["gk"]))
        return groupby(ranked_rows(pdf, "gk", ["k", "v"], self.table_srcs), key=itemgetter(0))

    @abstractmethod
    def fold(self, keys: Iterable[tuple[bytes, Iterable[tuple[Any, ...]]]], blk: int, errs: Errors) -> list[tuple[Any, ...]]:
        """The view rows ``(key, window_start, window_end, value JSON, timestamp)`` of
        ``keys``: ``(gk, rows)`` pairs as :meth:`per_key` gives them (each key's rows
        ``(gk, ts, p, o, src, seq, k, v)`` in batch order), all of block ``blk`` of window
        starts (0 without blocks); the records and values that fail are added to ``errs``."""

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        rows = self.fold(self.per_key(pdf), int(pdf["blk"].iloc[0]) if len(pdf) else 0, errs)
        flush(self.errors_acc, errs)
        return _view_frame(rows)

    def to_json(self, value: Any, errs: Errors, ident: tuple[int, int, int]) -> str | None:
        try:
            return json_value(value)
        except Exception:  # noqa: BLE001 - the speed layer's sink would fail on it too
            add_error(errs, self.node, ident)
            return None


class TimeWindowFold(_Fold):
    """Tumbling/hopping windows of a bucket of keys and one block of window starts
    ``[blk * block_ms, (blk + 1) * block_ms)``: ``TimeWindowAggregateProcessor`` with
    infinite grace, records in batch order; a record contributes to its windows in
    ascending start order (an aggregator error stops its later windows, as in the speed
    layer). Result timestamp = the largest record timestamp of the window."""

    _value_to_aggregator_only = True
    #: the rows come counted (:meth:`precounting`)
    precounted = False

    def __init__(self, node: str, op: Any, block_ms: int, errors_acc: Any) -> None:
        super().__init__(node, op, errors_acc)
        self.size, self.adv, self.block = op.windows.size_ms, op.windows.advance_ms, block_ms

    def precounting(self) -> "TimeWindowFold | None":
        """For a count (:attr:`value_free`): a copy of this fold over rows that each stand
        for ``int(v)`` records of one key with the same windows, ``ts`` the largest of
        their timestamps (``_fused.fused_chain_function``'s ``precount``); None otherwise.
        A count's aggregator ``agg + 1`` ignores key, value and order and never fails, so
        adding the counts gives each window's count, and its timestamp is still the
        largest record timestamp."""
        if not self.value_free:
            return None
        out = copy.copy(self)
        out.precounted = True
        return out

    def fold(self, keys: Iterable[tuple[bytes, Iterable[tuple[Any, ...]]]], blk: int, errs: Errors) -> list[tuple[Any, ...]]:
        if self.precounted:
            return self._fold_counts(keys, blk, errs)
        size, adv, init, agg_fn, node = self.size, self.adv, self.initializer, self.aggregator, self.node
        lo = blk * self.block
        hi = lo + self.block - 1  # the block's last start
        loads = _no_value if self.value_free else decode_value
        rows = []
        for _gk, recs in keys:
            aggs: dict[int, list[Any]] = {}  # start -> [aggregate, max ts, key, last record id]
            last_kb, key = None, None
            for _, ts, p, o, src, _seq, kb, vb in recs:
                if kb != last_kb or type(key) not in _SHAREABLE_KEYS:  # an immutable key is decoded once per key
                    key, last_kb = decode_key(kb), kb
                value, ident = loads(vb), (src, p, o)
                s, stop = block_window_starts(ts, size, adv, lo, hi)  # ts >= 0: decoders drop the rest
                while s <= stop:
                    cur = aggs.get(s)
                    try:
                        if cur is None:
                            a = value if init is None else agg_fn(key, value, init())
                            if a is not None:  # a None aggregate deletes the window (store.put(None))
                                aggs[s] = [a, ts, key, ident]
                        else:
                            a = agg_fn(key, value, cur[0])
                            if a is None:
                                del aggs[s]
                            else:
                                cur[0] = a
                                if ts > cur[1]:
                                    cur[1] = ts
                                cur[3] = ident
                    except Exception:  # noqa: BLE001
                        add_error(errs, node, ident)
                        break
                    s += adv
            self._window_rows(aggs, rows, errs)
        return rows

    def _fold_counts(self, keys: Iterable[tuple[bytes, Iterable[tuple[Any, ...]]]], blk: int, errs: Errors
                     ) -> list[tuple[Any, ...]]:
        """:meth:`fold` of a count over counted rows (:meth:`precounting`)."""
        size, adv = self.size, self.adv
        lo = blk * self.block
        hi = lo + self.block - 1
        rows = []
        for _gk, recs in keys:
            counts: dict[int, list[Any]] = {}  # start -> [count, max ts, key, a record id]
            last_kb, key = None, None
            for _, ts, p, o, src, _seq, kb, vb in recs:
                if kb != last_kb or type(key) not in _SHAREABLE_KEYS:
                    key, last_kb = decode_key(kb), kb
                n = int(vb)
                s, stop = block_window_starts(ts, size, adv, lo, hi)
                while s <= stop:
                    cur = counts.get(s)
                    if cur is None:
                        counts[s] = [n, ts, key, (src, p, o)]
                    else:
                        cur[0] += n
                        if ts > cur[1]:
                            cur[1] = ts
                    s += adv
            self._window_rows(counts, rows, errs)
        return rows

    def _window_rows(self, windows: dict[int, list[Any]], rows: list[tuple[Any, ...]], errs: Errors) -> None:
        """Append one view row per window of one key: ``windows`` maps a start (ms) to
        ``[aggregate, largest record ts, key, a record id]``."""
        size = self.size
        for start, (a, ts, key, ident) in windows.items():
            text = self.to_json(a, errs, ident)
            if text is not None:
                rows.append((key_text(key), start, start + size, text, ts))


_SESSION_ORDER = itemgetter(0, 1)


class SessionFold(_Fold):
    """Session windows of a bucket of keys: ``SessionWindowAggregateProcessor`` with
    infinite grace, records in timestamp order. Sessions are ``[first ts, last ts]``; the
    result timestamp is the session end (the speed layer forwards a session with its end
    as timestamp)."""

    _value_to_aggregator_only = True

    def __init__(self, node: str, op: Any, errors_acc: Any) -> None:
        super().__init__(node, op, errors_acc)
        merger = op.merger
        if op.kind == "count":
            merger = lambda k, a, b: a + b  # noqa: E731 - as the speed layer
        elif op.kind == "reduce":
            reducer = op.aggregator
            merger = lambda k, a, b: b if a is None else reducer(a, b)  # noqa: E731
        self.merger = merger
        self.gap = op.windows.gap_ms

    def fold(self, keys: Iterable[tuple[bytes, Iterable[tuple[Any, ...]]]], blk: int, errs: Errors) -> list[tuple[Any, ...]]:
        rows = []
        for _gk, recs in keys:
            for end, start, a, key, ident in self.sessions(recs, errs):
                text = self.to_json(a, errs, ident)
                if text is not None:
                    rows.append((key_text(key), start, end, text, end))
        return rows

    def sessions(self, recs: Iterable[tuple[Any, ...]], errs: Errors) -> list[list[Any]]:
        """The final sessions of one key: ``[end, start, aggregate, key, last record id]``
        sorted by (end, start), as the session store orders them."""
        gap, init, agg_fn, merger = self.gap, self.initializer, self.aggregator, self.merger
        loads = _no_value if self.value_free else decode_value
        sessions: list[list[Any]] = []
        last_kb, key = None, None
        for _, ts, p, o, src, _seq, kb, vb in recs:
            if kb != last_kb or type(key) not in _SHAREABLE_KEYS:  # an immutable key is decoded once per key
                key, last_kb = decode_key(kb), kb
            value, ident = loads(vb), (src, p, o)
            try:
                # find_sessions(key, ts - gap, ts + gap): end >= ts - gap, start <= ts + gap, by (end, start)
                idx = []
                i = len(sessions) - 1
                while i >= 0 and sessions[i][0] >= ts - gap:  # sorted by end: stop early
                    if sessions[i][1] <= ts + gap:
                        idx.append(i)
                    i -= 1
                idx.reverse()
                agg: Any = None if init is None else init()
                m_start, m_end = ts, ts
                for i in idx:
                    s = sessions[i]
                    agg = s[2] if agg is None else merger(key, agg, s[2])
                    m_start, m_end = min(m_start, s[1]), max(m_end, s[0])
                if (m_start, m_end) != (ts, ts):
                    for i in reversed(idx):
                        del sessions[i]
                agg = value if agg is None else agg_fn(key, value, agg)
            except Exception:  # noqa: BLE001
                add_error(errs, self.node, ident)
                continue
            # put(): replaces a session with the same bounds; a None aggregate removes it
            i = bisect_left(sessions, (m_end, m_start), key=_SESSION_ORDER)
            same = i < len(sessions) and sessions[i][0] == m_end and sessions[i][1] == m_start
            if agg is None:
                if same:
                    del sessions[i]
            elif same:
                sessions[i] = [m_end, m_start, agg, key, ident]
            else:
                sessions.insert(i, [m_end, m_start, agg, key, ident])
        return sessions


class PlainFold(_Fold):
    """Non-windowed count/reduce/aggregate of a bucket of keys (``StreamAggregateProcessor``):
    result timestamp = the largest record timestamp."""

    _value_to_aggregator_only = True

    def fold(self, keys: Iterable[tuple[bytes, Iterable[tuple[Any, ...]]]], blk: int, errs: Errors) -> list[tuple[Any, ...]]:
        init, agg_fn = self.initializer, self.aggregator
        loads = _no_value if self.value_free else decode_value
        rows = []
        for _gk, recs in keys:
            state: list[Any] | None = None  # [aggregate, ts, key, record id]
            last_kb, key = None, None
            for _, ts, p, o, src, _seq, kb, vb in recs:
                if kb != last_kb or type(key) not in _SHAREABLE_KEYS:  # an immutable key is decoded once per key
                    key, last_kb = decode_key(kb), kb
                value = loads(vb)
                try:
                    if state is None:
                        a = value if init is None else agg_fn(key, value, init())
                        state = None if a is None else [a, ts, key, (src, p, o)]  # None deletes the key
                    else:
                        a = agg_fn(key, value, state[0])
                        state = None if a is None else [a, max(ts, state[1]), key, (src, p, o)]
                except Exception:  # noqa: BLE001
                    add_error(errs, self.node, (src, p, o))
            if state is not None:
                text = self.to_json(state[0], errs, state[3])
                if text is not None:
                    rows.append((key_text(state[2]), None, None, text, state[1]))
        return rows


class TableViewGroup:
    """The store of a KTable, for a bucket of keys: per key, the last change in batch
    order through the table stages; no row when that value is None (deleted). Timestamp =
    that change's."""

    def __init__(self, node: str, stages: TableStages, errors_acc: Any) -> None:
        self.node, self.stages, self.errors_acc = node, stages, errors_acc

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        rows = []
        for _k, recs in groupby(sorted_rows(pdf, "k", ORDER, ["v"]), key=itemgetter(0)):
            *_, last = recs
            kb, ts, p, o, src, _seq, vb = last
            try:
                key = decode_key(kb)
                value = self.stages.apply(key, loads_or_none(vb))
                if value is not None:
                    rows.append((key_text(key), None, None, json_value(value), ts))
            except Exception:  # noqa: BLE001
                add_error(errs, self.node, (src, p, o))
        flush(self.errors_acc, errs)
        return _view_frame(rows)


class TableToStreamGroup:
    """KTable -> KStream for a bucket of keys: per key, replays the changes in batch order
    with their old values, forwarding as ``TableSourceProcessor`` (not when new and old are
    both None, when materialized), ``TableFilterProcessor`` (with ``send_old_values``: not
    when both are None after filtering; without: every change, old value dropped),
    ``TableMapValuesProcessor`` (a materialized stage reads its old value from its own
    store) and ``ToStreamProcessor`` (optional key mapper on the new value) do."""

    def __init__(self, node: str, stages: TableStages, mapper: Any, source_has_store: bool, errors_acc: Any) -> None:
        self.node, self.stages, self.mapper = node, stages, mapper
        self.source_has_store, self.errors_acc = source_has_store, errors_acc

    def changes(self, pdf: pd.DataFrame, errs: Errors) -> Iterator[tuple[Any, ...]]:
        """The changes the table forwards, key by key in batch order, as
        ``(key, new, old, ts, p, o, src, seq)`` (a stage that raises drops the change and
        counts it at the stage's node)."""
        for _k, recs in groupby(sorted_rows(pdf, "k", ORDER, ["v"]), key=itemgetter(0)):
            prev: Any = None
            stored: list[Any] = [None] * len(self.stages.stages)  # materialized stages' store values
            for kb, ts, p, o, src, seq, vb in recs:
                key, new = decode_key(kb), loads_or_none(vb)
                old = prev if self.source_has_store else None
                prev = new
                if self.source_has_store and new is None and old is None:
                    continue
                node = self.node
                try:
                    forwarded = True
                    for i, stage in enumerate(self.stages.stages):
                        kind, node, _fn, _flag, send_old, materialized = stage
                        new = self.stages.apply_one(stage, key, new)
                        if kind == "filter":
                            if not send_old:
                                old = None  # without sendOldValues every change is forwarded, old dropped
                            else:
                                old = stored[i] if materialized else self.stages.apply_one(stage, key, old)
                                if new is None and old is None:
                                    forwarded = False
                                    break
                        else:
                            old = stored[i] if materialized else self.stages.apply_one(stage, key, old)
                        if materialized:
                            stored[i] = new
                except Exception:  # noqa: BLE001
                    add_error(errs, node, (src, p, o))
                    continue
                if forwarded:
                    yield key, new, old, ts, p, o, src, seq

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        out = []
        for key, new, _old, ts, p, o, src, seq in self.changes(pdf, errs):
            try:
                out_key = self.mapper(key, new) if self.mapper is not None else key
                out.append((None if out_key is None else encode_key(out_key), None if new is None else dumps(new),
                            ts, p, o, src, seq))
            except Exception:  # noqa: BLE001
                add_error(errs, self.node, (src, p, o))
        flush(self.errors_acc, errs)
        return _stream_frame(out)
