"""Stateless KStream and KTable processors: filter, map, flatMap, peek, branch, merge,
toStream, table filter/mapValues, and the user processor wrapper."""
from __future__ import annotations

from typing import Any, Callable

from ..api import Change, Record, _new_tuple
from ..internals import InternalProcessorContext
from .base import OpProcessor, versioned_upstream


class SourceProcessor(OpProcessor):
    """Forwards the deserialized record (deserialization happens in the task). Linked to
    its only child, its ``process`` is the child's (the task calls the child directly)."""

    def process(self, record: Record[Any, Any]) -> None:
        self.forward(record)

    def link_only_child(self, process: Callable[[Record[Any, Any]], None]) -> None:
        self.forward = self.process = process  # type: ignore[method-assign]


class FilterProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        op = self.op
        if bool(op.predicate(record[0], record[1])) != op.negate:
            self.forward(record)


class MapProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        if self.op.key_only:
            self.forward(record.with_key(self.op.mapper(record.key, record.value)))
            return
        k, v = self.op.mapper(record.key, record.value)
        self.forward(_new_tuple(Record, (k, v, record.timestamp, record.headers)))


class MapValuesProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        op = self.op
        v = op.mapper(record[0], record[1]) if op.with_key else op.mapper(record[1])
        self.forward(_new_tuple(Record, (record[0], v, record[2], record[3])))  # record.with_value(v)


class FlatMapProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        for k, v in self.op.mapper(record.key, record.value):
            self.forward(_new_tuple(Record, (k, v, record.timestamp, record.headers)))


class FlatMapValuesProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        vs = self.op.mapper(record.key, record.value) if self.op.with_key else self.op.mapper(record.value)
        for v in vs:
            self.forward(record.with_value(v))


class PeekProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        self.op.action(record.key, record.value)
        if not self.op.terminal:
            self.forward(record)


class BranchProcessor(OpProcessor):
    """Forwards to the first branch whose predicate matches (None: the default branch)."""

    def link_only_child(self, process: Callable[[Record[Any, Any]], None]) -> None:
        """Not linked: it names the child it forwards to."""

    def process(self, record: Record[Any, Any]) -> None:
        for pred, child in zip(self.op.predicates, self.op.children):
            if pred is None or pred(record.key, record.value):
                self.forward(record, child)
                return


class PassThroughProcessor(OpProcessor):
    """Merge and other nodes that forward unchanged (linked to its only child, its
    ``process`` is the child's, as :class:`SourceProcessor`)."""

    def process(self, record: Record[Any, Any]) -> None:
        self.forward(record)

    def link_only_child(self, process: Callable[[Record[Any, Any]], None]) -> None:
        self.forward = self.process = process  # type: ignore[method-assign]


class ToStreamProcessor(OpProcessor):
    """KTable -> KStream: the change's new value (None for a delete)."""

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        key = self.op.mapper(record.key, change.new) if self.op.mapper else record.key
        self.forward(Record(key, change.new, record.timestamp, record.headers))


class _MaterializedTable(OpProcessor):
    """A KTable processor that may materialize its result into ``op.store`` (forwarding
    then goes through the store's cache when caching is on, as Kafka's
    TimestampedTupleForwarder)."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: Any = context.get_state_store(self.op.store) if getattr(self.op, "store", None) else None
        self.caching = False
        if self.store is not None and getattr(self.store, "cache", None) is not None:
            from ...state.stores import ValueAndTimestamp

            self.caching = True

            def on_flush(key: Any, new: ValueAndTimestamp | None, old: ValueAndTimestamp | None) -> None:
                ts = new.timestamp if new is not None else (old.timestamp if old is not None else -1)
                self.context.forward_flushed(
                    Record(key, Change(None if new is None else new.value, None if old is None else old.value), ts))

            self.store.flush_listener = on_flush

    def _emit(self, record: Record[Any, Any], new: Any, old: Any) -> None:
        """Kafka's KTableFilter/KTableMapValues: materialized, the store's put decides
        ``is_latest`` (a versioned store: whether the put version is the latest; not put:
        nothing forwarded; any other store: latest); else the input's flag passes on."""
        is_latest = getattr(record.value, "is_latest", True)
        if self.store is not None:
            from ...state.stores import VersionedKeyValueStore

            code = self.store.put(record.key, new, record.timestamp)
            if isinstance(self.store, VersionedKeyValueStore):
                if code == VersionedKeyValueStore.PUT_RETURN_CODE_NOT_PUT:
                    return
                is_latest = code == VersionedKeyValueStore.PUT_RETURN_CODE_VALID_TO_UNDEFINED
            else:
                is_latest = True
            if self.caching:
                return
        self.forward(record.with_value(Change(new, old, is_latest)))

    def _stored_value(self, key: Any) -> Any:
        """The current value of ``key`` in the own store (the latest version when versioned)."""
        from ...state.stores import VersionedKeyValueStore

        if isinstance(self.store, VersionedKeyValueStore):
            vr = self.store.get(key)
            return None if vr is None else vr.value
        return self.store.get(key)


class TableFilterProcessor(_MaterializedTable):
    """As Kafka's KTableFilter: values failing the predicate become None. With
    ``send_old_values`` the old value is filtered too (read from the own store when
    materialized) and a change whose new and old values are both None is not forwarded;
    without it, the old value is dropped and every change is forwarded."""

    def _keep(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return value if bool(self.op.predicate(key, value)) != self.op.negate else None

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        new = self._keep(record.key, change.new)
        send_old = getattr(self.op, "send_old_values", True)
        if not send_old:
            old = None
        elif self.store is not None:
            old = self._stored_value(record.key)
        else:
            old = self._keep(record.key, change.old)
        # Kafka's KTableFilter skips a change that stays absent, except with versioned
        # semantics (the input table is versioned, KIP-914: shouldNotSkipNullIfVersionedUpstream)
        if send_old and new is None and old is None and not self._versioned_input():
            return
        self._emit(record, new, old)

    def _versioned_input(self) -> bool:
        if not hasattr(self, "_versioned"):
            self._versioned = versioned_upstream(self.context, self.node)
        return self._versioned


class TableMapValuesProcessor(_MaterializedTable):
    """As Kafka's KTableMapValues: the mapper on the new and the old value (None stays None);
    materialized into ``op.store`` when given."""

    def _map(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return self.op.mapper(key, value) if self.op.with_key else self.op.mapper(value)

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        old = self._stored_value(record.key) if self.store is not None else self._map(record.key, change.old)
        self._emit(record, self._map(record.key, change.new), old)


class UserProcessor(OpProcessor):
    """Runs a Processor-API processor made by the op's supplier."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.inner = self.op.supplier()
        self.inner.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        self.inner.process(record)

    def close(self) -> None:
        self.inner.close()
