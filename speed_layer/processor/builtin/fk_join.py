"""KTable-KTable foreign-key join processors (KIP-213), ported from Kafka Streams 4.x's
``kstream.internals.foreignkeyjoin`` package.

The join runs on both tables' tasks and talks through two internal topics:

1. ``subscribe`` (SubscriptionSendProcessorSupplier), on the left table's task: each left
   change becomes subscriptions keyed by foreign key (a ``SubscriptionWrapper`` carrying a
   hash of the new left value, an instruction, the primary key and the left partition),
   sent to ``<app>-...-SUBSCRIPTION-REGISTRATION-n-topic`` (co-partitioned with the right
   table);
2. ``receive`` (SubscriptionReceiveProcessorSupplier), on the right table's task: keeps the
   subscription store keyed by ``(foreign key, primary key)``;
3. ``join_foreign`` (SubscriptionJoinProcessorSupplier): looks the right value up and
   answers on ``<app>-...-SUBSCRIPTION-RESPONSE-n-topic``, to the left partition;
4. ``foreign_table`` (ForeignTableJoinProcessorSupplier): each right change answers every
   subscriber of its key (prefix scan of the subscription store);
5. ``resolve`` (ResponseJoinProcessorSupplier), back on the left table's task: drops the
   response if the left value changed since (hash mismatch), else emits
   ``joiner(left, right)`` or a tombstone (inner join without right value, or left row
   gone).
"""
from __future__ import annotations

import hashlib
import pickle
import struct
from dataclasses import dataclass
from typing import Any

from ...state.keys import ORDERED_KEY
from ...state.stores import KeyValueStore, ValueAndTimestamp
from ..api import Change, Record
from ..internals import InternalProcessorContext
from .base import OpProcessor
from .joins import BoundGetter

#: SubscriptionWrapper.Instruction values (Kafka's names)
DELETE_KEY_NO_PROPAGATE = "DELETE_KEY_NO_PROPAGATE"
DELETE_KEY_AND_PROPAGATE = "DELETE_KEY_AND_PROPAGATE"
PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = "PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE"
PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = "PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE"

_LEN = struct.Struct(">I")


@dataclass(frozen=True)
class SubscriptionWrapper:
    """A subscription of left row ``primary_key`` (from ``primary_partition``) to a foreign
    key; ``hash`` identifies the left value it was made for (None for a deleted row).
    ``foreign_key_bytes`` is the foreign key serialized as the right table's input topic
    keys are, to send the subscription to the right table's partition."""

    hash: bytes | None
    instruction: str
    primary_key: Any
    primary_partition: int | None
    foreign_key_bytes: bytes | None = None


@dataclass(frozen=True)
class SubscriptionResponseWrapper:
    """The right value (None if absent) answering a subscription with ``hash``."""

    hash: bytes | None
    foreign_value: Any
    primary_partition: int | None


def value_hash(value: Any, serde: Any) -> bytes | None:
    """A 128-bit hash of the serialized left value (Kafka: Murmur3 of the value bytes);
    ``serde`` is the left store's value serde (pickle when None)."""
    if value is None:
        return None
    data = serde.serialize(value) if serde is not None else pickle.dumps(value, protocol=5)
    return hashlib.blake2b(data or b"", digest_size=16).digest()


def response_partition(topic: str, key: Any, value: Any, num_partitions: int) -> int | None:
    """Partitioner of the response topic: back to the left record's partition."""
    return getattr(value, "primary_partition", None)


def subscription_partition(topic: str, key: Any, value: Any, num_partitions: int) -> int | None:
    """Partitioner of the subscription topic: the right table's partition of the foreign
    key (Java's murmur2 of the key bytes, as the right table's input was partitioned)."""
    from ...runtime.partitioning import partition_for_key

    kb = getattr(value, "foreign_key_bytes", None)
    return None if kb is None else partition_for_key(kb, num_partitions)


def _default_key_serde(context: Any) -> Any:
    return context.app_config.default_key_serde


def _task_partition(context: Any) -> int | None:
    try:
        return int(str(context.task_id).rsplit("_", 1)[1])
    except (ValueError, IndexError, AttributeError):
        return None


def _combined_prefix(fk_bytes: bytes) -> bytes:
    return _LEN.pack(len(fk_bytes)) + fk_bytes


