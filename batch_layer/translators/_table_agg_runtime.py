"""Worker-side code of the KGroupedTable translation (``table_aggregate``): the select
node's records, then the aggregation's store.

* :class:`TableSelectGroup` replays, per upstream key in batch order, the changes the
  table forwards with their old values (``TableToStreamGroup.changes``: the source,
  filter and mapValues stages with sendOldValues, as ``KTable.group_by`` enables them) and
  maps each as ``TableSelectProcessor`` (Kafka's KTableRepartitionMap, KIP-904): the
  selector on the new and on the old value (pairs with a None key or value skipped); ONE
  record ``Change(new, old)`` when both pairs have the same new key, else
  ``Change(None, old)`` (the subtraction) then ``Change(new, None)`` (the addition). Each
  record keeps the order key of the table record that caused it, ``seq`` extended by its
  place among that record's sends: as the general executor orders a repartition topic
  (the order key of the cause plus a sequence number), so records meeting at one new key
  from different upstream keys come in the order of their causes.
* :class:`TableAggFold` folds, per new key in that order, ``TableAggregateProcessor``:
  the subtractor on the old value (when it and the current aggregate exist), then the
  adder on the new value (from the initializer, or for reduce from the value itself);
  timestamp ``max(record, previous aggregate's)``; an aggregate of None deletes the row.
  A subtractor or adder that raises drops the record (the store keeps the previous
  aggregate), as the speed layer under ``log_and_continue``.
"""
from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

from speed_layer.processor.api import Change
from speed_layer.state.keys import decode_key, encode_key

from ..general.store_rows import key_text
from ._accumulators import flush
from ._folds import _Fold
from ._records import Errors, _stream_frame, add_error, dumps
from ._tables import TableToStreamGroup
from ._values import decode_value


class TableSelectGroup:
    """``applyInPandas`` over a bucket of upstream table keys (stream frame in: the
    table's changelog; stream frame out: ``(new key, Change)`` records), see the module
    docstring."""

    def __init__(self, node: str, selector: Any, replay: TableToStreamGroup, errors_acc: Any) -> None:
        self.node, self.selector, self.replay, self.errors_acc = node, selector, replay, errors_acc

    def _pair(self, key: Any, value: Any) -> tuple[Any, Any] | None:
        if value is None:
            return None
        pair = self.selector(key, value)
        if pair is None:
            return None
        new_key, new_value = pair
        return None if new_key is None or new_value is None else (new_key, new_value)

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        out: list[tuple[Any, ...]] = []
        for key, new, old, ts, p, o, src, seq in self.replay.changes(pdf, errs):
            try:
                new_pair, old_pair = self._pair(key, new), self._pair(key, old)
                if new_pair is not None and old_pair is not None and old_pair[0] == new_pair[0]:
                    sends = [(new_pair[0], Change(new_pair[1], old_pair[1]))]
                else:
                    sends = []
                    if old_pair is not None:
                        sends.append((old_pair[0], Change(None, old_pair[1])))
                    if new_pair is not None:
                        sends.append((new_pair[0], Change(new_pair[1], None)))
                rows = [(encode_key(k), dumps(c), ts, p, o, src, f"{seq}{i:08x}") for i, (k, c) in enumerate(sends)]
            except Exception:  # noqa: BLE001 - the speed layer drops the record
                add_error(errs, self.node, (src, p, o))
                continue
            out.extend(rows)
        flush(self.errors_acc, errs)
        return _stream_frame(out)


class TableAggFold(_Fold):
    """KGroupedTable count / reduce / aggregate of a bucket of new keys (rows of
    :data:`_records.AGG_SCHEMA` whose values are ``Change``), see the module docstring."""

    def __init__(self, node: str, op: Any, errors_acc: Any) -> None:
        self.node, self.op, self.errors_acc = node, op, errors_acc
        self.init, self.add, self.sub = op.functions()

    def step(self, key: Any, change: Change[Any], ts: int, state: tuple[Any, int] | None) -> tuple[Any, int] | None:
        """The store's ``(aggregate, timestamp)`` of ``key`` after one record
        (``TableAggregateProcessor.process``); None: no row."""
        old_agg = None if state is None else state[0]
        out_ts = ts
        if change.old is not None and old_agg is not None:
            intermediate = self.sub(key, change.old, old_agg)
            out_ts = max(ts, state[1])  # type: ignore[index]
        else:
            intermediate = old_agg
        if change.new is not None:
            if intermediate is None:
                new_agg = change.new if self.init is None else self.add(key, change.new, self.init())
            else:
                new_agg = self.add(key, change.new, intermediate)
            if state is not None:
                out_ts = max(ts, state[1])
        else:
            new_agg = intermediate
        return None if new_agg is None else (new_agg, out_ts)

    def fold(self, keys: Iterable[tuple[bytes, Iterable[tuple[Any, ...]]]], blk: int, errs: Errors) -> list[tuple[Any, ...]]:
        """The view rows ``(key, None, None, value JSON, timestamp)`` of ``keys`` (the
        base's :meth:`_folds._Fold.fold`; ``blk`` is always 0: a table has no windows)."""
        rows: list[tuple[Any, ...]] = []
        for _gk, recs in keys:
            state: tuple[Any, int] | None = None
            key: Any = None
            last = (-1, -1, -1)
            for _, ts, p, o, src, _seq, kb, vb in recs:
                key = decode_key(kb)
                try:
                    state = self.step(key, decode_value(vb), ts, state)
                    last = (src, p, o)
                except Exception:  # noqa: BLE001 - dropped; the store keeps the previous aggregate
                    add_error(errs, self.node, (src, p, o))
            if state is not None:
                text = self.to_json(state[0], errs, last)
                if text is not None:
                    rows.append((key_text(key), None, None, text, state[1]))
        return rows
