"""Worker-side code of the foreign-key join translation (``fk_joins``): the speed layer's
five FK-join processors (``speed_layer.processor.builtin.fk_join``, Kafka's
``foreignkeyjoin`` package) replayed in two keyed passes, with the subscription and
response topics in between replaced by a shuffle.

Rows between the passes (:data:`FK_SCHEMA`): ``gjk`` the foreign key as the subscription
store keys it (``foreign_key_serde``, default the order-preserving key encoding), ``side``
0 a right-table change (``v``: its new value), 1 a subscription event of left row ``k``
(``v``: ``(instruction, primary key bytes, left value hash, pickled left value)``), 2 a
result already resolved (a left join's row with a null foreign key: ``v`` the result;
``gjk`` is then the row's key, only to spread such rows); then the order key of the table
record that caused it.

1. :class:`SubscriptionGroup`, per left key in batch order: the changes the left table
   forwards (``TableToStreamGroup.changes``) through ``SubscriptionSendProcessor``'s
   logic (the extractor on the old value, then the new one; which instruction to which
   foreign key; a left join's null foreign key answered at once with ``joiner(value,
   None)``, a deleted row's with a tombstone). The pass also tracks the left row's entries
   of the subscription store: an extractor that raises drops the change after the left
   table's store took it, so the row's entry keeps the hash of an older value and the
   resolver drops every later response to it (hash mismatch) until the row subscribes
   again; such entries get an ``instruction`` "CURRENT" event carrying the row's current
   value at each of its changes, so the second pass can decide the hash check.
2. :class:`ForeignKeyJoinGroup`, per foreign key in batch order (``(timestamp, table
   changes first, partition, offset, topic)``): the right value and the subscribers
   (``SubscriptionReceiveProcessor``'s store), a subscription answered as
   ``SubscriptionJoinProcessor`` and resolved as ``ResponseJoinProcessor``; a right change
   answers every subscriber in primary-key byte order (``ForeignTableJoinProcessor``'s
   prefix scan), each result with the change's timestamp. The output is the resolver's
   record stream (stream frame keyed by the left key).

Why this is the speed layer's output fed in event-time order: the TopologyTestDriver (and
the general executor) finish each input record, its subscription and response round trip
included, before the next one, so a response is resolved against the left value its
subscription carried (the hash check passes but after an extractor error, modelled above)
and every record of the round trip takes its cause's place. A result keeps its cause's
order key, ``seq`` extended by its place among the cause's results (the subscriber index
for a right change), as the general executor orders a repartition topic. Its timestamp
``max(left record, right value)`` is the left record's: the right value was processed
before it, in timestamp order.
"""
from __future__ import annotations

import pickle
from itertools import groupby
from operator import itemgetter
from typing import Any

import pandas as pd

from speed_layer.processor.builtin.fk_join import (
    DELETE_KEY_AND_PROPAGATE, DELETE_KEY_NO_PROPAGATE, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE,
    PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE, value_hash,
)
from speed_layer.state.keys import encode_key

from ._accumulators import flush
from ._records import RECORD_COLUMNS, Errors, _stream_frame, add_error, dumps, loads_or_none, ranked_rows, rows_frame
from ._tables import TableToStreamGroup

FK_SCHEMA = "gjk binary, side int, k binary, v binary, ts long, p int, o long, src int, seq string"
#: a subscription-store entry's left value changed without a new subscription (see module docstring)
CURRENT = "CURRENT"
_FIRST = f"{0:08x}"


def _fk_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return rows_frame((("gjk", object), ("side", "int32")) + RECORD_COLUMNS, rows)


