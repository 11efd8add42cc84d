"""Run a pipeline's topology on the speed layer (``speed_layer.KafkaStreams``).

Thin glue over the runtime: the Streams config of a run, a loop that waits until every input
record is consumed while reporting progress, the counters the main job reports, and the
records the speed layer dropped as late (needed to exclude their windows when the speed and
batch results are compared, see :func:`late_exclusions`).

Late records and the windows they missed come from the runtime (``KafkaStreams.late_records()``
and ``late_windows()``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.produce.replay import Feed, ReplayStats
from speed_layer.runtime.paths import state_root

if TYPE_CHECKING:
    import pandas as pd

    from serving.views.model import ViewSpec
    from pipelines.declaration.pipeline import Pipeline
    from speed_layer import KafkaStreams

__all__ = [
    "LateRecord",
    "SpeedStats",
    "SpeedLayerFailed",
    "LIVE_REPLAY_CONFIG",
    "feed_once_caught_up",
    "new_application_id",
    "streams_config",
    "late_exclusions",
    "metric_total",
    "state_root",
]


def new_application_id(prefix: str) -> str:
    """A fresh application id, e.g. ``duet-shop-run-20240101t120000-1a2b3c`` for the prefix
    ``duet-shop-run`` (:attr:`Pipeline.run_app_id_prefix`): a new consumer
    group, new changelog/repartition topics and a new state folder, so a run never resumes
    the state of an earlier one."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dt%H%M%S")
    return f"{prefix}-{stamp}-{uuid.uuid4().hex[:6]}"


