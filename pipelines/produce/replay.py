"""Replay a pipeline's sample events into Kafka at the speed layer's pace (a live stream,
not a backlog).

Why: when all the data sits in Kafka before the speed layer starts, the speed layer catches
up on a backlog. Its upstream tasks (one per source partition) then each process long runs of
their own partition, so a repartition topic receives the partitions' records interleaved in
blocks that can span hours, and the windowed aggregations downstream may drop records as
late (stream time jumps ahead by the block span). That is Kafka Streams' real behaviour when
a repartitioned stream catches up, but it would hide the lateness the data really has.

A replay produces the events in small chunks, in arrival order, and keeps about
``max_in_flight`` events not yet processed by the speed layer (back-pressure read from its
``process-total`` metric, recalibrated by exact syncs). The speed layer then sees a live
stream, and records are dropped as late mostly when their own delay pushes them past their
window's grace.

The sample's tables are produced first, before the speed layer starts
(:func:`pipelines.produce.load.produce_tables`), as :func:`pipelines.produce.load.load` does.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass, field
from typing import Any

from pipelines.declaration.pipeline import Sample, SourceRecord
from pipelines.progress import NullReporter, Reporter

__all__ = ["ReplayStats", "Feed", "sample_feed", "replay_events"]


@dataclass
class ReplayStats:
    """What a replay did: events produced, wall seconds, and end-to-end latency samples (s):
    at each sync, the time from the last chunk's delivery to Kafka until the speed layer had
    processed it and everything before it (through every sub-topology)."""

    produced: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    #: monotonic time of the last chunk's delivery (the caller times the final catch-up)
    last_delivery: float = 0.0

    def latency(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the latency samples (1: the largest), ``None``
        without samples."""
        if not self.latencies_s:
            return None
        if q >= 1 or len(self.latencies_s) == 1:
            return max(self.latencies_s)
        if q <= 0:
            return min(self.latencies_s)
        qs = statistics.quantiles(self.latencies_s, n=100, method="inclusive")
        return qs[min(98, max(0, round(q * 100) - 1))]


#: A live source for the speed layer: ``feed(processed, sync)`` produces the events while
#: it runs (the ``feed`` of ``run_speed`` and ``serve_speed``; see :func:`replay_events`).
Feed = Callable[[Callable[[], int], Callable[[], bool]], ReplayStats]


def sample_feed(bootstrap: str, sample: Sample, reporter: Reporter | None = None, rate: float | None = None) -> Feed:
    """The feed that replays ``sample``'s events live into ``bootstrap``
    (:func:`replay_events`, its progress on ``reporter``, at most ``rate`` events/s when
    given); its tables are produced first, by :func:`pipelines.produce.load.produce_tables`."""

    def feed(processed: Callable[[], int], sync: Callable[[], bool]) -> ReplayStats:
        return replay_events(bootstrap, sample.events, processed, sync, reporter=reporter, total=sample.event_count(),
                             rate=rate)

    return feed


def replay_events(
    bootstrap: str,
    events: Iterable[tuple[str, SourceRecord]],
    processed: Callable[[], int],
    sync: Callable[[], bool],
    *,
    total: int | None = None,
    chunk: int = 50,
    max_in_flight: int = 300,
    sync_every: int = 20_000,
    stall_s: float = 0.5,
    reporter: Reporter | None = None,
    rate: float | None = None,
) -> ReplayStats:
    """Produce ``events`` (``(topic, record)`` in arrival order) in chunks, keeping about
    ``max_in_flight`` of them not yet fully processed by the speed layer.

    Back-pressure: the speed layer processes each event several times (once per
    sub-topology it crosses: the source, each repartition, each ``group_by``), ``r`` records
    per event on average. Every ``sync_every`` events the replay waits until the speed layer
    has caught up exactly (``sync``), measures ``r`` over the events since the previous
    sync, and records the time from the last chunk's delivery to that point as an end-to-end
    latency sample. Between syncs, an event counts as in flight while ``events since sync *
    r`` exceeds the records processed since the sync.

    Args:
        bootstrap: Kafka bootstrap servers.
        events: what to produce, in order: a sequence, or an iterable read once (the lazy
            copies of a scaled sample).
        processed: the speed layer's processed-records counter (``process-total``).
        sync: waits until the speed layer has consumed everything produced so far
            (``KafkaStreams.wait_until_caught_up``); returns False on timeout.
        chunk: events per produced chunk (each chunk is flushed).
        max_in_flight: events produced but not yet processed before the next chunk waits.
        sync_every: events between exact syncs.
        stall_s: when the counter does not move for this long, produce anyway (the estimate
            of ``r`` was too high).
        reporter: progress of phase ``"load"``.
        total: the number of events (for the progress) when ``events`` has no length.
        rate: at most this many events per second (wall clock), produced in chunks of a
            twentieth of a second's worth (at least one event); ``None``: as fast as the
            back-pressure allows (``duet up --rate``).

    Raises:
        LoadError: if an event is not delivered.
        TimeoutError: if a sync times out.
    """
    from pipelines.produce.load import LoadError, encode_value, source_producer

    rep = reporter or NullReporter()
    if rate is not None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0 events/s, got {rate}")
        chunk = max(1, min(chunk, int(rate / 20)))
    if isinstance(events, Sized):
        total = len(events)
    of = f"/{total:,}" if total is not None else ""
    source = iter(events)
    with source_producer(bootstrap, {"linger.ms": 1}) as producer:
        errors: list[Any] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        stats = ReplayStats()
        t0 = time.monotonic()
        base_count, base_events = processed(), 0  # at the last sync
        per_event = 0.0  # records processed per event; unknown until the first sync
        last_report, delivered_at = 0.0, t0
        start = 0
        while batch := list(itertools.islice(source, chunk)):
            if start - base_events >= (sync_every if per_event else chunk * 5):
                if not sync():
                    raise TimeoutError("the speed layer did not catch up with the replay")
                now_count = processed()
                stats.latencies_s.append(time.monotonic() - delivered_at)
                per_event = (now_count - base_count) / (start - base_events)
                base_count, base_events = now_count, start
            elif per_event:
                last, moved_at = processed(), time.monotonic()
                while (start - base_events) * per_event - (last - base_count) > max_in_flight * per_event:
                    time.sleep(0.002)
                    count = processed()
                    if count != last:
                        last, moved_at = count, time.monotonic()
                    elif time.monotonic() - moved_at > stall_s:
                        # the speed layer is idle: r was overestimated; re-base on the counter
                        base_count = last - round((start - base_events - max_in_flight) * per_event)
                        break
            if rate is not None:  # paced: the chunk leaves when the clock reaches its first event's turn
                ahead = t0 + start / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            for topic, rec in batch:
                producer.produce(topic, value=encode_value(rec.value), key=None if rec.key is None else rec.key.encode(),
                                 timestamp=rec.timestamp, on_delivery=on_delivery)
            if producer.flush(60) or errors:
                raise LoadError(f"replay: {len(errors)} events failed, first: {errors[:1]}")
            delivered_at = time.monotonic()
            end = start + len(batch)
            stats.produced = start = end
            if delivered_at - last_report > 0.25:
                last_report = delivered_at
                rep.update("load", end, total, f"events {end:,}{of} (live replay)")
        rep.update("load", stats.produced, total, f"events {stats.produced:,}{of} (live replay)")
    stats.seconds = time.monotonic() - t0
    stats.last_delivery = delivered_at
    return stats