class FkJoinSpec:
    """What both passes need of the join (picklable): node names (for error counts), the
    extractor and joiner, the kind, the serdes of the subscription store's keys
    (``fk_serde``, ``pk_serde``), of the subscription topic's partitioner
    (``partition_serde``) and of the left value hash (``hash_serde``; None: pickle)."""

    def __init__(self, subscribe: str, foreign_table: str, resolve: str, extractor: Any, with_key: bool, joiner: Any, left: bool,
                 fk_serde: Any, pk_serde: Any, partition_serde: Any, hash_serde: Any) -> None:
        self.subscribe, self.foreign_table, self.resolve = subscribe, foreign_table, resolve
        self.extractor, self.with_key, self.joiner, self.left = extractor, with_key, joiner, left
        self.fk_serde, self.pk_serde, self.partition_serde, self.hash_serde = fk_serde, pk_serde, partition_serde, hash_serde

    def fk(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return self.extractor(key, value) if self.with_key else self.extractor(value)

    def result(self, left_value: Any, foreign: Any) -> Any:
        """``ResponseJoinProcessor``: a tombstone when the right value is None and (inner
        join or the left row is gone), else ``joiner(left, right)``."""
        if foreign is None and (not self.left or left_value is None):
            return None
        return self.joiner(left_value, foreign)


class SubscriptionGroup:
    """``applyInPandas`` over a bucket of left keys (stream frame of the left table's
    changelog in, :data:`FK_SCHEMA` out): pass 1 of the module docstring."""

    def __init__(self, spec: FkJoinSpec, replay: TableToStreamGroup, errors_acc: Any) -> None:
        self.spec, self.replay, self.errors_acc = spec, replay, errors_acc

    def _sends(self, key: Any, new: Any, old: Any) -> list[tuple[Any, str]]:
        """``(foreign key, instruction)`` sent for one change, as
        ``SubscriptionSendProcessor.process`` (raises where it raises)."""
        spec = self.spec
        old_fk = spec.fk(key, old)

        def changed(a: Any, b: Any) -> bool:
            return spec.fk_serde.serialize(a) != spec.fk_serde.serialize(b)

        if spec.left:
            if old is None and new is None:
                return []
            new_fk = spec.fk(key, new)
            sends = [(old_fk, DELETE_KEY_NO_PROPAGATE)] if old_fk is not None and changed(new_fk, old_fk) else []
            return sends + [(new_fk, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)]
        if new is not None:
            new_fk = spec.fk(key, new)
            if new_fk is None:
                return [(old_fk, DELETE_KEY_AND_PROPAGATE)] if old_fk is not None else []
            if old_fk is not None and changed(new_fk, old_fk):
                return [(old_fk, DELETE_KEY_NO_PROPAGATE), (new_fk, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)]
            return [(new_fk, PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)]
        return [(old_fk, DELETE_KEY_AND_PROPAGATE)] if old_fk is not None else []

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        spec = self.spec
        errs: Errors = {}
        out: list[tuple[Any, ...]] = []
        entries: dict[Any, set[bytes]] = {}  # left key bytes -> foreign keys of its subscription-store entries
        for key, new, old, ts, p, o, src, seq in self.replay.changes(pdf, errs):
            kb = encode_key(key)
            mine = entries.setdefault(kb, set())
            touched: set[bytes] = set()
            head = (ts, p, o, src)
            pkb, h, nb = None, None, None
            try:
                pkb = spec.pk_serde.serialize(key)
                h = value_hash(new, spec.hash_serde)
                nb = None if new is None else dumps(new)
                sends = self._sends(key, new, old)
            except Exception:  # noqa: BLE001 - the speed layer drops the change at the subscribe node
                add_error(errs, spec.subscribe, (src, p, o))
                sends = []
            for fk, ins in sends:
                if fk is None:  # left join, null foreign key: answered with None at once
                    try:
                        res = spec.result(new, None)
                    except Exception:  # noqa: BLE001 - the resolver drops it
                        add_error(errs, spec.resolve, (src, p, o))
                        continue
                    out.append((kb, 2, kb, None if res is None else dumps(res)) + head + (seq + _FIRST,))
                    continue
                try:
                    spec.partition_serde.serialize(fk)  # the subscription topic's partitioner
                    gjk = spec.fk_serde.serialize(fk)
                except Exception:  # noqa: BLE001 - dropped here; the sends before it went out
                    add_error(errs, spec.subscribe, (src, p, o))
                    break
                touched.add(gjk)
                if ins in (DELETE_KEY_AND_PROPAGATE, DELETE_KEY_NO_PROPAGATE):
                    mine.discard(gjk)
                else:
                    mine.add(gjk)
                out.append((gjk, 1, kb, dumps((ins, pkb, h, nb))) + head + (seq,))
            stale = mine - touched
            if stale and pkb is not None:
                for gjk in sorted(stale):
                    out.append((gjk, 1, kb, dumps((CURRENT, pkb, h, nb))) + head + (seq,))
        flush(self.errors_acc, errs)
        return _fk_frame(out)


class ForeignChangesGroup:
    """``applyInPandas`` over a bucket of right keys (stream frame of the right table's
    changelog in, :data:`FK_SCHEMA` side 0 rows out): the changes the right table
    forwards, keyed by their foreign key bytes."""

    def __init__(self, spec: FkJoinSpec, replay: TableToStreamGroup, errors_acc: Any) -> None:
        self.spec, self.replay, self.errors_acc = spec, replay, errors_acc

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        errs: Errors = {}
        out: list[tuple[Any, ...]] = []
        for key, new, _old, ts, p, o, src, seq in self.replay.changes(pdf, errs):
            try:
                gjk = self.spec.fk_serde.serialize(key)
            except Exception:  # noqa: BLE001
                add_error(errs, self.spec.foreign_table, (src, p, o))
                continue
            out.append((gjk, 0, None, None if new is None else dumps(new), ts, p, o, src, seq))
        flush(self.errors_acc, errs)
        return _fk_frame(out)


class ForeignKeyJoinGroup:
    """``applyInPandas`` over a bucket of foreign keys (:data:`FK_SCHEMA` in, stream frame
    out: the resolver's records keyed by the left key): pass 2 of the module docstring."""

    #: indexes ``src`` of the KTable / GlobalKTable topics (``_records.ranked_rows``)
    table_srcs: frozenset[int] = frozenset()

    def __init__(self, spec: FkJoinSpec, errors_acc: Any) -> None:
        self.spec, self.errors_acc = spec, errors_acc

    def __call__(self, pdf: pd.DataFrame) -> pd.DataFrame:
        spec = self.spec
        errs: Errors = {}
        out: list[tuple[Any, ...]] = []
        rows = ranked_rows(pdf, "gjk", ["side", "k", "v"], self.table_srcs)
        for _fk, recs in groupby(rows, key=itemgetter(0)):
            right: tuple[bytes | None, int] | None = None  # (pickled value, ts) the right table's getter returns
            subs: dict[bytes, list[Any]] = {}  # pk bytes -> [left key bytes, entry hash, current hash, current value]
            for _g, ts, p, o, src, seq, side, kb, vb in recs:
                if side == 2:
                    out.append((kb, vb, ts, p, o, src, seq))
                    continue
                if side == 0:
                    right = None if vb is None else (vb, ts)
                    new = loads_or_none(vb)
                    for i, pkb in enumerate(sorted(subs)):
                        lkb, entry_h, cur_h, cur = subs[pkb]
                        if entry_h != cur_h:
                            continue  # a stale entry: the resolver drops the response
                        try:
                            res = spec.result(loads_or_none(cur), None if new is None else pickle.loads(vb))
                        except Exception:  # noqa: BLE001
                            add_error(errs, spec.resolve, (src, p, o))
                            continue
                        out.append((lkb, None if res is None else dumps(res), ts, p, o, src, f"{seq}{i:08x}"))
                    continue
                ins, pkb, h, nb = pickle.loads(vb)
                if ins == CURRENT:
                    entry = subs.get(pkb)
                    if entry is not None:
                        entry[2], entry[3] = h, nb
                    continue
                if ins in (DELETE_KEY_AND_PROPAGATE, DELETE_KEY_NO_PROPAGATE):
                    subs.pop(pkb, None)
                else:
                    subs[pkb] = [kb, h, h, nb]
                if ins == DELETE_KEY_NO_PROPAGATE or (ins == PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE and right is None):
                    continue
                foreign = None if ins == DELETE_KEY_AND_PROPAGATE or right is None else right
                out_ts = ts if foreign is None else max(ts, foreign[1])
                try:
                    res = spec.result(loads_or_none(nb), None if foreign is None else loads_or_none(foreign[0]))
                except Exception:  # noqa: BLE001
                    add_error(errs, spec.resolve, (src, p, o))
                    continue
                out.append((kb, None if res is None else dumps(res), out_ts, p, o, src, seq + _FIRST))
        flush(self.errors_acc, errs)
        return _stream_frame(out)


__all__ = ["CURRENT", "FK_SCHEMA", "FkJoinSpec", "ForeignChangesGroup", "ForeignKeyJoinGroup", "SubscriptionGroup"]
