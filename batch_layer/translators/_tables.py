"""Worker-side code of KTables: the filter / mapValues stages applied to a value, a
KTable's store as a view, and a KTable's change stream (``toStream``).

Record tuples, frames and error accounting are those of :mod:`._records`.
"""
from __future__ import annotations

from itertools import groupby
from operator import itemgetter
from typing import Any, Iterator

import pandas as pd

from speed_layer.state.keys import decode_key, encode_key

from ..general.store_rows import json_value, key_text
from ._accumulators import flush
from ._records import ORDER, Errors, _stream_frame, _view_frame, add_error, dumps, loads_or_none, sorted_rows


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