class SubscriptionSendProcessor(OpProcessor):
    """Left-table changes -> subscriptions (Kafka's SubscriptionSendProcessorSupplier).

    Inner join: a new or updated row subscribes to its foreign key (``PROPAGATE_ONLY_IF_FK_
    VAL_AVAILABLE``, or ``PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE`` when the key changed,
    after ``DELETE_KEY_NO_PROPAGATE`` to the old key); a row with a null foreign key is
    dropped (``dropped-records``) after unsubscribing the old key with
    ``DELETE_KEY_AND_PROPAGATE``; a deleted row unsubscribes with ``DELETE_KEY_AND_
    PROPAGATE``. Left join (KIP-962): every change (but an idempotent delete) subscribes
    with ``PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE`` -- a null foreign key included -- after
    ``DELETE_KEY_NO_PROPAGATE`` to a changed old key. Out-of-order updates of versioned
    tables never reach this processor (the table source holds them back, KIP-914)."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.serde = context.get_state_store(self.op.hash_store).value_serde if self.op.hash_store else None
        self.fk_serde = self.op.foreign_key_serde or ORDERED_KEY
        # the right table's input keys: its key serde, else the config's default key serde
        self.partition_serde = self.op.foreign_key_serde or _default_key_serde(context) or ORDERED_KEY
        # the left table's partition is the task's (a cache flush has no record metadata)
        self.partition = _task_partition(context)

    def _fk(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        ex = self.op.foreign_key_extractor
        return ex(key, value) if self.op.extractor_with_key else ex(value)

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        if not change.is_latest:
            # Kafka's SubscriptionSendProcessorSupplier: out-of-order versioned updates are
            # dropped (KIP-914)
            self.dropped("out-of-order versioned table update", record)
            return
        self._hash: bytes | None = value_hash(change.new, self.serde)
        old_fk = self._fk(record.key, change.old)
        if self.op.left:
            if change.old is None and change.new is None:
                return
            new_fk = self._fk(record.key, change.new)
            if old_fk is not None and self._changed(new_fk, old_fk):
                self._send(record, old_fk, DELETE_KEY_NO_PROPAGATE)
            self._send(record, new_fk, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)
            return
        if change.new is not None:
            new_fk = self._fk(record.key, change.new)
            if new_fk is None:
                self.dropped("null foreign key", record)
                if old_fk is not None:
                    self._send(record, old_fk, DELETE_KEY_AND_PROPAGATE)
            elif old_fk is not None:
                if self._changed(new_fk, old_fk):
                    self._send(record, old_fk, DELETE_KEY_NO_PROPAGATE)
                    self._send(record, new_fk, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)
                else:
                    self._send(record, new_fk, PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)
            else:
                self._send(record, new_fk, PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)
        elif old_fk is not None:
            self._send(record, old_fk, DELETE_KEY_AND_PROPAGATE)

    def _changed(self, new_fk: Any, old_fk: Any) -> bool:
        return self.fk_serde.serialize(new_fk) != self.fk_serde.serialize(old_fk)

    def _send(self, record: Record[Any, Any], fk: Any, instruction: str) -> None:
        kb = None if fk is None else self.partition_serde.serialize(fk)
        wrapper = SubscriptionWrapper(self._hash, instruction, record.key, self.partition, kb)
        self.forward(Record(fk, wrapper, record.timestamp, record.headers))


class SubscriptionReceiveProcessor(OpProcessor):
    """Keeps the subscription store (Kafka's SubscriptionReceiveProcessorSupplier): deletes
    the ``(foreign key, primary key)`` entry for ``DELETE_*`` instructions, stores it
    otherwise, and forwards ``Change(new, old)`` of the entry keyed ``(fk, pk)``. A null
    foreign key is only accepted with ``PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE`` (left join,
    not stored); otherwise it is dropped."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: KeyValueStore = context.get_state_store(self.op.stores[0])
        self.fk_serde = self.op.foreign_key_serde or ORDERED_KEY
        self.pk_serde = self.op.key_serde or ORDERED_KEY

    def process(self, record: Record[Any, Any]) -> None:
        wrapper: SubscriptionWrapper = record.value
        new = ValueAndTimestamp(wrapper, record.timestamp)
        if record.key is None:
            if wrapper.instruction != PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
                self.dropped("null foreign key", record)
                return
            self.forward(Record((None, wrapper.primary_key), Change(new, None), record.timestamp, record.headers))
            return
        ck = _combined_prefix(self.fk_serde.serialize(record.key) or b"") + (self.pk_serde.serialize(wrapper.primary_key) or b"")
        old = self.store.get_with_timestamp(ck)
        if wrapper.instruction in (DELETE_KEY_AND_PROPAGATE, DELETE_KEY_NO_PROPAGATE):
            self.store.put(ck, None, record.timestamp)
        else:
            self.store.put(ck, wrapper, record.timestamp)
        self.forward(Record((record.key, wrapper.primary_key), Change(new, old), record.timestamp, record.headers))


class SubscriptionJoinProcessor(OpProcessor):
    """Answers one subscription (Kafka's SubscriptionJoinProcessorSupplier) with the right
    table's current value for the foreign key, keyed by the primary key, at timestamp
    ``max(subscription, right value)``: ``DELETE_KEY_AND_PROPAGATE`` answers None,
    ``PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE`` answers the value or None,
    ``PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE`` answers only when there is a value,
    ``DELETE_KEY_NO_PROPAGATE`` answers nothing."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.getter = BoundGetter(self.op.getter, context)

    def process(self, record: Record[Any, Any]) -> None:
        fk, pk = record.key
        vt: ValueAndTimestamp = record.value.new
        wrapper: SubscriptionWrapper = vt.value
        foreign = None if fk is None else self.getter.get(fk)
        ts = vt.timestamp if foreign is None else max(vt.timestamp, foreign.timestamp)
        ins = wrapper.instruction
        if ins == DELETE_KEY_AND_PROPAGATE:
            value = None
        elif ins == PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
            value = None if foreign is None else foreign.value
        elif ins == PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE:
            if foreign is None:
                return
            value = foreign.value
        elif ins == DELETE_KEY_NO_PROPAGATE:
            return
        else:
            raise ValueError(f"unhandled subscription instruction {ins!r}")
        self.forward(Record(pk, SubscriptionResponseWrapper(wrapper.hash, value, wrapper.primary_partition), ts, record.headers))


class ForeignTableJoinProcessor(OpProcessor):
    """Right-table changes -> one response per subscriber of that key, in primary-key
    order, at the right record's timestamp (Kafka's ForeignTableJoinProcessorSupplier); a
    deleted right row answers None. Null keys are dropped."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: KeyValueStore = context.get_state_store(self.op.stores[0])
        self.fk_serde = self.op.foreign_key_serde or ORDERED_KEY

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            self.dropped("null key", record)
            return
        change: Change[Any] = record.value
        if not change.is_latest:
            # Kafka's ForeignTableJoinProcessorSupplier: out-of-order versioned updates are
            # dropped (KIP-914)
            self.dropped("out-of-order versioned table update", record)
            return
        prefix = _combined_prefix(self.fk_serde.serialize(record.key) or b"")
        for _, wrapper in list(self.store.prefix_scan(prefix)):
            resp = SubscriptionResponseWrapper(wrapper.hash, change.new, wrapper.primary_partition)
            self.forward(Record(wrapper.primary_key, resp, record.timestamp, record.headers))


