"""Worker-side code of stream-table as-of joins (``StreamTableJoinProcessor``): the lookup
and join logic, the broadcast join step, the emitters of the shuffled join's two sides, and
the group function that joins them.

Record tuples, frames and error accounting are those of :mod:`._records`.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Any

import pandas as pd

from speed_layer.state.keys import decode_key, encode_key

from ._accumulators import flush
from ._chain import Step
from ._records import (
    JOIN_SCHEMA, RECORD_COLUMNS, TABLE_ROWS_SCHEMA, Errors, Rec, _stream_frame, add_error, dumps, loads_or_none, rid,
    sorted_rows, typed_frame,
)
from ._tables import TableStages
from ._values import FreshValues

_NULL_BUCKETS = 16


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

