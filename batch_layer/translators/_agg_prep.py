"""Worker-side input of an aggregation: the emitter of its rows (store key bytes, block of
window starts, encoded key and value) and the arithmetic of time window starts.

Record tuples, frames and error accounting are those of :mod:`._records`.
"""
from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

from speed_layer.state.keys import encode_key

from ._records import AGG_SCHEMA, RECORD_COLUMNS, Errors, Rec, add_error, rid, typed_frame
from ._values import encode_value


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

