"""The main job ``duet run`` of any :class:`~pipelines.declaration.pipeline.Pipeline`, as plain functions
the CLI and the Dagster assets both call.

Phases (each a function of :mod:`pipelines.job.steps` or :mod:`pipelines.job.serving_steps`, holding
no layer logic of its own):

1. :func:`reset_pipeline`: delete the pipeline's topics and the lake tables of earlier runs;
   :func:`~pipelines.produce.topics.ensure_pipeline_topics`: the input, dead-letter and view output topics.
2. Load the pipeline's sample data into Kafka (when it declares one; else the speed layer
   runs on what the topics hold). Default (``backlog=True``, the faster): everything first
   (:func:`load_data`), then the speed layer catches up on it. With ``backlog=False``, a
   live replay: the tables first (:func:`pipelines.produce.load.produce_tables`), then, while the
   speed layer runs, the events in arrival order at the speed layer's pace
   (:func:`pipelines.produce.replay.replay_events`; the module explains why).
3. :func:`run_speed`: the topology on ``speed_layer.KafkaStreams`` until every input
   record is consumed (a fresh ``application.id`` per run).
4. :func:`ingest`: every topic into ``<lake>/raw/<topic>`` (batch_layer.ingest).
5. :func:`run_batch_layer`: the same topology on PySpark over Delta (batch_layer.run).
   On a loaded backlog (the default) the inputs are complete before the speed layer
   starts, so 4 and 5 run on a background thread during 3, as the lambda architecture
   runs its layers side by side; only the dead-letter topic, which the speed layer
   writes, is archived after it. A live replay runs them after 3.
6. :func:`publish_views`: merge batch and speed views into ``<lake>/serving`` (serving).
7. :func:`run_checks`: the Great Expectations suite of every batch view (serving.quality).
8. :func:`compare_layers`: speed vs batch agreement over every closed window, excluding the
   windows touched by records the speed layer dropped as late.

Consistency of repeated runs: every ``duet run`` uses a fresh ``application.id``
(``duet-<name>-run-<utc time>-<random>``): a new consumer group, new changelog and repartition
topics and a new state folder, so nothing of an earlier run is resumed. Because the loader
appends (it does not deduplicate) and the raw ingest is incremental by offset, a run first
resets what it owns: the input topics (unless ``load=False``), the dead-letter and view
output topics, the internal topics and consumer groups of earlier ``duet-<name>-run-*`` runs,
and the entries of the pipeline's lake folder (``raw``, ``views``, ``serving``, ``quality``).
A second run on the same lake and broker therefore computes exactly what the first did.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pipelines.produce.load import produce_tables
from pipelines.lake.loaded import record_loaded
from pipelines.declaration.pipeline import Highlights, Pipeline
from pipelines.progress import NullReporter, Reporter, load_progress
from pipelines.produce.replay import Feed, sample_feed
from pipelines.produce.topics import ensure_pipeline_topics
from pipelines.job.serving_steps import (
    compare_layers,
    publish_views,
    read_batch_views,
    read_speed_views,
    run_checks,
)
from pipelines.job.spark_priority import can_restore_priority, restore_priority
from pipelines.speed.service import SpeedStats
from pipelines.job.steps import (
    BatchStats,
    ingest,
    input_record_count,
    load_data,
    reset_pipeline,
    run_batch_layer,
    run_speed,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the job and its summary; each phase is imported from where it is defined
#: (``pipelines.job.steps``, ``pipelines.job.serving_steps``)
__all__ = ["RunOptions", "RunSummary", "run_main_job", "summary_dict"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(frozen=True)
class RunOptions:
    """Options of :func:`run_main_job`.

    Attributes:
        lake: the pipeline's folder of the lake (``Pipeline.lake(root)``).
        limit: load only the first ``limit`` events of the sample (``None``: all); of each
            copy with ``scale``.
        scale: load ``scale`` copies of the sample (``duet run --scale N``, alias ``--years``;
            :meth:`Pipeline.sample_data`): the pipeline must declare ``sample_copy``.
        load: load the sample data (and reset the input topics); ``False`` reuses what the
            input topics hold (the speed layer then catches up on them as a backlog). A
            pipeline without sample data always runs on what its topics hold.
        backlog: load everything before the speed layer starts, which then catches up on a
            backlog (the default: faster than a live replay, and the stream thread keeps the
            backlog in timestamp order through the repartition topics); ``False``: a live
            replay at the speed layer's pace (see :mod:`pipelines.produce.replay`).
        speed_timeout_s: give up when the speed layer is not caught up after this long.
        instances: processes of the speed layer's application (:mod:`pipelines.speed.instances`;
            ``duet run`` defaults to 1); a live replay (``backlog=False``) runs one.
    """

    lake: Path | str
    limit: int | None = None
    scale: int = 1
    load: bool = True
    backlog: bool = True
    speed_timeout_s: float = 3600.0
    instances: int = 1


@dataclass
class RunSummary:
    """The result of ``duet run`` (see :meth:`to_json` for the JSON form)."""

    pipeline: str
    records_in: int
    records_in_by_topic: dict[str, int]
    speed: SpeedStats
    batch: BatchStats
    windows: dict[str, int]
    checks: dict[str, bool]
    check_failures: dict[str, list[str]]
    agreement: dict[str, float]
    compared: dict[str, int]
    excluded: dict[str, int]
    differences: dict[str, list[dict[str, Any]]]
    highlights: Highlights | None
    phase_seconds: dict[str, float]
    lake: str
    #: per view, the windows where speed and batch differ that no counted drop, late
    #: record, expired join record or dead letter names (``AgreementReport.unexplained``)
    unexplained: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check passed, speed and batch agree on every compared window and no
        difference is unexplained."""
        return (all(self.checks.values()) and all(r == 1.0 for r in self.agreement.values())
                and not any(self.unexplained.values()))

    def to_json(self) -> dict[str, Any]:
        """One JSON object: the keys of the issue (``records_in``, ``speed_records_per_s``,
        ``dropped_late``, ``dead_lettered``, ``batch_seconds``, ``windows``, ``agreement``,
        ``checks``) followed by details."""
        return {
            "pipeline": self.pipeline,
            "records_in": self.records_in,
            "speed_records_per_s": round(self.speed.records_per_s, 1),
            "dropped_late": self.speed.dropped_late,
            "expired_join_drops": self.speed.expired_join_drops,
            "dead_lettered": self.speed.dead_lettered,
            "batch_seconds": round(self.batch.seconds, 2),
            "windows": self.windows,
            "agreement": self.agreement,
            "unexplained": self.unexplained,
            "checks": self.checks,
            "ok": self.ok,
            "records_in_by_topic": self.records_in_by_topic,
            "speed_mode": self.speed.mode,
            "speed_instances": self.speed.instances,
            "speed_placement": self.speed.placement,
            "speed_subtopology_seconds": {str(k): round(v, 2) for k, v in sorted(self.speed.subtopology_seconds.items())},
            "speed_lag_s": None if self.speed.lag_s is None else round(self.speed.lag_s, 3),
            "speed_latency_s": {k: None if v is None else round(v, 3) for k, v in self.speed.latency_s.items()},
            "speed_seconds": round(self.speed.seconds, 2),
            "application_id": self.speed.application_id,
            "batch_watermark_ms": self.batch.watermark_ms,
            "batch_dropped": self.batch.dropped,
            "batch_during_speed": self.batch.during_speed,
            "ingested": self.batch.ingested,
            "compared": self.compared,
            "excluded_late_windows": self.excluded,
            "differences": self.differences,
            "check_failures": self.check_failures,
            "highlights": None if self.highlights is None else {
                "title": self.highlights.title,
                "rows": [dict(zip(self.highlights.columns, r)) for r in self.highlights.rows],
            },
            "phase_seconds": {k: round(v, 2) for k, v in self.phase_seconds.items()},
            "lake": self.lake,
        }


