"""KGroupedStream aggregations: plain, time-windowed and session-windowed.

Semantics ported from Kafka Streams 3.x/4.x (KStreamAggregate, KStreamReduce,
KStreamWindowAggregate, KStreamSessionWindowAggregate):

* records with a null key are dropped (counted); so are null values, except in time and
  session windows, whose Kafka processors (KStreamWindowAggregate,
  KStreamSessionWindowAggregate) pass null values to the aggregator;
* the result's timestamp is the largest timestamp of the records that built it;
* a time window accepts a record while the processor's observed stream time is below
  ``window end + grace``; later records are dropped and counted as late;
* a session accepts a record unless its merged end is below
  ``stream time - grace - inactivity gap``; merging sessions removes the replaced ones
  and forwards a tombstone (``Change(None, old)``) for each;
* with a caching store updates are forwarded when the cache flushes (commit), otherwise
  each update is forwarded at once as ``Change(new, old)``;
* old values are sent only once a downstream table operation asked for them (Kafka's
  ``sendOldValues``, :attr:`AggregateOp.send_old_values`); otherwise ``old`` is None.
"""
from __future__ import annotations

from typing import Any, Callable

from ...state.stores import KeyValueStore, SessionStore, ValueAndTimestamp, WindowStore
from ...windows import SessionWindows, TimeWindows, Window, Windowed
from ..api import Change, Record
from .base import OpProcessor


def aggregate_functions(op: Any) -> tuple[Callable[[], Any] | None, Callable[[Any, Any, Any], Any]]:
    """``(initializer, aggregator(key, value, agg))`` of an AggregateOp; reduce's
    initializer is None (the first value is the aggregate)."""
    if op.kind == "count":
        return (lambda: 0), (lambda k, v, agg: agg + 1)
    if op.kind == "reduce":
        reducer = op.aggregator
        return None, (lambda k, v, agg: reducer(agg, v))
    return op.initializer, op.aggregator


class _Forwarding(OpProcessor):
    """Forwards ``Change`` records directly or through the store's cache flush."""

    def _install_flush(self, store: Any) -> None:
        self.send_old = bool(getattr(self.op, "send_old_values", True))
        store.send_old_values = self.send_old
        self.caching = getattr(store, "cache", None) is not None
        if self.caching:
            def on_flush(key: Any, new: ValueAndTimestamp | None, old: ValueAndTimestamp | None) -> None:
                ts = new.timestamp if new is not None else (old.timestamp if old is not None else -1)
                self.context.forward(Record(key, Change(None if new is None else new.value, None if old is None else old.value), ts))

            store.flush_listener = on_flush


class StreamAggregateProcessor(_Forwarding):
    """Non-windowed count/reduce/aggregate into a timestamped key-value store."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store: KeyValueStore = context.get_state_store(self.op.store)
        self.initializer, self.aggregator = aggregate_functions(self.op)
        self._install_flush(self.store)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None or record.value is None:
            self.dropped("null key or value", record)
            return
        old = self.store.get_with_timestamp(record.key)
        if old is None:
            agg = record.value if self.initializer is None else self.aggregator(record.key, record.value, self.initializer())
            ts = record.timestamp
        else:
            agg = self.aggregator(record.key, record.value, old.value)
            ts = max(record.timestamp, old.timestamp)
        self.store.put(record.key, agg, ts)
        if not self.caching:
            self.forward(Record(record.key, Change(agg, None if old is None or not self.send_old else old.value), ts, record.headers))


class TimeWindowAggregateProcessor(_Forwarding):
    """Tumbling/hopping window aggregation into a window store."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store: WindowStore = context.get_state_store(self.op.store)
        self.windows: TimeWindows = self.op.windows
        self.initializer, self.aggregator = aggregate_functions(self.op)
        self.observed_stream_time = -1
        self._install_flush(self.store)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:  # Kafka's KStreamWindowAggregate drops null keys only
            self.dropped("null key", record)
            return
        ts = record.timestamp
        self.observed_stream_time = max(self.observed_stream_time, ts)
        close_time = self.observed_stream_time - self.windows.grace_ms
        size = self.windows.size_ms
        for start in self.windows.window_starts(ts):
            if start + size <= close_time:
                self.dropped("late: window closed", record, window=(self.op.store, record.key, start))
                continue
            old_vt = self.store.fetch_one_with_timestamp(record.key, start)
            if old_vt is None:
                agg = record.value if self.initializer is None else self.aggregator(record.key, record.value, self.initializer())
                new_ts = ts
            else:
                agg = self.aggregator(record.key, record.value, old_vt.value)
                new_ts = max(ts, old_vt.timestamp)
            self.store.put(record.key, agg, start, new_ts)
            if not self.caching:
                old_value = None if old_vt is None or not self.send_old else old_vt.value
                self.forward(Record(Windowed(record.key, Window(start, start + size)), Change(agg, old_value), new_ts, record.headers))


class SessionWindowAggregateProcessor(_Forwarding):
    """Session window aggregation into a session store (Kafka's
    KStreamSessionWindowAggregate): only null keys are dropped (null values reach the
    aggregator, as Kafka); merged sessions are removed and forwarded as tombstones, then
    the merged session is put and forwarded, each stamped with its session end. With a
    caching store (the default) these updates reach downstream at the next commit, folded
    per session: a record inside an existing session yields one update, not a tombstone
    and an update."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store: SessionStore = context.get_state_store(self.op.store)
        self._install_flush(self.store)
        self.windows: SessionWindows = self.op.windows
        self.initializer, self.aggregator = aggregate_functions(self.op)
        merger = self.op.merger
        if self.op.kind == "count":
            merger = lambda k, a, b: a + b  # noqa: E731
        elif self.op.kind == "reduce":
            reducer = self.op.aggregator
            merger = lambda k, a, b: b if a is None else reducer(a, b)  # noqa: E731
        self.merger = merger
        self.observed_stream_time = -1

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            self.dropped("null key", record)
            return
        ts = record.timestamp
        gap = self.windows.gap_ms
        self.observed_stream_time = max(self.observed_stream_time, ts)
        close_time = self.observed_stream_time - self.windows.grace_ms - gap
        new_window = Window(ts, ts)
        merged_window = new_window
        agg: Any = None if self.initializer is None else self.initializer()
        merged = self.store.find_sessions(record.key, ts - gap, ts + gap)
        for session, value in merged:
            agg = value if agg is None else self.merger(record.key, agg, value)
            merged_window = Window(min(merged_window.start, session.window.start), max(merged_window.end, session.window.end))
        if merged_window.end < close_time:
            self.dropped("late: session closed", record, window=(self.op.store, record.key, merged_window.start))
            return
        if merged_window != new_window:
            for session, value in merged:
                self.store.remove(session)
                if not self.caching:
                    self.forward(Record(session, Change(None, value if self.send_old else None), session.window.end, record.headers))
        agg = record.value if agg is None else self.aggregator(record.key, record.value, agg)
        key = Windowed(record.key, merged_window)
        self.store.put(key, agg)
        if not self.caching:
            self.forward(Record(key, Change(agg, None), merged_window.end, record.headers))
