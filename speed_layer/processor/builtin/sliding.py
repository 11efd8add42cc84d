"""Sliding-window aggregation (KIP-450), ported from Kafka Streams'
``KStreamSlidingWindowAggregate`` (3.x/4.x, emit strategies ON_WINDOW_UPDATE and, KIP-825,
ON_WINDOW_CLOSE).

A sliding window of ``time_difference`` D covers ``[start, start + D]``, both bounds
inclusive. Windows exist only where records are: each record at ``t`` creates its *left*
window ``[t - D, t]`` and, when a later record of the key falls into ``[t + 1, t + 1 + D]``,
its *right* window ``[t + 1, t + 1 + D]``; every existing window containing ``t`` is
updated. Records with ``t < D`` (early records) share the window ``[0, D]`` instead of
left windows with a negative start. The result is keyed by
``Windowed(key, Window(start, start + D))``: as Kafka's ``Windowed<K>`` holding a
``TimeWindow(start, start + D)``, ``window.end`` is the inclusive end (so a sliding window
ends at its last millisecond, unlike a tumbling window's exclusive end).

Time, as Kafka: the processor's own observed stream time (the largest record timestamp it
has seen); ``close_time = observed_stream_time - grace``. A record is dropped (one
``dropped-records``) when even its right window is closed (``t + 1 + D <= close_time``);
each window update whose window end ``< close_time`` is dropped and counted too. A
window's timestamp is the largest record timestamp in it. Updates are forwarded as
``Change(new, old)`` at once, or when the store's cache flushes (caching on). With
``EmitStrategy.on_window_close()`` nothing is forwarded per update; after a record (not an
early one, ``t < D``, as in Kafka) closed windows starting in ``[max(0, last close - D),
close - D - 1]`` are forwarded once as ``Change(final, None)``.
"""
from __future__ import annotations

from typing import Any

from ...state.stores import ValueAndTimestamp, WindowStore
from ...windows import SlidingWindows, Window, Windowed
from ..api import Change, Record
from ..internals import InternalProcessorContext
from .aggregate import _EmitWindowRangeOnClose, aggregate_functions


