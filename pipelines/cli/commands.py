"""``duet``: the command line of the product (console script, see pyproject.toml).

Commands: ``run`` (the main job), ``load``, ``speed`` and ``batch`` here; ``serve`` and ``query`` in
:mod:`pipelines.cli.serving_commands`, ``up`` in :mod:`pipelines.cli.up`, ``ui`` and ``backfill`` in
:mod:`pipelines.cli.dagster_commands`, ``init`` in :mod:`pipelines.cli.scaffold`.
Every command but ``init`` works on one pipeline (:class:`pipelines.Pipeline`): ``--pipeline
module:attribute``, else ``$DUET_PIPELINE``, else ``[tool.duet] pipeline`` in the nearest
``pyproject.toml``, else the flights example (:mod:`pipelines.declaration.resolve`).
Kafka: ``--bootstrap``,
else ``$KAFKA_BOOTSTRAP_SERVERS``, else an embedded Apache Kafka broker started and stopped by
the command (it starts empty, so ``speed`` and ``batch`` load the data into it first). The
lake root: ``--lake``, else ``$DUET_LAKE``, else ``[tool.duet] lake``, else ``<repo>/lake``; a
pipeline's tables live in ``<lake root>/<pipeline name>``.

Mistakes (a bad flag value, an unreachable broker, a lake without views, an unknown view or
key, a port in use) print one line on stderr and exit with status 2, never a traceback;
``--verbose`` adds the traceback of an unexpected failure.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipelines.cli.support import (
    BackgroundSpark, BootstrapOpt, InstancesOpt, LakeOpt, LimitOpt, PhaseReporter, Phases, PipelineOpt, ScaleOpt, app,
    CatalogRecorder, cluster, interrupts, lake_locks, lake_tables, make_console, pipeline_and_lake, reporter, setup_logging, stdout_to_stderr,
    user_errors,
)

# --------------------------------------------------------------------------- run
@app.command()
def run(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    scale: ScaleOpt = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object on stdout.")] = False,
    no_load: Annotated[
        bool, typer.Option("--no-load", help="Reuse the records already in the input topics (do not reset them).")
    ] = False,
    backlog: Annotated[
        bool,
        typer.Option("--backlog/--replay", help="--backlog (default): load everything, then the speed layer catches "
                     "up on it as a backlog (in timestamp order through the repartitions; the faster of the two); "
                     "--replay: replay the sample's events live, at the speed layer's pace (its lag is a live "
                     "stream's)."),
    ] = True,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds the speed layer may take to catch up.")] = 3600.0,
    instances: InstancesOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """The main job on the pipeline: load its sample data, speed layer, ingest, batch layer,
    merge, checks, agreement, summary.

    Each run rebuilds from scratch, without asking: it resets what the pipeline owns (its
    topics on the broker and its tables in the lake) and uses a fresh application.id, so
    repeated runs give the same result. It holds the lake lock while it runs (a second writer
    of the same lake fails at once, naming it). A pipeline without sample data runs on what
    its topics hold. --scale N (alias --years N) loads N copies of the sample (the flights: N
    years), --limit then cuts each copy. The speed layer runs as one process
    (--instances N: N processes of one application, each running whole stages of the topology). Exit code 0 only if every check passed and speed and
    batch agree on every closed window (windows touched by records dropped as late excepted);
    1 otherwise; 2 if a phase failed; 130 on Ctrl-C (one line: the phase interrupted and what
    is kept).
    """
    setup_logging(verbose)
    from pipelines.job.main_job import RunOptions, run_main_job
    from pipelines.job.summary import print_summary

    console = make_console(stderr=json_out)
    phases = Phases("run", console)
    redirect = stdout_to_stderr() if json_out else contextlib.nullcontext(None)
    pipeline_lake: Path | None = None
    with interrupts("run", lambda: _run_kept(phases, pipeline_lake)), redirect as real_stdout:
        with user_errors("run", verbose):
            pipeline, pipeline_lake = pipeline_and_lake(pipeline_ref, lake)
            if scale > 1 and not no_load:
                pipeline.require_sample_copy()  # fails at once, before a broker starts
            instances = _run_instances(instances, backlog)
        options = RunOptions(lake=pipeline_lake, limit=limit, scale=scale, load=not no_load, backlog=backlog,
                             speed_timeout_s=timeout, instances=instances)
        with user_errors("run", verbose), lake_locks("run", [pipeline_lake]), \
                cluster(bootstrap, console, phases) as (servers, _embedded), reporter(console) as rep:
            previous = lake_tables(pipeline_lake)
            if previous:
                console.print(f"duet run: rebuilding {pipeline_lake}: the previous run's tables "
                              f"({', '.join(previous)}) are replaced", soft_wrap=True)
            catalog = CatalogRecorder("run", pipeline, rebuilt=True)
            summary = run_main_job(pipeline, servers, options, rep, on_phase=phases.enter, on_written=catalog)
        if json_out:
            real_stdout.write(json.dumps(summary.to_json(), default=str) + "\n")
        else:
            print_summary(summary, console)
        catalog.wait(console)
    raise typer.Exit(0 if summary.ok else 1)


def _run_instances(instances: int | None, backlog: bool) -> int:
    """``duet run``'s speed-layer processes: ``--instances``, else 1 (a live replay paces one
    instance). Not one per core by default: the batch layer runs beside the speed layer on
    the other core, and on 2 cores with the broker on the same machine the full year's phases
    took as long with 2 placed instances as with 1 (98.4 s against 97.7 s: the speed phase
    16 s shorter, the batch layer's wait after it 17 s longer); see ``docs/instances.md``.

    Raises:
        UserError: ``--replay`` with more than one instance.
    """
    from pipelines.preflight import UserError
    if not backlog:
        if instances is not None and instances > 1:
            raise UserError(f"--replay paces one instance of the speed layer; --instances {instances} runs with "
                            "--backlog (the default)")
        return 1
    return instances if instances is not None else 1


#: what the pipeline's lake folder holds when ``duet run`` is interrupted in each phase
_RUN_LAKE_KEPT = {
    "reset": "the previous run's tables may be partly deleted",
    "load": "the previous run's tables were deleted",
    "speed": "the previous run's tables were deleted; raw tables and batch views begun meanwhile are incomplete",
    "ingest": "the raw tables archived so far are kept",
    "batch": "the raw tables are kept, the batch views are incomplete",
    "publish": "the raw tables and the batch views are kept, the serving views are incomplete",
    "checks": "the raw tables, the batch and the serving views are kept, the quality results are incomplete",
    "agreement": "every table is kept",
    "summary": "every table is kept",
}


def _run_kept(phases: Phases, lake: Path | None) -> str:
    """What ``duet run`` interrupted and what is kept, for :func:`interrupts`."""
    if phases.current not in _RUN_LAKE_KEPT:
        return "before the run started: nothing was changed"
    topics = phases.topics_kept()
    if phases.current == "reset" and phases.kafka is not None and not phases.kafka[1]:
        topics = f"the topics on {phases.kafka[0]} may be partly deleted"
    return (f"during the {phases.current} phase: {topics}; in {lake}: {_RUN_LAKE_KEPT[phases.current]}; "
            "run `duet run` again to rebuild")


# --------------------------------------------------------------------------- load
@app.command()
def load(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    scale: ScaleOpt = 1,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """Produce the pipeline's sample data into Kafka: its tables, then its events in arrival
    order. --scale N (alias --years N): N copies of it (the flights: N years from 2013, keys
    of their own), generated as they are produced; --limit N cuts each copy; the Dagster
    partitions then cover the N years (recorded in the pipeline's lake folder).
    Appends: loading twice produces every record twice. Holds the pipeline's lake lock while
    it loads (`duet run` resets these topics), though it writes no table."""
    setup_logging(verbose)
    from pipelines.lake.loaded import record_loaded
    from pipelines.job.steps import load_data

    console = make_console()
    phases = Phases("load", console, first="load")
    with interrupts("load", lambda: _load_kept(phases)):
        with user_errors("load", verbose):
            pipeline, pipeline_lake = pipeline_and_lake(pipeline_ref, lake)
            pipeline.require_sample()  # fails at once, before a broker starts, without sample data
            if scale > 1:
                pipeline.require_sample_copy()
        with user_errors("load", verbose), lake_locks("load", [pipeline_lake]), \
                cluster(bootstrap, console, phases) as (servers, embedded):
            if embedded:
                console.print("[yellow]note[/]: the embedded broker is stopped when this command ends")
            else:  # the Dagster partitions cover the copies loaded
                record_loaded(pipeline_lake, scale)
            with reporter(console) as rep:
                counts = load_data(pipeline, servers, limit, rep, scale=scale)
    console.print(", ".join(f"{t}: {n:,}" for t, n in counts.items()))


def _load_kept(phases: Phases) -> str:
    """What an interrupted ``duet load`` keeps, for :func:`interrupts`."""
    if phases.kafka is None:
        return "before loading anything"
    if phases.kafka[1]:
        return f"while loading: nothing is kept ({phases.topics_kept()})"
    return (f"while loading: the records produced so far stay in the topics on {phases.kafka[0]} (loading again "
            "appends them once more)")


# --------------------------------------------------------------------------- speed
@app.command()
def speed(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep running after catching up, until Ctrl-C.")] = False,
    application_id: Annotated[
        Optional[str],
        typer.Option("--application-id", help="Streams application id (default: duet-<pipeline>-service; "
                     "resumes from its committed offsets and local state)."),
    ] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Use a fresh application id (start from scratch).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for catching up.")] = 3600.0,
    server: Annotated[Optional[str], typer.Option(
        "--server", metavar="HOST:PORT",
        help="With --follow: serve interactive queries (/speed/...), /health and Prometheus /metrics at "
             "HOST:PORT (port 0: a free one), set as the application.server; SIGINT/SIGTERM stop it.")] = None,
    instances: InstancesOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """Run the speed layer (KafkaStreams) on the pipeline's topology until every input record
    is consumed, or with --follow until Ctrl-C; with --follow --server HOST:PORT as a service
    with interactive queries, health and Prometheus metrics. With an embedded broker the
    pipeline's sample data is replayed into it live while the speed layer runs (with
    --instances N > 1: loaded first, then caught up on as a backlog). --instances N: N
    processes of the application, each running whole stages (sub-topologies) placed by their
    cost measured in the pipeline's last run (docs/instances.md); a service with --server is
    one process (start one `duet speed --follow --server` per instance: they share the
    application id and forward each key's query to its owner)."""
    setup_logging(verbose)
    from pipelines.job.steps import load_data, run_speed
    from pipelines.produce.topics import ensure_pipeline_topics
    from pipelines.produce.load import produce_tables
    from pipelines.progress import load_progress
    from pipelines.produce.replay import Feed, sample_feed

    del lake  # the speed layer writes Kafka topics and local state only
    console = make_console()
    phases = Phases("speed", console, first="speed")
    with interrupts("speed", lambda: _speed_kept(phases)), user_errors("speed", verbose):
        pipeline, _ = pipeline_and_lake(pipeline_ref, None)
        from pipelines.preflight import UserError
        from pipelines.speed.server import parse_server, serve_speed

        if server is not None and not follow:
            raise UserError("--server runs the speed layer as a service: add --follow")
        instances = instances or 1
        if server is not None and instances > 1:
            raise UserError(f"--server serves the stores of one process, not {instances}: start one `duet speed "
                            "--follow --server HOST:PORT` per instance (they share the application id, split the "
                            "tasks and forward each key's query to its owner)")
        address = parse_server(server) if server is not None else None
    with interrupts("speed", lambda: _speed_kept(phases)), user_errors("speed", verbose), \
            cluster(bootstrap, console, phases) as (servers, embedded), reporter(console) as rep:
        ensure_pipeline_topics(pipeline, servers)
        feed: Feed | None = None
        if embedded and pipeline.sample is not None and instances > 1:  # a replay paces one instance
            load_data(pipeline, servers, limit, rep)
        elif embedded and pipeline.sample is not None:  # an empty broker: replay the sample live
            sample = pipeline.sample_data(limit)
            produce_tables(pipeline, servers, sample, load_progress(rep))
            feed = sample_feed(servers, sample, rep)

        # a fresh broker never has committed offsets: a fresh application id (and state) too
        app_id = None if (fresh or embedded) else (application_id or pipeline.service_app_id)
        if address is not None:
            served = serve_speed(pipeline, servers, *address, application_id=app_id, feed=feed,
                                 reporter=rep, timeout_s=timeout)
        else:
            stats = run_speed(pipeline, servers, application_id=app_id,
                              timeout_s=timeout, follow=follow, reporter=rep, feed=feed, instances=instances)
    if address is not None:
        console.print(served.line(), soft_wrap=True)
        return
    of_instances = f" ({stats.instances} instances)" if stats.instances > 1 else ""
    console.print(
        f"application.id {stats.application_id}{of_instances}: {stats.records_in:,} records, "
        f"{stats.records_per_s:,.0f} records/s, {stats.dropped_late:,} dropped as late, "
        f"{stats.dead_lettered:,} dead-lettered"
    )


def _speed_kept(phases: Phases) -> str:
    """What an interrupted ``duet speed`` keeps, for :func:`interrupts`."""
    if phases.kafka is None:
        return "before the speed layer started"
    if phases.kafka[1]:
        return f"the speed layer was closed; {phases.topics_kept()}"
    return f"the speed layer was closed; what it wrote stays in the topics on {phases.kafka[0]}"


# --------------------------------------------------------------------------- batch
@app.command()
def batch(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    master: Annotated[
        Optional[str],
        typer.Option("--master", help="Spark master URL: `local[*]`, `local[N]`, `spark://HOST:PORT`, `yarn`, "
                     "`k8s://...` (default `$DUET_SPARK_MASTER`, else `local[*]`; `$SPARK_REMOTE` selects Spark "
                     "Connect instead)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """Ingest the pipeline's topics into the lake (incremental), recompute its batch views with
    PySpark, run the Great Expectations suites and publish the merged views (with the speed
    views found in the view topics). With an embedded broker the sample data is loaded first."""
    setup_logging(verbose)
    from batch_layer.spark import resolve_target

    with user_errors("batch", verbose):  # a bad master / Connect URL fails here, before a broker starts
        resolve_target(master)
        pipeline, root = pipeline_and_lake(pipeline_ref, lake)
    from pipelines.job.steps import ingest, load_data, run_batch_layer
    from pipelines.produce.topics import ensure_pipeline_topics
    from pipelines.job.serving_steps import publish_views, read_batch_views, read_speed_views, run_checks

    console = make_console()
    phases = Phases("batch", console)
    spark: BackgroundSpark | None = None

    def stop_spark() -> None:
        if spark is not None:
            spark.stop()

    with interrupts("batch", lambda: _batch_kept(phases, root), cleanup=stop_spark), \
            user_errors("batch", verbose), lake_locks("batch", [root]), \
            cluster(bootstrap, console, phases) as (servers, embedded), reporter(console) as bars:
        spark = BackgroundSpark(master)  # the JVM starts meanwhile
        rep = PhaseReporter(bars, phases)
        if embedded and pipeline.sample is not None:
            load_data(pipeline, servers, limit, rep)
        ensure_pipeline_topics(pipeline, servers)
        ingest(servers, root, pipeline.archived_topics, reporter=rep)
        if phases.current == "ingest":  # the Spark start is the batch phase's (its bar starts after it)
            phases.enter("batch")
        stats = run_batch_layer(pipeline, spark.session(), root, reporter=rep)
        batch_frames = read_batch_views(pipeline, root)
        results = run_checks(pipeline, root, reporter=rep, frames=batch_frames)
        phases.enter("publish")
        rows = publish_views(pipeline, root, batch_frames,
                             read_speed_views(pipeline, servers, merge_at_ms=stats.watermark_ms),
                             watermark_ms=stats.watermark_ms)
        catalog = CatalogRecorder("batch", pipeline)
        catalog(batch_frames, results, rows)
    console.print(f"batch layer {stats.seconds:.1f} s, watermark {stats.watermark_ms}; published "
                  + ", ".join(f"{v} {n:,}" for v, n in rows.items()))
    catalog.wait(console)
    failed = [v for v, r in results.items() if not r.success]
    if failed:
        console.print(f"[red]checks failed[/]: {failed}")
    raise typer.Exit(1 if failed else 0)


#: what the pipeline's lake folder holds when ``duet batch`` is interrupted in each phase
_BATCH_LAKE_KEPT = {
    "load": "nothing was written",
    "ingest": "the raw tables keep what was archived so far (the next `duet batch` continues from there)",
    "batch": "the raw tables are kept, the batch views may be incomplete",
    "checks": "the raw tables and the batch views are kept, the quality results may be incomplete",
    "publish": "the raw tables and the batch views are kept, the serving views may be incomplete",
}


def _batch_kept(phases: Phases, lake: Path) -> str:
    """What an interrupted ``duet batch`` keeps, for :func:`interrupts`."""
    if phases.current not in _BATCH_LAKE_KEPT:
        return "before the batch started: nothing was written"
    return (f"during the {phases.current} phase: in {lake}: {_BATCH_LAKE_KEPT[phases.current]}; run `duet batch` "
            "again")


import pipelines.cli.dagster_commands  # noqa: E402,F401 - registers ui and backfill on the app
import pipelines.cli.serving_commands  # noqa: E402,F401 - registers serve and query on the app
import pipelines.cli.scaffold  # noqa: E402,F401 - registers init on the app


def main() -> None:  # pragma: no cover - ``python -m pipelines.cli``
    """Entry point for ``python -m pipelines.cli``."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
