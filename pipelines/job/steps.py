"""The phases of the main job that touch Kafka, the speed layer and the batch layer.

Plain functions called by :mod:`pipelines.job.main_job`, the CLI and the Dagster assets alike;
each takes the :class:`~pipelines.declaration.pipeline.Pipeline` it works on and holds no layer logic:
topics, reset, load, speed layer run, ingest, batch. ``lake`` is always the pipeline's own
folder of the lake (``Pipeline.lake(root)``).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.lake.loaded import LOADED_FILE
from pipelines.declaration.pipeline import Pipeline
from pipelines.progress import NullReporter, Reporter, load_progress
from pipelines.produce.replay import Feed, ReplayStats
from pipelines.produce.topics import ensure_pipeline_topics
from pipelines.speed.service import (
    LIVE_REPLAY_CONFIG,
    SpeedStats,
    feed_once_caught_up,
    metric_total,
    new_application_id,
    runtime_late_records,
    runtime_late_windows,
    state_root,
    streams_config,
    wait_caught_up,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BatchStats",
    "reset_pipeline",
    "load_data",
    "input_record_count",
    "run_speed",
    "ingest",
    "run_batch_layer",
]

log = logging.getLogger(__name__)

#: ``producer.linger.ms`` of the speed phase catching up on a backlog: Kafka Streams' own
#: producer default (100 ms; duet's library default is librdkafka's 5 ms, for latency).
#: Larger batches halve the broker's CPU on the full year (33 s -> 16 s) and the phase
#: runs 1.16x faster (115.8 s -> 99.9 s, the same 12,610 late drops); a record waits up
#: to 100 ms more, which only a live stream would notice (the replay keeps 5 ms)
BACKLOG_LINGER_MS = 100
#: ``max.task.idle.ms`` of the instances of a speed phase on a backlog with more than one
#: (unless the pipeline's config sets it): a stage's tasks wait, up to this long per
#: partition, for a sibling repartition partition that another instance feeds and that is
#: empty at its end (:mod:`speed_layer.runtime.readiness`), so the stage does not drift
#: apart in event time when it reads near the head of the other instance's output
#: (docs/instances.md). Its batches come every ``BACKLOG_LINGER_MS`` at most.
INSTANCES_TASK_IDLE_MS = 1000
#: The same phase sets ``backlog.inputs.complete`` (:mod:`speed_layer.runtime.backlog_ends`):
#: its inputs are complete when it starts, so a repartition partition another instance feeds
#: holds its task until that instance has committed its whole input, not for
#: ``INSTANCES_TASK_IDLE_MS``, which load can outlast (issue 42); the deadline stays for the
#: topics whose end cannot be known (a foreign-key join's subscription and response topics
#: and what is downstream of them). It also turns on the upstream-input wait
#: (:mod:`speed_layer.runtime.upstream`), for one instance too: a task waits while a
#: repartition partition it reads has no next record yet and the thread's upstream tasks
#: still have input, so one instance replays a backlog in the same order on every run.
#: (One instance keeps ``max.task.idle.ms`` 0, so it has no known-ends waits.)
BACKLOG_INPUTS_COMPLETE = "backlog.inputs.complete"


# --------------------------------------------------------------------------- reset
def _old_run_topics(pipeline: Pipeline, bootstrap: str) -> list[str]:
    """Internal topics (changelog, repartition, foreign-key join subscription) of earlier
    ``duet run`` s of ``pipeline``."""
    from speed_layer.admin import admin_client
    from speed_layer.runtime.internal_topics import matches_internal_topic_format

    md = admin_client(bootstrap).list_topics(timeout=10)
    return sorted(
        t for t in md.topics
        if t.startswith(f"{pipeline.run_app_id_prefix}-") and matches_internal_topic_format(t)
    )


def _delete_old_groups(pipeline: Pipeline, bootstrap: str, groups: Sequence[str]) -> None:
    """Best effort: delete the consumer groups of earlier ``duet run`` s of ``pipeline`` among
    ``groups``."""
    from speed_layer.admin import admin_client

    prefix = f"{pipeline.run_app_id_prefix}-"
    runs = [g for g in groups if g.startswith(prefix)]
    if not runs:
        return
    admin = admin_client(bootstrap)  # held while its futures are pending
    try:
        for fut in admin.delete_consumer_groups(runs, request_timeout=10).values():
            try:
                fut.result(timeout=11)
            except Exception as exc:  # a group in use again stays
                log.debug("consumer group not deleted: %s", exc)
    except Exception as exc:
        log.debug("deleting consumer groups failed: %s", exc)


def reset_pipeline(pipeline: Pipeline, bootstrap: str | None, lake: str | Path, *, inputs: bool = True) -> None:
    """Forget earlier runs of ``pipeline`` (see :mod:`pipelines.job.main_job`).

    Deletes the view output topics, the dead-letter topic, the internal topics and groups of
    earlier ``duet-<name>-run-*`` runs and, with ``inputs``, the input topics; removes this
    pipeline's tables from the lake (``raw/<topic>`` of the deleted topics, ``views/<view>``,
    ``views/_batch.json``, ``serving/<view>``, ``serving/_views.json``, ``quality/<view>.json``,
    and, when it deletes the input topics, the record of :mod:`pipelines.lake.loaded`)
    and the state folders of earlier runs' speed layers, but not one a running speed layer
    holds (a ``duet speed --follow --fresh``, another ``duet run``'s speed phase: kept, in one
    warning naming its holder). ``bootstrap=None`` resets the lake only.

    Raises:
        PipelineRunning: an application of the pipeline is running (its consumer group has
            active members: :func:`pipelines.speed.live_groups.check_not_running`); nothing deleted.
        StreamsException: the groups could not be listed or described; nothing deleted.
    """
    from batch_layer.delta.layout import LakeLayout
    from pipelines.speed.live_groups import check_not_running
    from speed_layer.admin import delete_topics

    from batch_layer.delta.io import join_location
    from batch_layer.delta.storage import is_object_store, remove

    lake = lake if is_object_store(lake) else Path(lake)
    layout = LakeLayout(lake)
    dlq = (pipeline.dlq_topic,) if pipeline.dlq_topic else ()
    topics = [*pipeline.view_names, *dlq, *(pipeline.input_topics if inputs else ())]
    if bootstrap:
        groups = check_not_running(pipeline, bootstrap)
        delete_topics(bootstrap, [*topics, *_old_run_topics(pipeline, bootstrap)], timeout_s=60)
        _delete_old_groups(pipeline, bootstrap, groups)
    for topic in (t for t in topics if t in pipeline.archived_topics):
        remove(layout.raw_table(topic))
    for view in pipeline.view_names:
        remove(layout.batch_view(view))
        remove(layout.serving_view(view))
        remove(layout.quality_result(view))
    remove(layout.batch_info)
    remove(layout.catalogue)
    if bootstrap and inputs:  # the input topics are gone, and the copies of the sample data they held
        remove(join_location(lake, LOADED_FILE))
    _remove_old_state(pipeline)


def _remove_old_state(pipeline: Pipeline) -> None:
    """Delete the state folders of ``pipeline``'s runs (``<state_root>/duet-<name>-run-*``:
    an application's state directory, or an instance's of ``--instances N`` holding one),
    each under the ``.lock`` a ``KafkaStreams`` takes in its state directory (as Kafka's
    ``cleanUp``); a folder whose lock a running instance holds is kept, in one warning naming
    it and its holder."""
    from speed_layer.errors import StreamsException
    from speed_layer.runtime.restore import StateDirectory

    root = state_root()
    if not root.is_dir():
        return
    for folder in sorted(root.glob(f"{pipeline.run_app_id_prefix}-*")):
        if not folder.is_dir():
            continue
        taken: list[StateDirectory] = []
        try:
            # <root>/<application id>/.lock, or an instance's <root>/<application id>-i<k>/<application id>/.lock
            nested = [StateDirectory(folder, d.name) for d in folder.iterdir() if (d / ".lock").is_file()]
            for state in nested or [StateDirectory(root, folder.name)]:
                state.lock()
                taken.append(state)
            shutil.rmtree(folder, ignore_errors=True)
        except StreamsException:
            log.warning("reset kept the state folder %s: a running speed layer holds it, %s", folder,
                        state.holder() or "another instance")
        except OSError as exc:  # as rmtree(ignore_errors=True) did: a folder we cannot touch stays
            log.debug("state folder %s not removed: %s", folder, exc)
        finally:
            for state in taken:
                state.unlock()


# --------------------------------------------------------------------------- load
def load_data(pipeline: Pipeline, bootstrap: str, limit: int | None = None,
              reporter: Reporter | None = None, *, scale: int = 1) -> dict[str, int]:
    """Produce the pipeline's sample data (the first ``limit`` events; ``scale`` > 1: that
    many copies of it, each of ``limit`` events, :meth:`Pipeline.sample_data`) into Kafka;
    ``{topic: records}``. The progress shows the records produced per second.

    Raises:
        PipelineError: the pipeline declares no sample data (or no ``sample_copy`` and
            ``scale`` > 1).
    """
    from pipelines.produce.load import load

    rep = reporter or NullReporter()
    rep.start("load", None)
    t0 = time.monotonic()
    counts = load(pipeline, bootstrap, limit=limit, progress=load_progress(rep), scale=scale)
    total = sum(counts.values())
    rate = total / max(1e-9, time.monotonic() - t0)
    rep.update("load", total, total)
    rep.finish("load", ", ".join(f"{t} {n:,}" for t, n in counts.items()) + f" ({rate:,.0f} records/s)")
    return counts


def input_record_count(bootstrap: str, topics: Iterable[str]) -> dict[str, int]:
    """Records in each input topic (sum of partition end offsets; topics start at 0)."""
    from speed_layer.admin import end_offsets

    return {t: sum(end_offsets(bootstrap, t).values()) for t in topics}


# --------------------------------------------------------------------------- speed layer
def run_speed(
    pipeline: Pipeline,
    bootstrap: str,
    *,
    application_id: str | None = None,
    state_dir: Path | None = None,
    timeout_s: float = 3600.0,
    follow: bool = False,
    reporter: Reporter | None = None,
    feed: Feed | None = None,
    keep_state: bool = False,
    instances: int = 1,
) -> SpeedStats:
    """Run the pipeline's topology on the speed layer until every input record is consumed.

    Args:
        pipeline: the pipeline.
        bootstrap: Kafka bootstrap servers.
        application_id: Streams application id; a fresh ``duet-<name>-run-*`` one when ``None``.
        state_dir: state folder (default ``<duet_home>/state``; the runtime puts each
            application's stores under it).
        timeout_s: give up when not caught up after this long (each wait).
        follow: keep running after catching up, until Ctrl-C (``KeyboardInterrupt``).
        reporter: progress of phase ``"speed"``.
        feed: called once the streams have caught up with what the topics hold, with the
            speed layer's processed-records counter and a function waiting until it has
            caught up; it produces more input (the live replay of
            :func:`pipelines.produce.replay.replay_events`) and returns its stats, whose latency
            samples (plus the final catch-up) give the end-to-end lag.
        keep_state: keep the state folder of a fresh application id after closing.
        instances: processes of the application (:mod:`pipelines.speed.instances`: each
            runs whole sub-topologies placed by cost, :mod:`pipelines.speed.placement`; caught up
            when the group is; one progress). 1: the streams run in this process. More than
            1 cannot take a ``feed``. Every run keeps its sub-topologies' measured costs for
            the next placement.

    Returns:
        The run's :class:`SpeedStats` (late records and windows included).

    Raises:
        TimeoutError: if the speed layer is not caught up within ``timeout_s``.
        SpeedLayerFailed: if the streams client fails, or an instance dies (its exit code
            and the end of its log in the message).
        ValueError: ``instances`` > 1 with a ``feed``.
    """
    from pipelines.speed.placement import measured_costs, save_costs
    from speed_layer import KafkaStreams

    if instances > 1 and feed is not None:
        raise ValueError("a live replay paces one instance of the speed layer: run it with instances=1")
    rep = reporter or NullReporter()
    fresh = application_id is None
    app_id = application_id or new_application_id(pipeline.run_app_id_prefix)
    root = state_dir or state_root()
    root.mkdir(parents=True, exist_ok=True)
    ensure_pipeline_topics(pipeline, bootstrap)
    topology = pipeline.build_topology()
    hops = _repartition_hops(topology)
    # backlog: the producer lingers as Kafka Streams' own default (see BACKLOG_LINGER_MS)
    extra: dict[str, Any] | None = dict(LIVE_REPLAY_CONFIG) if feed is not None else None
    if feed is None and not follow:
        extra = {"producer.linger.ms": BACKLOG_LINGER_MS}
        if instances > 1 and "max.task.idle.ms" not in pipeline.streams_config:
            extra["max.task.idle.ms"] = INSTANCES_TASK_IDLE_MS
        extra[BACKLOG_INPUTS_COMPLETE] = True
    stats = SpeedStats(application_id=app_id, mode="replay" if feed is not None else "backlog", instances=instances)
    counts = input_record_count(bootstrap, pipeline.input_topics)
    streamed = [s.topic for s in pipeline.sources if s.kind == "stream"]
    total = sum(counts.values())
    rep.start("speed", None)
    t0 = time.monotonic()
    replay: ReplayStats | None = None
    of_instances = f", {instances} instances" if instances > 1 else ""

    def report(done: int) -> None:
        # a stream record is processed again after each repartition (an estimate: filters
        # and branches send fewer)
        work = total + hops * sum(counts.get(t, 0) for t in streamed)
        rate = done / max(1e-9, time.monotonic() - t0)
        rep.update("speed", min(total, round(total * done / max(1, work))), total,
                   f"{rate:,.0f} records processed/s{of_instances}")

    if instances > 1:
        from pipelines.speed.instances import run_speed_instances

        metrics = run_speed_instances(
            pipeline, bootstrap, instances, application_id=app_id, root=root, extra=extra, stats=stats,
            timeout_s=timeout_s, follow=follow, reporter=rep, tick=lambda processed, _t0: report(processed()),
            keep_state=keep_state or not fresh)
    else:
        streams = KafkaStreams(topology, streams_config(pipeline, bootstrap, app_id, root, extra))

        def processed() -> int:
            return _processed(_metrics(streams))

        def tick() -> None:
            report(processed())

        try:
            streams.start()
            if feed is not None:
                replay = feed_once_caught_up(streams, feed, processed, timeout_s, tick)
                counts = input_record_count(bootstrap, pipeline.input_topics)
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
            stats.expired_join_ranges = streams.expired_join_ranges()
        finally:
            streams.close()
        if fresh and not keep_state:
            shutil.rmtree(root / app_id, ignore_errors=True)
    stats.records_in = total
    stats.records_per_s = total / stats.seconds if stats.seconds > 0 else 0.0
    stats.metrics = metrics
    stats.subtopology_seconds = measured_costs(metrics)
    save_costs(root, pipeline.name, topology, stats.subtopology_seconds)  # the next --instances run's placement
    stats.dropped_late = metric_total(metrics, "dropped-records-late-total", "dropped-records-late") or len(stats.late)
    stats.dropped = metric_total(metrics, "dropped-records-total", "dropped-records")
    stats.expired_join_drops = metric_total(metrics, "expired-window-record-drop-total")
    stats.dead_lettered = metric_total(
        metrics, "dead-lettered-total", "dead-lettered-records-total", "dead-lettered", "dead-letter-records"
    )
    if replay is not None:
        replay.latencies_s.append(stats.lag_s or 0.0)
        stats.latency_s = {q: replay.latency(v) for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}
    lag = stats.latency_s.get("p50") if stats.latency_s else stats.lag_s
    rep.finish(
        "speed",
        f"{stats.records_per_s:,.0f} records/s, lag {lag or 0:.2f} s, "
        f"{stats.dropped_late:,} late, {stats.dead_lettered:,} dead-lettered",
    )
    return stats


def _repartition_hops(topology: Any) -> int:
    """Repartition topics of ``topology`` (sub-topology hops a stream record may take)."""
    from speed_layer.graph.ops import SourceOp

    return sum(1 for n in topology.nodes.values() if isinstance(n.op, SourceOp) and n.op.repartition)


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
    #: the inputs were archived and recomputed while the speed layer ran (``duet run`` on a
    #: backlog), not after it
    during_speed: bool = False


def ingest(
    bootstrap: str,
    lake: str | Path,
    topics: Sequence[str],
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
    pipeline: Pipeline,
    spark: SparkSession,
    lake: str | Path,
    views: Sequence[str] | None = None,
    reporter: Reporter | None = None,
) -> BatchStats:
    """Recompute the pipeline's views (all when ``None``) from the whole raw history with
    PySpark."""
    from batch_layer.run import run_batch

    rep = reporter or NullReporter()
    rep.start("batch", None)
    rep.update("batch", 0, None, "Spark")
    t0 = time.monotonic()
    _ship_project_modules()
    selected = list(views) if views is not None else list(pipeline.view_names)
    result = run_batch(spark, pipeline.build_topology(), lake, views=selected, config=pipeline.streams_config)
    stats = BatchStats(seconds=getattr(result, "seconds", None) or time.monotonic() - t0)
    stats.watermark_ms = getattr(result, "watermark_ms", None)
    raw_views = getattr(result, "views", {}) or {}
    stats.rows = {k: _rows_of(v) for k, v in dict(raw_views).items()} if isinstance(raw_views, Mapping) else {}
    dropped = getattr(result, "dropped", 0)
    stats.dropped = sum(dropped.values()) if isinstance(dropped, Mapping) else int(dropped or 0)
    rep.finish("batch", f"{stats.seconds:.1f} s, " + ", ".join(f"{v} {n:,}" for v, n in stats.rows.items()))
    return stats


def _ship_project_modules() -> None:
    """Pickle the functions of a project that is not installed by value, so that Spark's
    Python workers (which cannot import its modules) run them (cloudpickle)."""
    from pyspark import cloudpickle

    from pipelines.declaration.resolve import project_modules

    for module in project_modules():
        cloudpickle.register_pickle_by_value(module)


def _rows_of(v: Any) -> int:
    if isinstance(v, int):
        return v
    if isinstance(v, Mapping):
        return int(v.get("rows", 0))
    return int(getattr(v, "rows", 0) or 0)