def streams_config(
    pipeline: Pipeline,
    bootstrap: str,
    application_id: str,
    state_dir: Path,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Streams config of a run of ``pipeline``: duet's defaults, then the pipeline's own
    config (its dead-letter queue...), then the application id, brokers and state folder,
    then ``extra``.

    duet's defaults: a commit interval short enough for the view topics to stay fresh (10 s),
    and record caches of 100,000 entries per store (a hopping view updates one window per
    advance in its size for each record: with the default 10,000 a backlog of the flagship
    example evicted and forwarded entries on most puts; 1.4x the records/s at 15,000 events,
    the same late drops)."""
    conf: dict[str, Any] = {
        "commit.interval.ms": 10_000,
        "statestore.cache.max.entries": 100_000,
        **pipeline.streams_config,
        "application.id": application_id,
        "bootstrap.servers": bootstrap,
        "state.dir": str(state_dir),
    }
    conf.update(extra or {})
    return conf


@dataclass(frozen=True)
class LateRecord:
    """A record an aggregation dropped because its window (or session) was closed."""

    store: str
    key: str
    timestamp: int


def _key_text(key: Any) -> str:
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="replace")
    return key if isinstance(key, str) else str(key)


def runtime_late_records(streams: KafkaStreams) -> list[LateRecord]:
    """``KafkaStreams.late_records()`` as :class:`LateRecord` s, keys as text."""
    return [LateRecord(str(store), _key_text(key), int(ts)) for store, key, ts in streams.late_records()]


def runtime_late_windows(streams: KafkaStreams) -> dict[str, set[tuple[str, int]]]:
    """``KafkaStreams.late_windows()`` with keys as text."""
    return {str(store): {(_key_text(k), int(start)) for k, start in wins} for store, wins in streams.late_windows().items()}


def late_exclusions(
    spec: ViewSpec,
    windows: Any,
    late: Iterable[LateRecord],
    frames: Iterable[pd.DataFrame] = (),
    reported: Iterable[tuple[str, int]] = (),
) -> set[tuple[str, int | None]]:
    """The identities ``(key, window_start)`` of view ``spec`` touched by late records.

    ``reported``: the windows the runtime names as missed (exact for time windows). Time
    windows, from ``late`` records: every window containing a late record's timestamp (the
    batch counts the record in all of them; the speed layer only in those still open).
    Sessions: every session of the key, in any of ``frames`` (the batch and speed views),
    that the record could have touched: ``start - gap <= ts <= end + gap`` (in the batch the
    record may merge sessions that stay apart in the speed layer).
    """
    out: set[tuple[str, int | None]] = {(k, int(s)) for k, s in reported}
    mine = [r for r in late if r.store == spec.name]
    if not mine or spec.window_kind is None:  # a plain KTable has no window to miss
        return out
    if spec.window_kind == "session":
        gap = int(spec.gap_ms or 0)
        by_key: dict[str, list[int]] = {}
        for r in mine:
            by_key.setdefault(r.key, []).append(r.timestamp)
        for df in frames:
            if df is None or df.empty:
                continue
            sub = df[df["key"].isin(list(by_key))]
            for key, start, end in zip(sub["key"], sub["window_start"], sub["window_end"]):
                if any(int(start) - gap <= ts <= int(end) + gap for ts in by_key[key]):
                    out.add((key, int(start)))
        return out
    for r in mine:
        for start in windows.windows_for(r.timestamp):
            out.add((r.key, int(start)))
    return out


def metric_total(metrics: Mapping[str, Any], *names: str) -> int:
    """The first of ``names`` found in ``metrics`` (a flat dict, or nested one level by
    task/thread: values are summed), as an int; 0 when none is present."""
    for name in names:
        if name in metrics and isinstance(metrics[name], (int, float)):
            return int(metrics[name])
    total, found = 0, False
    for value in metrics.values():
        if isinstance(value, Mapping):
            for name in names:
                if isinstance(value.get(name), (int, float)):
                    total += int(value[name])
                    found = True
                    break
    return total if found else 0


class SpeedLayerFailed(RuntimeError):
    """The streams client stopped or failed before catching up."""


@dataclass
class SpeedStats:
    """What the speed phase did.

    Attributes:
        application_id: the Streams application id (consumer group, internal topic prefix).
        records_in: input records consumed (sum of the input topics' end offsets).
        seconds: wall time from start to caught up.
        records_per_s: ``records_in / seconds``.
        lag_s: seconds between the last input record being in Kafka and the speed layer
            having processed it and flushed its views (in backlog mode: the whole catch-up).
        latency_s: end-to-end latency of the replayed chunks (``p50``, ``p99``, ``max``, in
            seconds): from a chunk's delivery to Kafka to the speed layer having processed
            it; empty in backlog mode.
        mode: ``"replay"`` (live stream at the speed layer's pace) or ``"backlog"``.
        instances: processes of the application that ran it (:mod:`pipelines.speed.instances`).
        placement: with several instances, the sub-topology ids each ran
            (:mod:`pipelines.speed.placement`); empty with one.
        subtopology_seconds: seconds each sub-topology's tasks were active (processing and
            committing), summed over tasks and instances: the costs of the next placement.
        dropped_late: records (per window) dropped as late by the aggregations.
        dropped: all dropped records (late, null keys...).
        expired_join_drops: records a stream-stream join's window store dropped as expired
            (Kafka's ``expired-window-record-drop``): their join results are missing and
            no view window names them (docs/contracts.md, "Batch semantics").
        dead_lettered: records sent to the dead-letter topic.
        late: the late records themselves (store, key, timestamp), from ``KafkaStreams.late_records()``.
        late_windows: per store, the ``(key, window_start)`` the runtime reports as missed by
            late records (``KafkaStreams.late_windows()``).
        expired_join_ranges: ``(join store, first ms, last ms)``, the timestamps of the
            results each expired join drop lost (``KafkaStreams.expired_join_ranges()``).
        metrics: the runtime's raw metrics at the end.
    """

    application_id: str
    records_in: int = 0
    seconds: float = 0.0
    records_per_s: float = 0.0
    lag_s: float | None = None
    latency_s: dict[str, float | None] = field(default_factory=dict)
    mode: str = "backlog"
    instances: int = 1
    placement: list[list[int]] = field(default_factory=list)
    subtopology_seconds: dict[int, float] = field(default_factory=dict)
    dropped_late: int = 0
    dropped: int = 0
    expired_join_drops: int = 0
    dead_lettered: int = 0
    late: list[LateRecord] = field(default_factory=list)
    late_windows: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    expired_join_ranges: list[tuple[str, int, int]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


def wait_caught_up(
    streams: Any,
    timeout_s: float,
    on_tick: Callable[[], None] | None = None,
    tick_s: float = 0.5,
) -> bool:
    """Call ``streams.wait_until_caught_up`` in short slices until it returns True or
    ``timeout_s`` passes, calling ``on_tick`` between slices (progress).

    Raises:
        SpeedLayerFailed: when the streams client stops or fails meanwhile (the message holds
            its first error).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        state = getattr(streams, "state", "RUNNING")
        if state in ("PENDING_ERROR", "ERROR", "PENDING_SHUTDOWN", "NOT_RUNNING"):
            errors = list(getattr(streams, "errors", []) or [])
            cause = errors[0] if errors else None
            raise SpeedLayerFailed(f"the speed layer stopped (state {state}): {cause!r}") from cause
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if streams.wait_until_caught_up(min(tick_s, remaining)):
            return True
        if on_tick is not None:
            on_tick()


#: Streams config of a speed layer fed a live replay: short polls, and a commit every second:
#: the record caches fold a second of window updates (a hopping window view updates 24
#: windows per flight), and an exact sync of the replay (which waits for committed offsets)
#: waits at most that long.
LIVE_REPLAY_CONFIG: Mapping[str, Any] = {"poll.ms": 10, "commit.interval.ms": 1000}


def feed_once_caught_up(streams: Any, feed: Feed, processed: Callable[[], int], timeout_s: float,
                        on_tick: Callable[[], None] | None = None) -> ReplayStats:
    """Wait until ``streams`` has caught up with what the topics hold (calling ``on_tick``
    meanwhile), then run ``feed`` with ``processed`` and a catch-up wait; its stats.

    Raises:
        TimeoutError: not caught up within ``timeout_s`` (before the feed, or in its waits).
        SpeedLayerFailed: the streams client stopped or failed meanwhile.
    """
    if not wait_caught_up(streams, timeout_s, on_tick):
        raise TimeoutError(f"speed layer not caught up after {timeout_s:.0f} s")
    return feed(processed, lambda: wait_caught_up(streams, timeout_s))
