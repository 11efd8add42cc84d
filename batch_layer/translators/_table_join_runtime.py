"""Worker-side code of the KTable-KTable join translation (``table_joins``): replays, per
key, both tables' forwarded changes in batch order through the speed layer's
``TableTableJoinProcessor`` logic and the merger's store (``TableTableMergeProcessor``).

Input rows are the two sides' change streams (``TableToStreamGroup`` output, i.e. the
changes each KTable forwards, new values only) tagged with ``side`` (0: the left table, 1:
the right one). Per key the replay keeps each side's current value and timestamp (what the
join's value getter reads) and its previous value (the ``old`` a table sends when the join
enabled sending old values: the left table of a left or outer join, the right table of an
outer join). Each change, as the processor:

* inner: nothing when the other side is absent; else ``joiner(new, other)`` (None when new
  is None);
* left, left side: ``joiner(new, other_or_None)``; nothing when the other side is absent
  and new and old are both None;
* left, right side: nothing when the left value is absent; else ``joiner(left, new)``
  (also when new is None);
* outer: nothing when the other side, new and old are all absent; else
  ``joiner(new_or_None, other_or_None)`` unless new and the other side are both None;

also computing ``joiner(old, other)`` as the processor does (a joiner raising on it drops
the record). The result is put in the store with timestamp ``max(record, other side's)``
(the record's when the other side is absent); None deletes. A record whose joiner raises
is dropped and counted at the join node, as the speed layer drops it.
"""
from __future__ import annotations

from itertools import groupby
from operator import itemgetter
from typing import Any

import pandas as pd

from speed_layer.state.keys import decode_key

from ..general.store_rows import json_value, key_text
from ._accumulators import flush
from ._records import Errors, _view_frame, add_error, loads_or_none, sorted_rows

_ORDER = ["ts", "p", "o", "src", "seq", "side"]


class TableJoinViewGroup:
    """``applyInPandas`` over a bucket of keys: the materialized store of a KTable-KTable
    join (view rows), see the module docstring."""

    def __init__(self, node: str, kind: str, joiner: Any, old_sent: tuple[bool, bool], errors_acc: Any) -> None:
        self.node, self.kind, self.joiner = node, kind, joiner
        self.old_sent, self.errors_acc = old_sent, errors_acc

    def _j(self, side: int, this: Any, other: Any) -> Any:
        return self.joiner(this, other) if side == 0 else self.joiner(other, this)

    def _change(self, side: int, new: Any, old: Any, v2: Any) -> tuple[bool, Any]:
        """``(forwarded, new result)`` of one change of ``side`` (``v2``: the other side's
        current value) as ``TableTableJoinProcessor.process``."""
        kind = self.kind
        right_of_left = kind == "left" and side == 1
        if v2 is None and (kind == "inner" or right_of_left):
            return False, None
        if v2 is None and new is None and old is None:
            return False, None
        if right_of_left:
            res, _ = self._j(side, new, v2), self._j(side, old, v2)
        elif kind == "outer":
            res = self._j(side, new, v2) if (v2 is not None or new is not None) else None
            if v2 is not None or old is not None:
                self._j(side, old, v2)
        else:
            res = self._j(side, new, v2) if new is not None else None
            if old is not None:
                self._j(side, old, v2)
        return True, res

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        rows = []
        for _k, recs in groupby(sorted_rows(pdf, "k", _ORDER, ["v"]), key=itemgetter(0)):
            cur: list[tuple[Any, int] | None] = [None, None]  # side -> (value, ts) as its store holds it
            stored: tuple[Any, int] | None = None  # the join store's (value, ts)
            key: Any = None
            last_id = (-1, -1, -1)
            for kb, ts, p, o, src, _seq, side, vb in recs:
                if key is None:
                    key = decode_key(kb)
                new = loads_or_none(vb)
                last_id = (src, p, o)
                prev = cur[side]
                old = prev[0] if (prev is not None and self.old_sent[side]) else None
                cur[side] = None if new is None else (new, ts)
                other = cur[1 - side]
                v2 = None if other is None else other[0]
                try:
                    forwarded, res = self._change(side, new, old, v2)
                except Exception:  # noqa: BLE001 - the speed layer drops the record
                    add_error(errs, self.node, (src, p, o))
                    continue
                if forwarded:
                    out_ts = ts if other is None else max(ts, other[1])
                    stored = None if res is None else (res, out_ts)
            if stored is not None:
                try:
                    rows.append((key_text(key), None, None, json_value(stored[0]), stored[1]))
                except Exception:  # noqa: BLE001 - not JSON-serializable: as a failing view row
                    add_error(errs, self.node, last_id)
        flush(self.errors_acc, errs)
        return _view_frame(rows)
