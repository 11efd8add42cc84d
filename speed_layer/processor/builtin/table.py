"""KTable sources and stream-table joins."""
from __future__ import annotations

import heapq
from typing import Any

from ...state.keys import ORDERED_KEY
from ...state.stores import KeyValueStore, ValueAndTimestamp, VersionedKeyValueStore
from ..api import Change, Record
from ..internals import InternalProcessorContext
from .aggregate import _Forwarding
from .base import OpProcessor


class TableSourceProcessor(_Forwarding):
    """Materializes the latest value per key and forwards ``Change(new, old)``; null keys
    are dropped. Without a record cache every update is forwarded (a delete of an absent
    key as ``Change(None, None)``, as Kafka's KTableSource); with one, updates go out on
    flush and such deletes are skipped. With a versioned store (KIP-914, as Kafka's
    KTableSource), an update older than the key's latest version (a tombstone included) is
    stored and forwarded flagged ``Change.is_latest=False`` (its old value is the latest
    value), which versioned-semantics operators downstream skip; one older than the history
    retention is neither stored nor forwarded."""

    def init(self, context: InternalProcessorContext) -> None:
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
            # Kafka's KTableSource over a versioned store: the put's return code says whether
            # the record is the key's latest version -- a tombstone counts as a version, so an
            # update older than a newer delete is not the latest -- or was not put at all
            # (older than the history retention)
            latest = self.store.get(record.key)
            code = self.store.put(record.key, record.value, record.timestamp)
            if code == VersionedKeyValueStore.PUT_RETURN_CODE_NOT_PUT:
                return
            is_latest = code == VersionedKeyValueStore.PUT_RETURN_CODE_VALID_TO_UNDEFINED
            self.forward(record.with_value(Change(record.value, None if latest is None else latest.value, is_latest)))
            return
        old: ValueAndTimestamp | None = self.store.get_with_timestamp(record.key)
        self.store.put(record.key, record.value, record.timestamp)
        # as Kafka's KTableSource + TimestampedTupleForwarder: without a cache every update is
        # forwarded, a delete of an absent key too (Change(None, None)); only the cache's
        # flush skips those
        if not self.caching:
            self.forward(record.with_value(Change(record.value, None if old is None else old.value)))


class StreamTableJoinProcessor(OpProcessor):
    """KStream-KTable / KStream-GlobalKTable join (Kafka's KStreamKTableJoinProcessor and
    KStreamGlobalKTableJoinProcessor): looks the table up when a stream record arrives (as
    of the record's timestamp for a versioned table, KIP-914); table updates never trigger
    output; the result keeps the stream record's key and timestamp.

    Null handling (KIP-962, as Kafka >= 4.1's ``KStreamKTableJoinProcessor#maybeDropRecord``,
    ``leftJoin && mappedKey == null && value != null`` keeps the record): a left join
    forwards a record whose join key (the record key, or ``key_selector(key, value)`` for a
    GlobalKTable) is null as ``joiner(value, None)``; otherwise records with a null join key
    or a null value are dropped (``dropped-records``). Kafka 3.7-4.0 tested the *stream*
    key there instead and dropped a non-null-keyed left-join record whose key selector
    returned null, against KIP-962's text; KAFKA-19208 (apache/kafka#19580) fixed that in
    4.1, the version duet follows (``KStreamGlobalKTableLeftJoinTest``).

    With a grace period (``Joined.grace_ms``, KIP-923, versioned tables only) stream
    records wait in a buffer until stream time reaches ``timestamp + grace`` and are joined
    in ``(timestamp, key)`` order; a record already older than ``stream time - grace`` is
    joined at once. The buffer lives in the processor (not changelogged)."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: Any = context.get_state_store(self.op.table_store)
        self.getter: Any = None
        topology = context.topology
        table_node = self.op.table_node
        if not self.op.global_table and topology is not None and table_node in getattr(topology, "nodes", {}):
            from ...graph.ops import SuppressOp

            table_op = topology.nodes[table_node].op
            if isinstance(table_op, SuppressOp) or getattr(table_op, "store", None) != self.op.table_store:
                # the table has no store of its own (a suppressed table, an unmaterialized
                # filter/mapValues): read it through its value getter, as Kafka does
                from .joins import BoundGetter, getter_from_graph

                self.getter = BoundGetter(getter_from_graph(topology, table_node), context)
        self.grace_ms: int | None = self.op.grace_ms
        self._buffer: list[tuple[int, bytes, int, Record[Any, Any]]] = []
        self._buffer_time = -1
        self._seq = 0

    def process(self, record: Record[Any, Any]) -> None:
        lookup_key = self.op.key_selector(record.key, record.value) if self.op.key_selector else record.key
        if self.op.left and lookup_key is None and record.value is not None:
            self._join(record, None)
            return
        if lookup_key is None or record.value is None:
            self.dropped("null join key or value", record)
            return
        if self.grace_ms is None or record.key is None:
            self._join(record, lookup_key)
            return
        # Kafka's RocksDBTimeOrderedKeyValueBuffer: put() refuses records older than
        # observedStreamTime - grace (joined at once), evictWhile() releases every record
        # with timestamp <= observedStreamTime - grace in (timestamp, key bytes, seq) order
        if self._buffer_time - self.grace_ms > record.timestamp:
            self._join(record, lookup_key)
        else:
            self._buffer_time = max(self._buffer_time, record.timestamp)
            self._seq += 1
            heapq.heappush(self._buffer, (record.timestamp, ORDERED_KEY.serialize(record.key) or b"", self._seq, record))
        self._evict()

    def _evict(self) -> None:
        assert self.grace_ms is not None
        limit = self._buffer_time - self.grace_ms
        while self._buffer and self._buffer[0][0] <= limit:
            rec = heapq.heappop(self._buffer)[3]
            key = self.op.key_selector(rec.key, rec.value) if self.op.key_selector else rec.key
            self._join(rec, key)

    def _join(self, record: Record[Any, Any], lookup_key: Any) -> None:
        other = None
        if lookup_key is not None and self.getter is not None:
            vt = self.getter.get(lookup_key)
            other = None if vt is None else vt.value
        elif lookup_key is not None:
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

    def init(self, context: InternalProcessorContext) -> None:
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