class ResponseJoinProcessor(OpProcessor):
    """Resolves responses against the left table (Kafka's ResponseJoinProcessorSupplier):
    a response whose hash differs from the current left value's is stale and dropped;
    otherwise the result is a tombstone when the right value is None and (inner join or
    the left row is gone), else ``joiner(left, right)`` (``right`` None for a left join),
    with the response's timestamp."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.getter = BoundGetter(self.op.getter, context)
        self.serde = context.get_state_store(self.op.hash_store).value_serde if self.op.hash_store else None

    def process(self, record: Record[Any, Any]) -> None:
        resp: SubscriptionResponseWrapper = record.value
        current = self.getter.get(record.key)
        current_hash = None if current is None else value_hash(current.value, self.serde)
        if resp.hash != current_hash:
            return
        if resp.foreign_value is None and (not self.op.left or current is None):
            result = None
        else:
            result = self.op.joiner(None if current is None else current.value, resp.foreign_value)
        self.forward(Record(record.key, result, record.timestamp, record.headers))


def fk_processor(node: Any) -> OpProcessor:
    """The processor of a ForeignKeyJoinOp node, by role."""
    return {
        "subscribe": SubscriptionSendProcessor,
        "receive": SubscriptionReceiveProcessor,
        "join_foreign": SubscriptionJoinProcessor,
        "foreign_table": ForeignTableJoinProcessor,
        "resolve": ResponseJoinProcessor,
    }[node.op.role](node)
