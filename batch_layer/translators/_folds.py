"""Worker-side aggregation folds: the final store content of a plain, tumbling / hopping
or session aggregation for a bucket of keys, as the speed layer's aggregate processors
compute it with infinite grace over records in batch order.

Record tuples, frames and error accounting are those of :mod:`._records`.
"""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from bisect import bisect_left
from itertools import groupby
from operator import itemgetter
from typing import Any, Iterable, Iterator

import pandas as pd

from speed_layer.processor.builtin.aggregate import aggregate_functions
from speed_layer.state.keys import decode_key

from ..general.store_rows import json_value, key_text
from ._accumulators import flush
from ._agg_prep import block_window_starts
from ._records import Errors, _view_frame, add_error, ranked_rows
from ._values import decode_value

#: key types whose decoded object the folds hand to every record of the key instead of
#: decoding the same bytes again (immutable: no user function can tell the difference)
_SHAREABLE_KEYS = frozenset({str, int, float, bool, bytes})


def _no_value(data: bytes | None) -> None:
    """The value of a row of a ``value_free`` fold: never read (None)."""
    return None


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

