"""KTable sources and stream-table joins."""
from __future__ import annotations

from typing import Any

from ...state.stores import KeyValueStore, ValueAndTimestamp, VersionedKeyValueStore
from ..api import Change, Record
from .aggregate import _Forwarding
from .base import OpProcessor


class TableSourceProcessor(_Forwarding):
    """Materializes the latest value per key and forwards ``Change(new, old)``; null keys
    are dropped. With a versioned store, an update older than the key's latest version is
    stored but not forwarded (KIP-914)."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store: Any = context.get_state_store(self.op.store) if self.op.store else None
        self.caching = False
        if isinstance(self.store, KeyValueStore):
            self._install_flush(self.store)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            self.dropped("null key", record)
            return
        if self.store is None:
            self.forward(record.with_value(Change(record.value, None)))
            return
        if isinstance(self.store, VersionedKeyValueStore):
            latest = self.store.get(record.key)
            self.store.put(record.key, record.value, record.timestamp)
            if latest is not None and record.timestamp < latest.timestamp:
                return
            self.forward(record.with_value(Change(record.value, None if latest is None else latest.value)))
            return
        old: ValueAndTimestamp | None = self.store.get_with_timestamp(record.key)
        self.store.put(record.key, record.value, record.timestamp)
        if not self.caching and not (record.value is None and old is None):
            self.forward(record.with_value(Change(record.value, None if old is None else old.value)))


class StreamTableJoinProcessor(OpProcessor):
    """KStream-KTable / KStream-GlobalKTable join: looks the table up when a stream record
    arrives (as of the record's timestamp for a versioned table, KIP-914); table updates
    never trigger output. Null-key stream records are dropped for inner joins; null-value
    records are dropped (as Kafka before KIP-962)."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store: Any = context.get_state_store(self.op.table_store)

    def process(self, record: Record[Any, Any]) -> None:
        lookup_key = self.op.key_selector(record.key, record.value) if self.op.key_selector else record.key
        if record.value is None or (lookup_key is None and not self.op.left) or (record.key is None and not self.op.global_table and not self.op.left):
            self.dropped("null key or value", record)
            return
        other = None
        if lookup_key is not None:
            if isinstance(self.store, VersionedKeyValueStore):
                vr = self.store.get(lookup_key, record.timestamp)
                other = None if vr is None else vr.value
            else:
                other = self.store.get(lookup_key)
        if other is None and not self.op.left:
            return
        joined = self.op.joiner(record.key, record.value, other) if self.op.joiner_with_key else self.op.joiner(record.value, other)
        self.forward(record.with_value(joined))


class GlobalStoreProcessor(OpProcessor):
    """Fills a global store: a user processor when given, else ``put(key, value)``."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store: Any = context.get_state_store(self.op.store)
        self.inner = self.op.supplier() if self.op.supplier else None
        if self.inner is not None:
            self.inner.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        if self.inner is not None:
            self.inner.process(record)
            return
        if record.key is None:
            return
        if isinstance(self.store, VersionedKeyValueStore):
            self.store.put(record.key, record.value, record.timestamp)
        else:
            self.store.put(record.key, record.value, record.timestamp)