class SlidingWindowAggregateProcessor(_EmitWindowRangeOnClose):
    """count/reduce/aggregate over :class:`SlidingWindows` into a timestamped window store
    whose window size is the time difference (see the module docstring)."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: WindowStore = context.get_state_store(self.op.store)
        self.windows: SlidingWindows = self.op.windows
        self.initializer, self.aggregator = aggregate_functions(self.op)
        self.observed_stream_time = -1
        self._init_emit(context)

    # Kafka's KStreamSlidingWindowAggregateProcessor#emitRangeLowerBound/UpperBound
    def _emit_lower(self, close_time: int) -> int:
        last = self.last_emit_window_close_time
        return 0 if last == -1 else max(0, last - self.windows.time_difference_ms)

    def _emit_upper(self, close_time: int) -> int:
        return close_time - self.windows.time_difference_ms - 1

    # ------------------------------------------------------------------ helpers
    def _initial(self) -> Any:
        """Kafka's ``initializer.apply()``; reduce has none (its first value is the aggregate)."""
        return None if self.initializer is None else self.initializer()

    def _apply(self, key: Any, value: Any, agg: Any) -> Any:
        if agg is None and self.initializer is None:  # reduce: the first value is the aggregate
            return value
        return self.aggregator(key, value, agg)

    def _window(self, start: int) -> Window:
        return Window(start, start + self.windows.time_difference_ms)

    def _update_and_forward(self, start: int, vt: ValueAndTimestamp | None, record: Record[Any, Any], close_time: int) -> None:
        """Kafka's ``updateWindowAndForward``: aggregate ``record`` into the window starting at
        ``start`` whose current aggregate is ``vt`` (None or a fresh initializer value)."""
        window = self._window(start)
        if window.end < close_time:
            self.dropped("late: sliding window closed", record)
            return
        old_agg = None if vt is None else vt.value
        new_agg = self._apply(record.key, record.value, old_agg)
        new_ts = record.timestamp if old_agg is None else max(record.timestamp, vt.timestamp)  # type: ignore[union-attr]
        self.store.put(record.key, new_agg, start, new_ts)
        if not self.caching and not self.emit_final:
            self.forward(Record(Windowed(record.key, window), Change(new_agg, old_agg if self.send_old else None), new_ts, record.headers))

    def _create_current_right_window(self, t: int, right_agg: ValueAndTimestamp, record: Record[Any, Any]) -> None:
        """The new record's right window gets the aggregate of the records after it (which
        the window found holds); the record itself is not in it."""
        start = t + 1
        self.store.put(record.key, right_agg.value, start, right_agg.timestamp)
        if not self.caching and not self.emit_final:
            self.forward(Record(Windowed(record.key, self._window(start)), Change(right_agg.value, None), right_agg.timestamp, record.headers))

    def _fresh(self, t: int) -> ValueAndTimestamp:
        return ValueAndTimestamp(self._initial(), t)

    # ------------------------------------------------------------------ processing
    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None or record.value is None:
            self.dropped("null key or value", record)
            return
        t = record.timestamp
        d = self.windows.time_difference_ms
        self.observed_stream_time = max(self.observed_stream_time, t)
        close_time = self.observed_stream_time - self.windows.grace_ms
        if t + 1 + d <= close_time:
            self.dropped("late: record expired", record)
            return
        if t < d:
            self._process_early(record, close_time)
            return  # Kafka returns here too: no ON_WINDOW_CLOSE emission after an early record
        self._process_reverse(record, close_time)
        self._maybe_forward_final(record, close_time)

    def _process_reverse(self, record: Record[Any, Any], close_time: int) -> None:
        """Kafka's ``processReverse``: walk the key's windows starting in
        ``[t - 2D, t + 1]`` from the latest start backwards."""
        t = record.timestamp
        d = self.windows.time_difference_ms
        starts: set[int] = set()
        left_agg: ValueAndTimestamp | None = None
        right_agg: ValueAndTimestamp | None = None
        left_created = right_created = False
        previous_ts: int | None = None
        rows = self.store.fetch_with_timestamps(record.key, max(0, t - 2 * d), t + 1)
        for start, vt in reversed(rows):
            starts.add(start)
            end = start + d
            if start == t + 1:
                right_created = True
            elif end > t:
                if right_agg is None:
                    right_agg = vt
                self._update_and_forward(start, vt, record, close_time)
            elif end == t:
                left_created = True
                self._update_and_forward(start, vt, record, close_time)
                if vt.timestamp < t:
                    previous_ts = vt.timestamp
                else:
                    return  # a record at t was seen before: every window already exists
            else:  # end < t
                left_agg = vt
                previous_ts = vt.timestamp
                break
        self._create_windows(record, close_time, starts, right_agg, left_agg, left_created, right_created, previous_ts)

    def _create_windows(
        self,
        record: Record[Any, Any],
        close_time: int,
        starts: set[int],
        right_agg: ValueAndTimestamp | None,
        left_agg: ValueAndTimestamp | None,
        left_created: bool,
        right_created: bool,
        previous_ts: int | None,
    ) -> None:
        t = record.timestamp
        d = self.windows.time_difference_ms
        # the previous record's right window, when it does not exist yet and holds this record
        if previous_ts is not None:
            prev_right_start = previous_ts + 1
            if prev_right_start not in starts and prev_right_start + d >= t:
                self._update_and_forward(prev_right_start, self._fresh(t), record, close_time)
        # this record's left window [t - D, t]
        if not left_created:
            if previous_ts is not None and t - d <= previous_ts and left_agg is not None:
                vt = ValueAndTimestamp(left_agg.value, t)
            else:
                vt = self._fresh(t)
            self._update_and_forward(t - d, vt, record, close_time)
        # this record's right window [t + 1, t + 1 + D], when later records fall into it
        if not right_created and right_agg is not None and right_agg.timestamp > t:
            self._create_current_right_window(t, right_agg, record)

    def _process_early(self, record: Record[Any, Any], close_time: int) -> None:
        """Kafka's ``processEarly``: records with ``0 <= t < D`` go into the window
        ``[0, D]`` (no negative window starts); their right windows are still created."""
        t = record.timestamp
        combined: tuple[int, ValueAndTimestamp] | None = None
        right_agg: ValueAndTimestamp | None = None
        right_created = False
        starts: set[int] = set()
        previous_ts: int | None = None
        for start, vt in self.store.fetch_with_timestamps(record.key, 0, t + 1):
            starts.add(start)
            if start == 0:
                combined = (start, vt)
                if vt.timestamp < t:
                    previous_ts = vt.timestamp
            elif start <= t:
                right_agg = vt
                self._update_and_forward(start, vt, record, close_time)
            elif start == t + 1:
                right_created = True
            else:  # pragma: no cover - Kafka throws IllegalStateException here
                raise RuntimeError(f"unexpected sliding window start {start} for a record at {t}")
        if right_agg is None and combined is not None and combined[1].timestamp > t:
            right_agg = combined[1]
        if not right_created and right_agg is not None and right_agg.timestamp > t:
            self._create_current_right_window(t, right_agg, record)
        if previous_ts is not None and previous_ts + 1 not in starts:
            self._update_and_forward(previous_ts + 1, self._fresh(t), record, close_time)
        if combined is None:
            self._update_and_forward(0, self._fresh(t), record, close_time)
        else:
            self._update_and_forward(combined[0], combined[1], record, close_time)
