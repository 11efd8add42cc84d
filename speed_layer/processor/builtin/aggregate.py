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
  ``sendOldValues``, :attr:`AggregateOp.send_old_values`); otherwise ``old`` is None. For
  a new time window the old value is the initializer's result (``count``: 0, ``reduce``:
  None), as Kafka's KStreamWindowAggregate forwards ``Change(newAgg, oldAgg)`` with
  ``oldAgg = initializer.apply()``; a caching store flushes None instead (nothing was
  stored);
* time, sliding and session windows with ``EmitStrategy.on_window_close()`` (KIP-825)
  forward nothing per update: closed windows are forwarded once, from the store (Kafka's
  AbstractKStreamTimeWindowAggregateProcessor and KStreamSessionWindowAggregate), see
  :class:`_EmitOnWindowClose`.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, Callable

from ...state.stores import KeyValueStore, SessionStore, ValueAndTimestamp, WindowStore
from ...windows import SessionWindows, TimeWindows, Window, Windowed
from ..api import Change, Record
from ..internals import InternalProcessorContext
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


def _java_div(a: int, b: int) -> int:
    """Java's long division (truncates toward zero), as Kafka's ``Segments#segmentId``."""
    return -((-a) // b) if a < 0 else a // b


class _Forwarding(OpProcessor):
    """Forwards ``Change`` records directly or through the store's cache flush."""

    def _install_flush(self, store: Any) -> None:
        self.send_old = bool(getattr(self.op, "send_old_values", True))
        store.send_old_values = self.send_old
        self.caching = getattr(store, "cache", None) is not None
        if self.caching:
            def on_flush(key: Any, new: ValueAndTimestamp | None, old: ValueAndTimestamp | None) -> None:
                ts = new.timestamp if new is not None else (old.timestamp if old is not None else -1)
                self.context.forward_flushed(
                    Record(key, Change(None if new is None else new.value, None if old is None else old.value), ts))

            store.flush_listener = on_flush


class _EmitOnWindowClose(_Forwarding):
    """The ON_WINDOW_CLOSE half of Kafka's AbstractKStreamTimeWindowAggregateProcessor
    (KIP-825): after each record, at most once per
    ``__emit.interval.ms.kstreams.windowed.aggregation__`` ms of wall-clock time and only
    when the window close time (observed stream time - grace) has progressed, forward the
    closed windows as ``Change(value, None)`` with the window's timestamp and the record's
    headers: the emit throttle, its metadata across restarts and the flush set-up shared by
    window stores (:class:`_EmitWindowRangeOnClose`, in start-then-key order as Kafka's
    time-ordered window store) and session stores."""

    windows: Any
    store: Any  # a WindowStore, or a SessionStore for sessions

    def _init_emit(self, context: Any) -> None:
        strategy = getattr(self.windows, "emit_strategy", None)
        self.emit_final = strategy is not None and strategy.emits_on_close
        self.last_emit_window_close_time = -1  # ConsumerRecord.NO_TIMESTAMP
        self.next_time_to_emit = 0
        self.emit_interval_ms = int(context.app_config.windowed_aggregation_emit_interval_ms)
        if self.emit_final:
            # Kafka: a TimestampedTupleForwarder without the store: no cache flush listener
            self.send_old = bool(getattr(self.op, "send_old_values", True))
            self.caching = False
            self.restore_processor_metadata()
        else:
            self._install_flush(self.store)

    def restore_processor_metadata(self) -> None:
        """KIP-825: the last emit close time committed with the task's offsets (processor
        metadata under the store's name), so that a restarted task does not emit again the
        windows it emitted before (Kafka's AbstractKStreamTimeWindowAggregateProcessor#init
        and KStreamSessionWindowAggregate's, ``processorMetadataForKey(storeName)``)."""
        if not self.emit_final:
            return
        last = self.context.processor_metadata_for_key(self.op.store)
        if last is not None:
            self.last_emit_window_close_time = last

    def _emitted(self, close_time: int) -> None:
        """Note the close time emitted up to, in the task's processor metadata too (Kafka's
        ``addProcessorMetadataKeyValue(storeName, windowCloseTime)``, committed with the offsets)."""
        self.last_emit_window_close_time = close_time
        self.context.add_processor_metadata_key_value(self.op.store, close_time)

    def _emit_due(self, close_time: int) -> bool:
        """Whether to emit closed windows now: ON_WINDOW_CLOSE, the wall-clock throttle has
        passed (it restarts here), and the close time progressed since the last emission."""
        if not self.emit_final:
            return False
        now = self.context.current_system_time_ms()
        if now < self.next_time_to_emit:
            return False
        self.next_time_to_emit = now + self.emit_interval_ms
        last = self.last_emit_window_close_time
        return last == -1 or last < close_time


class _EmitWindowRangeOnClose(_EmitOnWindowClose):
    """ON_WINDOW_CLOSE over a window store (time and sliding windows): the closed windows
    are the store's windows whose start is in ``[_emit_lower, _emit_upper]``, bounds each
    window kind gives as Kafka's ``emitRangeLowerBound`` / ``emitRangeUpperBound``."""

    @abstractmethod
    def _emit_lower(self, close_time: int) -> int:
        """The lowest window start to emit (ms)."""

    @abstractmethod
    def _emit_upper(self, close_time: int) -> int:
        """The highest window start to emit (ms); negative: nothing to emit."""

    def _should_range_fetch(self, lower: int, upper: int) -> bool:
        return True

    def _maybe_forward_final(self, record: Record[Any, Any], close_time: int) -> None:
        if not self._emit_due(close_time):
            return
        upper = self._emit_upper(close_time)
        if upper < 0:
            return
        lower = self._emit_lower(close_time)
        if not self._should_range_fetch(lower, upper):
            return
        for key, start, vt in self._closed_windows(lower, upper):
            window = Window(start, start + self.store.window_size_ms)
            self.forward(Record(Windowed(key, window), Change(vt.value, None), vt.timestamp, record.headers))
        self._emitted(close_time)

    def _closed_windows(self, lower: int, upper: int) -> list[tuple[Any, int, ValueAndTimestamp]]:
        """The store's windows starting in ``[lower, upper]`` by start, then key bytes.
        Kafka's time-ordered store (``TimeFirstWindowKeySchema``) keeps windows down to
        ``observed stream time - retention`` inclusive, one ms more than the key-ordered
        one, so the window closing exactly at retention is still emitted."""
        return self.store.time_ordered_rows(lower, upper)


class StreamAggregateProcessor(_Forwarding):
    """Non-windowed count/reduce/aggregate into a timestamped key-value store."""

    def init(self, context: InternalProcessorContext) -> None:
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


class TimeWindowAggregateProcessor(_EmitWindowRangeOnClose):
    """Tumbling/hopping window aggregation into a window store (Kafka's
    KStreamWindowAggregate), emitting on each update or, with ON_WINDOW_CLOSE, once per
    closed window."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: WindowStore = context.get_state_store(self.op.store)
        self.windows: TimeWindows = self.op.windows
        self.initializer, self.aggregator = aggregate_functions(self.op)
        self.observed_stream_time = -1
        self._init_emit(context)

    # Kafka's KStreamWindowAggregateProcessor#emitRangeLowerBound/UpperBound/shouldRangeFetch
    def _emit_lower(self, close_time: int) -> int:
        last = self.last_emit_window_close_time
        return 0 if last == -1 else max(0, last - self.windows.size_ms) + 1

    def _emit_upper(self, close_time: int) -> int:
        return close_time - self.windows.size_ms

    def _should_range_fetch(self, lower: int, upper: int) -> bool:
        if self.last_emit_window_close_time != -1:
            # no new window closed since the last emission
            return list(self.windows.window_starts(upper)) != list(self.windows.window_starts(lower - 1))
        return True

    def process(self, record: Record[Any, Any]) -> None:
        key = record[0]
        if key is None:  # Kafka's KStreamWindowAggregate drops null keys only
            self.dropped("null key", record)
            return
        ts = record[2]
        if ts > self.observed_stream_time:
            self.observed_stream_time = ts
        windows = self.windows
        close_time = self.observed_stream_time - windows.grace_ms
        size = windows.size_ms
        if self.caching or self.emit_final:
            if size != windows.advance_ms or ts < 0:
                self._process_batched(record, ts, close_time, size)
                return
            # a tumbling window: the one window of ``window_starts(ts)``, as _process_batched
            start = ts - ts % size
            if start + size <= close_time:
                self.dropped("late: window closed", record, window=(self.op.store, key, start))
            else:
                self.store.fold_windows(key, (start,), ts, record[1], self.initializer, self.aggregator)
            if self.emit_final:
                self._maybe_forward_final(record, close_time)
            return
        for start in self.windows.window_starts(ts):
            if start + size <= close_time:
                self.dropped("late: window closed", record, window=(self.op.store, record.key, start))
                continue
            old_vt = self.store.fetch_one_with_timestamp(record.key, start)
            if old_vt is None:
                # Kafka: oldAgg = initializer.apply(), forwarded as the old value
                old_agg = None if self.initializer is None else self.initializer()
                agg = record.value if self.initializer is None else self.aggregator(record.key, record.value, old_agg)
                new_ts = ts
            else:
                old_agg = old_vt.value
                agg = self.aggregator(record.key, record.value, old_agg)
                new_ts = max(ts, old_vt.timestamp)
            self.store.put(record.key, agg, start, new_ts)
            if not self.caching and not self.emit_final:
                self.forward(Record(Windowed(record.key, Window(start, start + size)), Change(agg, old_agg if self.send_old else None), new_ts, record.headers))
        self._maybe_forward_final(record, close_time)

    def _process_batched(self, record: Record[Any, Any], ts: int, close_time: int, size: int) -> None:
        """The windows of one record when nothing is forwarded per update (a caching store,
        or ON_WINDOW_CLOSE): the late windows dropped, the others aggregated in one store
        call (a hopping window of 24 h advancing by 1 h updates 24 windows per record), with
        the reads, puts and cache evictions of the per-window loop, in its order."""
        key = record.key
        live: list[int] = []
        for start in self.windows.window_starts(ts):
            if start + size <= close_time:
                self.dropped("late: window closed", record, window=(self.op.store, key, start))
            else:
                live.append(start)
        self.store.fold_windows(key, live, ts, record.value, self.initializer, self.aggregator)
        self._maybe_forward_final(record, close_time)


class SessionWindowAggregateProcessor(_EmitOnWindowClose):
    """Session window aggregation into a session store (Kafka's
    KStreamSessionWindowAggregate): only null keys are dropped (null values reach the
    aggregator, as Kafka); merged sessions are removed and forwarded as tombstones, then
    the merged session is put and forwarded, each stamped with its session end. With a
    caching store (the default) these updates reach downstream at the next commit, folded
    per session: a record inside an existing session yields one update, not a tombstone
    and an update."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: SessionStore = context.get_state_store(self.op.store)
        self.windows: SessionWindows = self.op.windows
        self._init_emit(context)
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
            self._maybe_forward_final_sessions(record, close_time)
            return
        forward_updates = not self.caching and not self.emit_final
        if merged_window != new_window:
            for session, value in merged:
                self.store.remove(session)
                if forward_updates:
                    self.forward(Record(session, Change(None, value if self.send_old else None), session.window.end, record.headers))
        agg = record.value if agg is None else self.aggregator(record.key, record.value, agg)
        key = Windowed(record.key, merged_window)
        self.store.put(key, agg)
        if forward_updates:
            self.forward(Record(key, Change(agg, None), merged_window.end, record.headers))
        self._maybe_forward_final_sessions(record, close_time)

    def _maybe_forward_final_sessions(self, record: Record[Any, Any], close_time: int) -> None:
        """ON_WINDOW_CLOSE (Kafka's KStreamSessionWindowAggregate#maybeForwardFinalResult):
        throttled as time windows; every session whose end is in ``[max(0, last close),
        close - 1]`` is forwarded once as ``Change(aggregate, None)`` stamped with its end,
        in end, start, then key order (Kafka's time-ordered session store)."""
        if not self._emit_due(close_time):
            return
        last = self.last_emit_window_close_time
        upper = close_time - 1
        lower = max(0, last)
        if upper < 0 or upper < lower:
            return
        store = self.store
        # Kafka's time-ordered session store (RocksDbTimeOrderedSessionBytesStoreSupplier)
        # expires whole segments of max(retention / 2, 60 s) by session end, and its
        # fetchSessions has no finer retention filter: a session just closed is still there
        # although its end is behind the retention. Read without duet's per-session filter,
        # keeping the sessions of Kafka's live segments.
        saved = store.observed_stream_time
        interval = max(store.retention_ms // 2, 60_000)
        min_live_segment = _java_div(saved - store.retention_ms, interval)
        store.observed_stream_time = -1
        try:
            rows = [(s, v) for s, v in store.all()
                    if lower <= s.window.end <= upper and _java_div(s.window.end, interval) >= min_live_segment]
        finally:
            store.observed_stream_time = saved
        ser = store.key_serde.serialize
        rows.sort(key=lambda r: (r[0].window.end, r[0].window.start, ser(r[0].key) or b""))
        for session, value in rows:
            self.forward(Record(session, Change(value, None), session.window.end, record.headers))
        self._emitted(close_time)