class _Timer:
    def __init__(self, on_phase: Callable[[str], None] | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.on_phase = on_phase

    def phase(self, name: str) -> _Phase:
        return _Phase(self, name)


class _Phase:
    def __init__(self, timer: _Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        if self.timer.on_phase is not None:
            self.timer.on_phase(self.name)
        self.t0 = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.timer.seconds[self.name] = time.monotonic() - self.t0


def _in_background(name: str, fn: Callable[..., _T], *args: Any) -> Future[_T]:
    """``fn(*args)`` on a daemon thread: its future. Nothing waits for the thread but its
    future's reader: on Ctrl-C the command exits at once, even while the Spark JVM is still
    starting (a JVM whose Python driver is gone exits by itself: pyspark's gateway reads its
    stdin until the driver closes it)."""
    future: Future[_T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to the future's reader
            future.set_exception(exc)

    threading.Thread(target=run, name=f"duet-run-{name}", daemon=True).start()
    return future


@contextlib.contextmanager
def _stop_spark_on_interrupt(spark_future: Callable[[], Future[SparkSession] | None]) -> Iterator[None]:
    """On Ctrl-C, stop the SparkSession the future ``spark_future()`` gives (if started)
    as soon as it is up."""
    try:
        yield
    except KeyboardInterrupt:
        future = spark_future()
        if future is not None:
            future.add_done_callback(_stop_session)
        raise


def _stop_session(future: Future[SparkSession]) -> None:
    """Stop the SparkSession ``future`` holds (nothing if its start failed or was cancelled)."""
    if future.cancelled() or future.exception() is not None:
        return
    log.info("Ctrl-C: stopping the SparkSession")
    future.result().stop()  # get_spark() starts a new one after this


#: nice increment of the Spark JVM ``duet run`` starts (Linux): the batch layer, running
#: beside the speed layer on a backlog, takes the CPU the stream thread leaves idle. The full
#: year on 2 cores (phases in all; speed phase): one after the other 117.5 s (57.9 s); side
#: by side at equal priority 131.5 s (97.8 s: Spark's threads took the stream thread's core);
#: nice 10: 102.0 s (68.0 s); nice 19: 102.9 s (64.3 s), the speed layer's results first.
SPARK_NICE = 19


def _started_at_low_priority(factory: Callable[[], _T]) -> _T:
    """``factory()`` on this thread at a lower CPU priority (:data:`SPARK_NICE`): on Linux a
    nice value is a thread's, and the processes the thread starts inherit it, so the Spark
    JVM and its Python workers run niced while the calling process keeps its priority."""
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + SPARK_NICE)
    except (AttributeError, OSError) as exc:  # not Linux, or not permitted: Spark at full priority
        log.info("the Spark JVM runs at the normal CPU priority: %s", exc)
    return factory()


def _restore_priority(nice: int) -> None:
    """Set this process's threads (the one starting the Spark JVM among them) and every
    process it started (the JVM, Spark's Python workers) back to ``nice``
    (:func:`pipelines.job.spark_priority.restore_priority`). Not through the SparkSession: beside
    busy processes a JVM at nice 19 may still be starting, and would never get the CPU to
    finish (issue 42)."""
    n = restore_priority(os.getpid(), nice)
    log.info("this process and its children (the Spark JVM) are back at nice %d after the speed phase (%d threads)", nice, n)


def _archive_and_recompute(pipeline: Pipeline, bootstrap: str, lake: Path, spark_future: Future[SparkSession],
                           reporter: Reporter) -> BatchStats:
    """The batch side of a run on a loaded backlog, while the speed layer runs: archive the
    input topics (:func:`ingest`), then recompute the views once the SparkSession is up
    (:func:`run_batch_layer`). Its errors are raised by its future's ``result()``."""
    started = time.monotonic()
    ingested = ingest(bootstrap, lake, pipeline.input_topics, reporter=reporter)
    ingest_seconds = time.monotonic() - started
    batch = run_batch_layer(pipeline, spark_future.result(), lake, reporter=reporter)
    batch.ingested = ingested
    batch.ingest_seconds = ingest_seconds
    batch.during_speed = True
    return batch


def _read_speed_side(pipeline: Pipeline, bootstrap: str) -> dict[str, Any]:
    """The speed layer's views read back from their output topics; also imports Great
    Expectations (seconds of imports) ahead of the checks phase."""
    frames = read_speed_views(pipeline, bootstrap)
    import great_expectations  # noqa: F401 - warm import for run_checks

    return frames


def run_main_job(
    pipeline: Pipeline,
    bootstrap: str,
    options: RunOptions,
    reporter: Reporter | None = None,
    spark_factory: Callable[[], SparkSession] | None = None,
    on_phase: Callable[[str], None] | None = None,
    on_written: Callable[[dict[str, Any], dict[str, Any], dict[str, int]], None] | None = None,
) -> RunSummary:
    """Run every phase of ``duet run`` of ``pipeline`` against ``bootstrap`` (see the module
    docstring).

    ``spark_factory`` returns the SparkSession (default ``batch_layer.spark.get_spark``); it
    is called in a background thread when the speed phase starts (the JVM starts meanwhile).
    On a loaded backlog the inputs' ingest and the batch layer run in the background during
    the speed phase too (the ``ingest`` and ``batch`` phases then wait for them: their
    ``phase_seconds`` are the wait; ``BatchStats.seconds`` the batch layer's own time).
    The speed views are read back from Kafka in the background during the batch phase.
    ``on_phase`` is called with each phase's name as it starts (``reset``, ``load``,
    ``speed``, ``ingest``, ``batch``, ``publish``, ``checks``, ``agreement``, ``summary``).
    ``on_written`` is called once the lake is written and checked, with the batch views
    (``{view: frame}``), their check results (``{view: GX result}``) and the rows published
    per view (``duet run`` records them in Dagster's catalog, :mod:`pipelines.dagster.catalog`).

    Ctrl-C (``KeyboardInterrupt``) propagates at once: the background work (the Spark start,
    the speed views' read) runs on daemon threads nobody waits for, and the SparkSession is
    stopped as soon as it is up (a JVM still starting ends with this process).

    Raises:
        PipelineRunning: from :func:`reset_pipeline`, before anything is deleted: a speed layer
            of the pipeline is still running.
        TimeoutError, SpeedLayerFailed: from :func:`run_speed`; any error of the Spark
        start-up or of the batch or serving phases.
    """
    from serving.views.batch import read_batch_watermark

    rep = reporter or NullReporter()
    lake = options.lake
    load = options.load and pipeline.sample is not None
    timer = _Timer(on_phase)
    with timer.phase("reset"):
        reset_pipeline(pipeline, bootstrap, lake, inputs=load)
        ensure_pipeline_topics(pipeline, bootstrap)

    feed: Feed | None = None
    if load:
        record_loaded(lake, options.scale)  # the Dagster partitions cover the copies loaded
    if load and options.backlog:
        with timer.phase("load"):
            load_data(pipeline, bootstrap, options.limit, rep, scale=options.scale)
    elif load:
        with timer.phase("load"):
            rep.start("load", None)
            sample = pipeline.sample_data(options.limit, options.scale)
            produce_tables(pipeline, bootstrap, sample, load_progress(rep))
        feed = sample_feed(bootstrap, sample, rep)

    if spark_factory is None:
        from batch_layer.spark import get_spark

        spark_factory = get_spark
    # the Spark JVM starts while the speed layer runs (a Python process bound to one core by
    # the GIL leaves room on a second core), and the speed views are read back from Kafka
    # while Spark computes the batch views
    # -- niced (SPARK_NICE) while the speed layer runs, and back at this process's priority
    # after; where that priority cannot be restored (no privilege), the JVM starts after the
    # speed phase instead, at normal priority (pipelines.job.spark_priority, issue 42)
    side_by_side = can_restore_priority()
    base_nice = os.getpriority(os.PRIO_PROCESS, 0)
    spark_future: Future[SparkSession] | None = (
        _in_background("spark", _started_at_low_priority, spark_factory) if side_by_side else None)
    # A loaded backlog is every input the run will see before the speed layer starts: the
    # batch layer archives and recomputes it meanwhile, as the lambda architecture runs its
    # two layers side by side. A live replay (or a run on topics others may still write)
    # has its inputs complete only after the speed phase: its batch runs then.
    batch_future = (_in_background("batch", _archive_and_recompute, pipeline, bootstrap, lake, spark_future, rep)
                    if load and options.backlog and spark_future is not None else None)
    with _stop_spark_on_interrupt(lambda: spark_future):
        with timer.phase("speed"):
            speed = run_speed(pipeline, bootstrap, timeout_s=options.speed_timeout_s, reporter=rep, feed=feed,
                              instances=options.instances if feed is None else 1)
        if spark_future is None:
            spark_future = _in_background("spark", spark_factory)
        else:
            _restore_priority(base_nice)
        records_in = input_record_count(bootstrap, pipeline.input_topics)
        if load:
            rep.finish("load", ", ".join(f"{t} {n:,}" for t, n in records_in.items()))

        with timer.phase("ingest"):
            if batch_future is None:
                ingested = ingest(bootstrap, lake, pipeline.archived_topics, reporter=rep)
            else:  # the dead-letter topic is written by the speed layer: archived after it
                filled_by_speed = [t for t in pipeline.archived_topics if t not in pipeline.input_topics]
                ingested = ingest(bootstrap, lake, filled_by_speed) if filled_by_speed else {}
        speed_future = _in_background("speed-views", _read_speed_side, pipeline, bootstrap)
        with timer.phase("batch"):
            if batch_future is None:
                batch = run_batch_layer(pipeline, spark_future.result(), lake, reporter=rep)
                batch.ingested = ingested
                batch.ingest_seconds = timer.seconds["ingest"]
            else:
                batch = batch_future.result()
                batch.ingested = {**batch.ingested, **ingested}
                batch.ingest_seconds += timer.seconds["ingest"]
        watermark = read_batch_watermark(lake)
        if batch.watermark_ms is None:
            batch.watermark_ms = watermark

        with timer.phase("publish"):
            rep.start("publish", len(pipeline.views))
            speed_frames = speed_future.result()
            batch_frames = read_batch_views(pipeline, lake)
            windows = publish_views(pipeline, lake, batch_frames, speed_frames, watermark_ms=watermark)
            rep.finish("publish", ", ".join(f"{v} {n:,}" for v, n in windows.items()))
        with timer.phase("checks"):
            quality = run_checks(pipeline, lake, reporter=rep, frames=batch_frames)
        if on_written is not None:
            on_written(batch_frames, quality, windows)
        with timer.phase("agreement"):
            reports, excluded = compare_layers(
                pipeline, batch_frames, speed_frames, watermark, speed.late, late_windows=speed.late_windows,
                expired_join_ranges=speed.expired_join_ranges,
            )
        if on_phase is not None:
            on_phase("summary")
        highlights = pipeline.highlights(lake) if pipeline.highlights is not None else None

    return RunSummary(
        pipeline=pipeline.name,
        records_in=sum(records_in.values()),
        records_in_by_topic=records_in,
        speed=speed,
        batch=batch,
        windows=windows,
        checks={v: bool(r.success) for v, r in quality.items()},
        check_failures={
            v: [f"{c.type}({c.column})" for c in r.results if not c.success] for v, r in quality.items()
        },
        agreement={v: r.ratio for v, r in reports.items()},
        compared={v: r.compared for v, r in reports.items()},
        excluded=excluded,
        differences={v: list(r.differences) for v, r in reports.items() if r.differences},
        unexplained={v: r.unexplained for v, r in reports.items()},
        highlights=highlights,
        phase_seconds=timer.seconds,
        lake=str(lake),
    )


def summary_dict(summary: RunSummary) -> dict[str, Any]:
    """``asdict`` of the summary without the late records (for debugging dumps)."""
    d = asdict(summary)
    d["speed"].pop("late", None)
    return d
