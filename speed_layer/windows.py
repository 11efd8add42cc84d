"""Window definitions, as Kafka Streams' ``org.apache.kafka.streams.kstream`` windows.

All times are milliseconds since the epoch (UTC); durations accept ``int`` milliseconds or
``datetime.timedelta``. A time window covers ``[start, end)``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Generic, Literal, TypeVar

K = TypeVar("K")

Duration = int | timedelta

#: Kafka's default grace for the deprecated window factories (24 h); the ``*_with_no_grace``
#: factories use 0.
DEFAULT_GRACE_MS = 24 * 3600 * 1000


def to_ms(duration: Duration, name: str = "duration") -> int:
    """Convert ``duration`` (int ms or timedelta) to int milliseconds.

    Raises:
        ValueError: if it is negative or not a number.
    """
    if isinstance(duration, timedelta):
        ms = int(duration.total_seconds() * 1000)
    elif isinstance(duration, bool) or not isinstance(duration, int):
        raise ValueError(f"{name} must be int milliseconds or timedelta, got {duration!r}")
    else:
        ms = duration
    if ms < 0:
        raise ValueError(f"{name} must not be negative, got {ms} ms")
    return ms


@dataclass(frozen=True, order=True)
class Window:
    """A window ``[start, end)`` in ms (Kafka's TimeWindow). For session windows both
    bounds are inclusive record timestamps (Kafka's SessionWindow); for sliding windows
    (KIP-450) both bounds are inclusive too and ``end = start + time difference``, as the
    ``TimeWindow(start, start + timeDifference)`` Kafka's sliding aggregation puts in
    ``Windowed``."""

    start: int
    end: int

    def overlap(self, other: "Window") -> bool:
        """True when the two half-open time windows overlap."""
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True, order=True)
class Windowed(Generic[K]):
    """A key of a windowed table: the record key and its window (Kafka's ``Windowed<K>``)."""

    key: K
    window: Window

    def __str__(self) -> str:
        return f"[{self.key}@{self.window.start}/{self.window.end}]"


@dataclass(frozen=True)
class EmitStrategy:
    """When a windowed aggregation emits its results (KIP-825, Kafka's ``EmitStrategy``
    since 3.3).

    * ``on_window_update()`` (the default): every update of a window is forwarded as it
      happens (or when the store's cache flushes);
    * ``on_window_close()``: nothing is forwarded per update; a window is forwarded once,
      as ``Change(final, None)`` stamped with its largest record timestamp, when stream
      time passes its end plus grace. Closed windows are looked for at most once per
      ``__emit.interval.ms.kstreams.windowed.aggregation__`` ms of wall-clock time (Kafka's
      default 1000; 0 in ``TopologyTestDriver``), in window-start then key order.

    Example::

        stream.group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(60_000)) \
            .emit_strategy(EmitStrategy.on_window_close()).count()
    """

    type: Literal["ON_WINDOW_UPDATE", "ON_WINDOW_CLOSE"] = "ON_WINDOW_UPDATE"

    @staticmethod
    def on_window_update() -> "EmitStrategy":
        """Emit every window update (Kafka's ``EmitStrategy.onWindowUpdate()``)."""
        return EmitStrategy("ON_WINDOW_UPDATE")

    @staticmethod
    def on_window_close() -> "EmitStrategy":
        """Emit each window once, when it closes (Kafka's ``EmitStrategy.onWindowClose()``)."""
        return EmitStrategy("ON_WINDOW_CLOSE")

    @property
    def emits_on_close(self) -> bool:
        return self.type == "ON_WINDOW_CLOSE"


ON_WINDOW_UPDATE = EmitStrategy()


@dataclass(frozen=True)
class TimeWindows:
    """Tumbling (``advance == size``) or hopping time windows aligned to the epoch.

    As Kafka's TimeWindows: a record with timestamp ``t`` belongs to every window
    ``[start, start + size)`` with ``start % advance == 0`` and ``start <= t < start + size``
    (``start >= 0``). A window accepts records while the processor's stream time is below
    ``end + grace``.
    """

    size_ms: int
    advance_ms: int
    grace_ms: int
    #: set by ``TimeWindowedKStream.emit_strategy`` (Kafka keeps it on the
    #: KStreamWindowAggregate node; here it travels with the windows into the graph)
    emit_strategy: EmitStrategy = ON_WINDOW_UPDATE

    @staticmethod
    def of_size_with_no_grace(size: Duration) -> "TimeWindows":
        """Tumbling windows of ``size`` with zero grace."""
        s = to_ms(size, "size")
        if s == 0:
            raise ValueError("window size must be > 0 ms")
        return TimeWindows(s, s, 0)

    @staticmethod
    def of_size_and_grace(size: Duration, grace: Duration) -> "TimeWindows":
        """Tumbling windows of ``size`` accepting out-of-order records for ``grace``."""
        s = to_ms(size, "size")
        if s == 0:
            raise ValueError("window size must be > 0 ms")
        return TimeWindows(s, s, to_ms(grace, "grace"))

    def advance_by(self, advance: Duration) -> "TimeWindows":
        """Hopping windows advancing by ``advance`` (0 < advance <= size).

        Raises:
            ValueError: if advance is 0 or larger than the size.
        """
        a = to_ms(advance, "advance")
        if a == 0 or a > self.size_ms:
            raise ValueError(f"advance must be in (0, size={self.size_ms}] ms, got {a}")
        return replace(self, advance_ms=a)

    def window_starts(self, timestamp: int) -> range:
        """Start times (ms, ascending) of the windows containing ``timestamp``."""
        first = max(0, timestamp - self.size_ms + self.advance_ms)
        first -= first % self.advance_ms
        return range(first, timestamp + 1, self.advance_ms)

    def windows_for(self, timestamp: int) -> dict[int, Window]:
        """The windows containing ``timestamp``, by start, in ascending start order."""
        return {start: Window(start, start + self.size_ms) for start in self.window_starts(timestamp)}

    def size(self) -> int:
        """Window size in ms."""
        return self.size_ms

    def grace_period_ms(self) -> int:
        """Grace in ms."""
        return self.grace_ms

    @property
    def kind(self) -> str:
        return "tumbling" if self.size_ms == self.advance_ms else "hopping"


@dataclass(frozen=True)
class SlidingWindows:
    """Sliding windows for aggregations (KIP-450): windows of ``time_difference`` that are
    created when a record enters or leaves one; both bounds inclusive in Kafka, exposed here
    as ``Window(start, end)`` with ``end = start + time_difference``."""

    time_difference_ms: int
    grace_ms: int
    #: set by ``TimeWindowedKStream.emit_strategy`` (see :class:`EmitStrategy`)
    emit_strategy: EmitStrategy = ON_WINDOW_UPDATE

    @staticmethod
    def of_time_difference_with_no_grace(time_difference: Duration) -> "SlidingWindows":
        """Sliding windows of ``time_difference`` (int ms or timedelta) with zero grace (Kafka's SlidingWindows#ofTimeDifferenceWithNoGrace).

        Raises:
            ValueError: if the difference is negative."""
        return SlidingWindows(to_ms(time_difference, "time_difference"), 0)

    @staticmethod
    def of_time_difference_and_grace(time_difference: Duration, grace: Duration) -> "SlidingWindows":
        """Sliding windows of ``time_difference`` accepting out-of-order records for ``grace`` (ms or timedelta), as Kafka's SlidingWindows#ofTimeDifferenceAndGrace.

        Raises:
            ValueError: if a duration is negative."""
        return SlidingWindows(to_ms(time_difference, "time_difference"), to_ms(grace, "grace"))

    def grace_period_ms(self) -> int:
        return self.grace_ms

    @property
    def kind(self) -> str:
        return "sliding"


@dataclass(frozen=True)
class SessionWindows:
    """Session windows: per key, records closer than ``gap`` belong to one session; a
    session ``[first, last]`` closes when stream time passes ``last + gap + grace``
    (as Kafka's SessionWindows)."""

    gap_ms: int
    grace_ms: int
    #: set by ``SessionWindowedKStream.emit_strategy`` (see :class:`EmitStrategy`)
    emit_strategy: EmitStrategy = ON_WINDOW_UPDATE

    @staticmethod
    def of_inactivity_gap_with_no_grace(gap: Duration) -> "SessionWindows":
        """Sessions closed after ``gap`` (ms or timedelta) of inactivity, with zero grace (Kafka's SessionWindows#ofInactivityGapWithNoGrace).

        Raises:
            ValueError: if the gap is not > 0."""
        g = to_ms(gap, "inactivity gap")
        if g == 0:
            raise ValueError("inactivity gap must be > 0 ms")
        return SessionWindows(g, 0)

    @staticmethod
    def of_inactivity_gap_and_grace(gap: Duration, grace: Duration) -> "SessionWindows":
        """Sessions closed after ``gap`` of inactivity, accepting records up to ``grace`` after the session closes (ms or timedelta; Kafka's SessionWindows#ofInactivityGapAndGrace).

        Raises:
            ValueError: if the gap is not > 0 or the grace is negative."""
        g = to_ms(gap, "inactivity gap")
        if g == 0:
            raise ValueError("inactivity gap must be > 0 ms")
        return SessionWindows(g, to_ms(grace, "grace"))

    def inactivity_gap(self) -> int:
        return self.gap_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms

    @property
    def kind(self) -> str:
        return "session"


@dataclass(frozen=True)
class JoinWindows:
    """Windows of a KStream-KStream join: a record of this stream at ``t`` joins the other
    stream's records with timestamps in ``[t - before, t + after]`` (as Kafka's JoinWindows).
    Left/outer results for unmatched records are emitted once stream time passes the window
    end plus ``grace`` (Kafka >= 3.1)."""

    before_ms: int
    after_ms: int
    grace_ms: int

    @staticmethod
    def of_time_difference_with_no_grace(time_difference: Duration) -> "JoinWindows":
        """Join records at most ``time_difference`` (ms or timedelta) apart, before or after; zero grace (Kafka's JoinWindows#ofTimeDifferenceWithNoGrace).

        Raises:
            ValueError: if the difference is negative."""
        d = to_ms(time_difference, "time_difference")
        return JoinWindows(d, d, 0)

    @staticmethod
    def of_time_difference_and_grace(time_difference: Duration, grace: Duration) -> "JoinWindows":
        """Join records at most ``time_difference`` apart, accepting out-of-order records for ``grace`` (ms or timedelta; Kafka's JoinWindows#ofTimeDifferenceAndGrace).

        Raises:
            ValueError: if a duration is negative."""
        d = to_ms(time_difference, "time_difference")
        return JoinWindows(d, d, to_ms(grace, "grace"))

    def before(self, time_difference: Duration) -> "JoinWindows":
        """Change how far back ``other`` may be (ms)."""
        return replace(self, before_ms=to_ms(time_difference, "before"))

    def after(self, time_difference: Duration) -> "JoinWindows":
        """Change how far ahead ``other`` may be (ms)."""
        return replace(self, after_ms=to_ms(time_difference, "after"))

    def size(self) -> int:
        return self.before_ms + self.after_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms
