"""Stateless KStream and KTable processors: filter, map, flatMap, peek, branch, merge,
toStream, table filter/mapValues, and the user processor wrapper."""
from __future__ import annotations

from typing import Any

from ..api import Change, Record
from .base import OpProcessor


class SourceProcessor(OpProcessor):
    """Forwards the deserialized record (deserialization happens in the task)."""

    def process(self, record: Record[Any, Any]) -> None:
        self.forward(record)


class FilterProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        if bool(self.op.predicate(record.key, record.value)) != self.op.negate:
            self.forward(record)


class MapProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        if self.op.key_only:
            self.forward(record.with_key(self.op.mapper(record.key, record.value)))
            return
        k, v = self.op.mapper(record.key, record.value)
        self.forward(Record(k, v, record.timestamp, record.headers))


class MapValuesProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        v = self.op.mapper(record.key, record.value) if self.op.with_key else self.op.mapper(record.value)
        self.forward(record.with_value(v))


class FlatMapProcessor(OpProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        for k, v in self.op.mapper(record.key, record.value):
            self.forward(Record(k, v, record.timestamp, record.headers))


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

    def process(self, record: Record[Any, Any]) -> None:
        for pred, child in zip(self.op.predicates, self.op.children):
            if pred is None or pred(record.key, record.value):
                self.forward(record, child)
                return


class PassThroughProcessor(OpProcessor):
    """Merge and other nodes that forward unchanged."""

    def process(self, record: Record[Any, Any]) -> None:
        self.forward(record)


class ToStreamProcessor(OpProcessor):
    """KTable -> KStream: the change's new value (None for a delete)."""

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        key = self.op.mapper(record.key, change.new) if self.op.mapper else record.key
        self.forward(Record(key, change.new, record.timestamp, record.headers))


class TableFilterProcessor(OpProcessor):
    """As Kafka's KTableFilter: values failing the predicate become None; a change where
    both new and old become None is not forwarded."""

    def _keep(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return value if bool(self.op.predicate(key, value)) != self.op.negate else None

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        new = self._keep(record.key, change.new)
        old = self._keep(record.key, change.old)
        if new is None and old is None:
            return
        self.forward(record.with_value(Change(new, old)))


class TableMapValuesProcessor(OpProcessor):
    def _map(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return self.op.mapper(key, value) if self.op.with_key else self.op.mapper(value)

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        self.forward(record.with_value(Change(self._map(record.key, change.new), self._map(record.key, change.old))))


class UserProcessor(OpProcessor):
    """Runs a Processor-API processor made by the op's supplier."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.inner = self.op.supplier()
        self.inner.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        self.inner.process(record)

    def close(self) -> None:
        self.inner.close()
