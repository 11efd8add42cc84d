"""``KTable.group_by`` and ``KGroupedTable`` aggregations, ported from Kafka Streams'
``KTableRepartitionMap``, ``KTableAggregate`` and ``KTableReduce`` (3.5+, KIP-904).

* :class:`TableSelectProcessor` maps the new and the old value of each table update with
  the selector. When both pairs exist and have the same new key, ONE record
  ``Change(new_value, old_value)`` goes through the repartition topic (KIP-904: the
  subtractor and the adder then run in one step, so no intermediate result is visible);
  otherwise the old pair is sent first as ``Change(None, old)`` (a subtraction) and then
  the new pair as ``Change(new, None)`` (an addition). Pairs whose key or value is None are
  skipped. A null table key raises :class:`StreamsException`.
* :class:`TableAggregateProcessor` first subtracts the old value (when both it and the
  current aggregate exist), then adds the new one (starting from the initializer, or for
  reduce from the value itself). The result's timestamp is the largest of the record's
  and the previous aggregate's. The aggregate is kept even when it returns to its initial
  value (a count of 0 stays 0); only an aggregate of None deletes the row.
"""
from __future__ import annotations

from typing import Any

from ...errors import StreamsException
from ...state.stores import KeyValueStore
from ..api import Change, Record
from ..internals import InternalProcessorContext
from .aggregate import _Forwarding
from .base import OpProcessor


class TableSelectProcessor(OpProcessor):
    """``TableSelectOp``: see the module docstring (Kafka's KTableRepartitionMap)."""

    def _pair(self, key: Any, value: Any) -> tuple[Any, Any] | None:
        if value is None:
            return None
        pair = self.op.selector(key, value)
        if pair is None:
            return None
        new_key, new_value = pair
        return None if new_key is None or new_value is None else (new_key, new_value)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            raise StreamsException("Record key for the grouping KTable should not be null.")
        change: Change[Any] = record.value
        if not change.is_latest:
            # Kafka's KTableRepartitionMap: an out-of-order update of a versioned table is
            # not aggregated (KIP-914), nor sent through the repartition topic
            return
        new_pair = self._pair(record.key, change.new)
        old_pair = self._pair(record.key, change.old)
        if new_pair is not None and old_pair is not None and old_pair[0] == new_pair[0]:
            self.forward(Record(old_pair[0], Change(new_pair[1], old_pair[1]), record.timestamp, record.headers))
            return
        if old_pair is not None:
            self.forward(Record(old_pair[0], Change(None, old_pair[1]), record.timestamp, record.headers))
        if new_pair is not None:
            self.forward(Record(new_pair[0], Change(new_pair[1], None), record.timestamp, record.headers))


class TableAggregateProcessor(_Forwarding):
    """``TableAggregateOp`` (count, reduce or aggregate): see the module docstring."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: KeyValueStore = context.get_state_store(self.op.store)
        self._install_flush(self.store)
        self._init, self._add, self._sub = self.op.functions()

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            raise StreamsException(f"Record key for KTable aggregate operator with state {self.op.store} should not be null.")
        change: Change[Any] = record.value
        old = self.store.get_with_timestamp(record.key)
        old_agg = None if old is None else old.value
        ts = record.timestamp
        if change.old is not None and old_agg is not None:
            intermediate = self._sub(record.key, change.old, old_agg)
            ts = max(record.timestamp, old.timestamp)  # type: ignore[union-attr]
        else:
            intermediate = old_agg
        if change.new is not None:
            if intermediate is None:
                new_agg = change.new if self._init is None else self._add(record.key, change.new, self._init())
            else:
                new_agg = self._add(record.key, change.new, intermediate)
            if old is not None:
                ts = max(record.timestamp, old.timestamp)
        else:
            new_agg = intermediate
        self.store.put(record.key, new_agg, ts)
        if not self.caching:
            self.forward(Record(record.key, Change(new_agg, old_agg), ts, record.headers))
