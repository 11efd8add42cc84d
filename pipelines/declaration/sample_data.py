"""Sample data a pipeline declares (:class:`Sample`, :class:`SourceRecord`), and the sample
at scale: N copies of it (:func:`scaled_sample`), read lazily.

``duet load --scale N`` (alias ``--years N``) and ``duet run --scale N`` load copies 0 ..
N-1 of the pipeline's ``sample_copy`` (:class:`pipelines.declaration.pipeline.Pipeline`): copy 0 is the
sample, copy ``k`` the same events ``k`` periods of the sample later with keys of its own.
Nothing here knows what a copy holds; the flights' copies are
:func:`pipelines.examples.flights.data.flight_copy_records`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

__all__ = ["SourceRecord", "Sample", "scaled_sample"]


@dataclass(frozen=True)
class SourceRecord:
    """One record to produce: key (text, or ``None``), value (JSON-ready, or ``bytes``
    produced as they are), timestamp (epoch ms, the record's CreateTime)."""

    key: str | None
    value: Any
    timestamp: int


@dataclass(frozen=True)
class Sample:
    """Sample data ``duet run`` loads to demonstrate a pipeline.

    Attributes:
        tables: ``{topic: records}`` produced first (dimension tables, in order).
        events: ``(topic, record)`` in arrival order, produced after the tables; ``duet run
            --limit N`` keeps the first N (a prefix in arrival time). The live replay
            (``--replay``) produces them in this order at the speed layer's pace. A sequence,
            or a lazy iterable read once (a generator: the copies of ``sample_copy``).
        count: the number of events when ``events`` has no length (shown by the progress);
            ``None``: ``len(events)``, or unknown.
    """

    tables: Mapping[str, Sequence[SourceRecord]]
    events: Iterable[tuple[str, SourceRecord]]
    count: int | None = None

    def event_count(self) -> int | None:
        """``count``, else ``len(events)`` when it has one, else ``None`` (unknown)."""
        if self.count is not None:
            return self.count
        return len(self.events) if isinstance(self.events, Sized) else None


def scaled_sample(copy: Callable[[int, int | None], Sample], scale: int, limit: int | None = None) -> Sample:
    """Copies ``0 .. scale-1`` of a sample, as one :class:`Sample` read lazily.

    ``copy(k, limit)`` is asked for every copy first (the tables: small), then the events are
    read copy after copy, each copy cut to its first ``limit`` events (``scale * limit`` in
    all: ``--limit`` makes every copy small, not only the first). Tables: every copy's, per
    topic in copy order. Events: copy 0's, then copy 1's, ..., each copy's in its own arrival
    order; ``count`` is their number when every copy gives it. Only the copy being read holds
    memory (as much as its ``events`` iterator does).

    Concatenated, not merged by arrival time: an event of copy ``k`` that arrives after the
    first event of copy ``k+1`` (a flight of 31 December that left after midnight) is
    produced before it, a little early, which makes no record late.

    Example::

        sample = scaled_sample(lambda k, limit: Sample({}, [("t", SourceRecord(f"k{k}", k, k))]), 3)
        [r.key for _, r in sample.events]  # ['k0', 'k1', 'k2']

    Raises:
        ValueError: ``scale`` < 1.
    """
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    copies = [copy(k, limit) for k in range(scale)]
    tables: dict[str, list[SourceRecord]] = {}
    for c in copies:
        for topic, records in c.tables.items():
            tables.setdefault(topic, []).extend(records)
    counts = [c.event_count() for c in copies]
    total = None
    if all(n is not None for n in counts):
        total = sum(n if limit is None else min(n, limit) for n in counts if n is not None)
    events = itertools.chain.from_iterable(
        c.events if limit is None else itertools.islice(c.events, limit) for c in copies)
    return Sample(tables=tables, events=events, count=total)
