"""Punctuation schedules of a task (Kafka's ``PunctuationQueue`` and ``PunctuationSchedule``).

A task keeps one queue per :class:`~speed_layer.processor.api.PunctuationType`, as Kafka's
``StreamTask`` keeps ``streamTimePunctuationQueue`` and ``systemTimePunctuationQueue``:
stream-time schedules fire when the task's stream time reaches them, wall-clock schedules
when the task's clock does. Times and intervals are ms.
"""
from __future__ import annotations

from collections.abc import Callable

from ..processor.api import Cancellable

__all__ = ["PunctuationQueue", "PunctuationSchedule"]


class PunctuationSchedule(Cancellable):
    """One ``ProcessorContext#schedule``: ``fn(time)`` of processor ``node`` every
    ``interval`` ms, next due at ``due`` (ms). Returned to the processor as its
    ``Cancellable``."""

    def __init__(self, node: str, interval: int, due: int, fn: Callable[[int], None]) -> None:
        self.node, self.interval, self.due, self.fn = node, interval, due, fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        """The next due time after firing at ``now``: one interval on, or, when ``now``
        skipped intervals, the next multiple of the interval after ``now`` counted from the
        schedule's start (Kafka's ``PunctuationSchedule#next``)."""
        nxt = self.due + self.interval
        if now >= nxt:
            nxt = now - ((now - self.due) % self.interval) + self.interval
        self.due = nxt


class PunctuationQueue:
    """The schedules of one punctuation type. ``schedules`` is empty in the common case of
    a task without punctuations, which the task checks once per record."""

    def __init__(self) -> None:
        self.schedules: list[PunctuationSchedule] = []

    def schedule(self, node: str, interval: int, due: int, fn: Callable[[int], None]) -> PunctuationSchedule:
        """Add a schedule first due at ``due`` (ms); returns it (its ``cancel()`` removes it)."""
        s = PunctuationSchedule(node, interval, due, fn)
        self.schedules.append(s)
        return s

    def due(self, now: int) -> bool:
        """Whether a schedule that is not cancelled is due at ``now`` (ms)."""
        return any(not s.cancelled and s.due <= now for s in self.schedules)

    def may_punctuate(self, now: int, punctuate: Callable[[PunctuationSchedule, int], None]) -> bool:
        """Fire every schedule due at ``now`` (ms), in order of due time, each once:
        ``punctuate(schedule, now)``, then the schedule advances; cancelled schedules are
        dropped. A negative ``now`` (no stream time yet) fires nothing. Returns whether one
        fired (Kafka's ``PunctuationQueue#maybePunctuate``)."""
        for s in self.schedules:
            if s.cancelled or now >= s.due:
                break
        else:
            return False  # nothing due, nothing to drop (the common case: once per record)
        fired = False
        for s in sorted(self.schedules, key=lambda s: s.due):
            if s.cancelled:
                if s in self.schedules:
                    self.schedules.remove(s)
                continue
            if now < s.due or now < 0:
                continue
            punctuate(s, now)
            s.advance(now)
            fired = True
        return fired
