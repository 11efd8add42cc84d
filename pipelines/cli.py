"""``duet``: the command line of the product (console script, see pyproject.toml).

Commands: ``run`` (the main job), ``load``, ``speed``, ``batch``, ``serve``, ``query``, ``ui``,
``backfill``, ``init``.
Every command but ``init`` works on one pipeline (:class:`pipelines.Pipeline`): ``--pipeline
module:attribute``, else ``$DUET_PIPELINE``, else ``[tool.duet] pipeline`` in the nearest
``pyproject.toml``, else the flights example (:mod:`pipelines.resolve`).
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
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

__all__ = ["app"]

app = typer.Typer(
    name="duet",
    help="duet: one topology, played by a speed layer (Kafka Streams semantics) and a batch "
    "layer (PySpark + Delta), served as one merged view.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

LakeOpt = Annotated[
    Optional[Path], typer.Option("--lake", help="Lake root (default `$DUET_LAKE`, else `[tool.duet] lake`, else "
                                 "`<repo>/lake`); the pipeline's tables are in `<lake root>/<pipeline name>`.")
]
PipelineOpt = Annotated[
    Optional[str],
    typer.Option("--pipeline", "-p", help="The pipeline, `module:attribute` (default `$DUET_PIPELINE`, else "
                 "`[tool.duet] pipeline` in pyproject.toml, else the flights example "
                 "`pipelines.examples.flights:pipeline`).", show_default=False),
]
BootstrapOpt = Annotated[
    Optional[str],
    typer.Option(
        "--bootstrap",
        help="Kafka bootstrap servers (default $KAFKA_BOOTSTRAP_SERVERS, else an embedded broker "
        "started and stopped by this command).",
    ),
]
LimitOpt = Annotated[
    Optional[int], typer.Option("--limit", min=1, help="Load only the first N events of the pipeline's sample data "
                                "(default: all).")
]

_BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


def _setup_logging(verbose: bool) -> None:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@contextlib.contextmanager
def _cluster(bootstrap: str | None, console: Any) -> Iterator[tuple[str, bool]]:
    """Yield ``(bootstrap servers, embedded?)``; an embedded broker is stopped on exit."""
    external = bootstrap or os.environ.get(_BOOTSTRAP_ENV, "").strip()
    if external:
        from pipelines.preflight import check_kafka_reachable

        with console.status(f"connecting to Kafka at {external}..."):
            check_kafka_reachable(external)
        yield external, False
        return
    from speed_layer.runtime.broker import EmbeddedKafka

    with console.status("starting the embedded Kafka broker..."):
        broker = EmbeddedKafka()
        broker.start()
    console.print(f"embedded Kafka broker at {broker.bootstrap_servers}")
    try:
        yield broker.bootstrap_servers, True
    finally:
        broker.stop()


@contextlib.contextmanager
def _user_errors(command: str, verbose: bool = False) -> Iterator[None]:
    """The CLI's error boundary: a user's mistake is one line on stderr and exit status 2; an
    unexpected failure is one line too (``Type: message``), with the traceback under -v."""
    from rich.markup import escape

    from batch_layer.spark import SparkConfigError
    from pipelines.pipeline import PipelineError
    from pipelines.preflight import UserError
    from serving.errors import ServingError

    err = _console(stderr=True)
    try:
        yield
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except (UserError, ServingError, SparkConfigError, PipelineError) as exc:
        err.print(f"[bold red]duet {command}[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except Exception as exc:
        if verbose:
            err.print_exception()
        hint = "" if verbose else " (run with -v for the traceback)"
        err.print(f"[bold red]duet {command} failed[/]: {type(exc).__name__}: {escape(str(exc))}{hint}",
                  soft_wrap=True)
        raise typer.Exit(2) from None


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[Any]:
    """Send everything written to fd 1 (Python, JVM children) to stderr; yield a writable
    file on the real stdout (for the one JSON object of ``--json``)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    real = os.fdopen(os.dup(saved), "w")
    try:
        yield real
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        real.flush()
        real.close()


def _reporter(console: Any) -> Any:
    from pipelines.progress import RichReporter

    return RichReporter(console)


def _pipeline(ref: str | None, lake: Path | None) -> tuple[Any, Path]:
    """The pipeline a command works on and its folder of the lake (see the module docstring).

    Raises:
        PipelineError: the reference or the declaration is wrong (one line).
    """
    from pipelines.resolve import resolve_pipeline
    from pipelines.steps import resolve_lake

    pipeline, project = resolve_pipeline(ref)
    return pipeline, pipeline.lake(resolve_lake(lake, project.lake if project else None))


# --------------------------------------------------------------------------- run
@app.command()
def run(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
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
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """The main job on the pipeline: load its sample data, speed layer, ingest, batch layer,
    merge, checks, agreement, summary.

    Each run resets what the pipeline owns (its topics on the broker and its tables in the
    lake) and uses a fresh application.id, so repeated runs give the same result. A pipeline
    without sample data runs on what its topics hold. Exit code 0 only if every check passed
    and speed and batch agree on every closed window (windows touched by records dropped as
    late excepted); 1 otherwise; 2 if a phase failed.
    """
    _setup_logging(verbose)
    from pipelines.main_job import RunOptions, run_main_job
    from pipelines.summary import print_summary

    console = _console(stderr=json_out)
    redirect = _stdout_to_stderr() if json_out else contextlib.nullcontext(None)
    with redirect as real_stdout:
        with _user_errors("run", verbose):
            pipeline, pipeline_lake = _pipeline(pipeline_ref, lake)
        options = RunOptions(lake=pipeline_lake, limit=limit, load=not no_load, backlog=backlog,
                             speed_timeout_s=timeout)
        with _user_errors("run", verbose), _cluster(bootstrap, console) as (servers, _embedded), \
                _reporter(console) as rep:
            summary = run_main_job(pipeline, servers, options, rep)
        if json_out:
            real_stdout.write(json.dumps(summary.to_json(), default=str) + "\n")
        else:
            print_summary(summary, console)
    raise typer.Exit(0 if summary.ok else 1)


# --------------------------------------------------------------------------- load
@app.command()
def load(
    pipeline_ref: PipelineOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """Produce the pipeline's sample data into Kafka: its tables, then its events in arrival
    order.
    Appends: loading twice produces every record twice."""
    _setup_logging(verbose)
    from pipelines.steps import load_data

    console = _console()
    with _user_errors("load", verbose):
        pipeline, _ = _pipeline(pipeline_ref, None)
        pipeline.sample_data(1)  # fails at once, before a broker starts, without sample data
    with _user_errors("load", verbose), _cluster(bootstrap, console) as (servers, embedded):
        if embedded:
            console.print("[yellow]note[/]: the embedded broker is stopped when this command ends")
        with _reporter(console) as rep:
            counts = load_data(pipeline, servers, limit, rep)
    console.print(", ".join(f"{t}: {n:,}" for t, n in counts.items()))


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
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """Run the speed layer (KafkaStreams) on the pipeline's topology until every input record
    is consumed, or with --follow until Ctrl-C. With an embedded broker the pipeline's sample
    data is replayed into it live while the speed layer runs."""
    _setup_logging(verbose)
    from pipelines.steps import ensure_pipeline_topics, run_speed
    from pipelines.replay import produce_tables, replay_events

    del lake  # the speed layer writes Kafka topics and local state only
    console = _console()
    with _user_errors("speed", verbose):
        pipeline, _ = _pipeline(pipeline_ref, None)
    with _user_errors("speed", verbose), _cluster(bootstrap, console) as (servers, embedded), \
            _reporter(console) as rep:
        ensure_pipeline_topics(pipeline, servers)
        feed = None
        if embedded and pipeline.sample is not None:  # an empty broker: replay the sample live
            sample = pipeline.sample_data(limit)
            produce_tables(pipeline, servers, sample, rep)

            def feed(processed: Any, sync: Any) -> Any:
                return replay_events(servers, sample.events, processed, sync, reporter=rep)

        # a fresh broker never has committed offsets: a fresh application id (and state) too
        app_id = None if (fresh or embedded) else (application_id or pipeline.service_app_id)
        stats = run_speed(pipeline, servers, application_id=app_id,
                          timeout_s=timeout, follow=follow, reporter=rep, feed=feed)
    console.print(
        f"application.id {stats.application_id}: {stats.records_in:,} records, "
        f"{stats.records_per_s:,.0f} records/s, {stats.dropped_late:,} dropped as late, "
        f"{stats.dead_lettered:,} dead-lettered"
    )


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
    _setup_logging(verbose)
    from batch_layer.spark import get_spark, resolve_target

    with _user_errors("batch", verbose):  # a bad master / Connect URL fails here, before a broker starts
        resolve_target(master)
        pipeline, root = _pipeline(pipeline_ref, lake)
    from pipelines.steps import ensure_pipeline_topics, ingest, load_data, run_batch_layer
    from pipelines.serving_steps import publish_views, read_batch_views, read_speed_views, run_checks

    console = _console()
    with _user_errors("batch", verbose), _cluster(bootstrap, console) as (servers, embedded), \
            _reporter(console) as rep:
        if embedded and pipeline.sample is not None:
            load_data(pipeline, servers, limit, rep)
        ensure_pipeline_topics(pipeline, servers)
        ingest(servers, root, pipeline.archived_topics, reporter=rep)
        stats = run_batch_layer(pipeline, get_spark(master=master), root, reporter=rep)
        batch_frames = read_batch_views(pipeline, root)
        results = run_checks(pipeline, root, reporter=rep, frames=batch_frames)
        rows = publish_views(pipeline, root, batch_frames, read_speed_views(pipeline, servers))
    console.print(f"batch layer {stats.seconds:.1f} s, watermark {stats.watermark_ms}; published "
                  + ", ".join(f"{v} {n:,}" for v, n in rows.items()))
    failed = [v for v, r in results.items() if not r.success]
    if failed:
        console.print(f"[red]checks failed[/]: {failed}")
    raise typer.Exit(1 if failed else 0)


# --------------------------------------------------------------------------- serve
@app.command()
def serve(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    host: Annotated[str, typer.Option("--host", help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8000,
) -> None:
    """Serve the pipeline's merged views over HTTP (FastAPI + uvicorn): the pages /ui and
    /ui/views/{view} (charts), the API /health, /views, /views/{view}/keys/{key}?from=&to=,
    /quality; OpenAPI at /docs."""
    _setup_logging(False)
    from pipelines.preflight import check_lake_served, check_port_free
    from serving.api.app import serve as serve_app

    with _user_errors("serve"):
        _, root = _pipeline(pipeline_ref, lake)
        check_lake_served(root)
        check_port_free(host, port)
    _console(stderr=True).print(f"views of {root} at http://{host}:{port}/ui (API docs at /docs)")
    serve_app(root, host=host, port=port)


# --------------------------------------------------------------------------- query
@app.command()
def query(
    view: Annotated[str, typer.Argument(help="A served view of the pipeline (`duet query --list` names them).")] = "",
    key: Annotated[Optional[str], typer.Argument(help="A key of the view; omitted: list the view's keys.")] = None,
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    from_: Annotated[Optional[str], typer.Option("--from", help="Windows overlapping from this time on: ISO-8601 "
                                                  "(naive = UTC) or epoch ms.")] = None,
    to: Annotated[Optional[str], typer.Option("--to", help="... up to this time (same formats).")] = None,
    list_views: Annotated[bool, typer.Option("--list", help="List the served views.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Keys listed when no key is given.")] = 50,
) -> None:
    """Read a merged view from the lake, as `GET /views/{view}/keys/{key}` does: the rows of
    KEY whose window overlaps [--from, --to], each with the layer it came from."""
    _setup_logging(False)
    from pipelines.preflight import UserError, check_lake_served
    from serving.api.times import ms_to_iso, parse_time_ms
    from serving.views.index import ViewIndex

    console = _console()
    with _user_errors("query"):
        _, root = _pipeline(pipeline_ref, lake)
        check_lake_served(root)
        index = ViewIndex(root, refresh_interval_s=0)
        if list_views or not view:
            names = index.views()
            if json_out:
                print(json.dumps(names))
            else:
                console.print("\n".join(names) or "(no view)")
            return
        if key is None:
            keys = index.keys(view, limit=limit)
            total = index.key_count(view)
            if json_out:
                print(json.dumps({"view": view, "total": total, "keys": keys}))
            else:
                console.print(f"{view}: {total:,} keys; the first {len(keys)}: " + ", ".join(keys))
            return
        lo = parse_time_ms(from_, "--from") if from_ else None
        hi = parse_time_ms(to, "--to") if to else None
        if lo is not None and hi is not None and lo > hi:
            raise UserError(f"--from ({ms_to_iso(lo)}) is after --to ({ms_to_iso(hi)})")
        rows = index.query(view, key, lo, hi)
    if json_out:
        print(json.dumps(rows))
        return
    from rich.table import Table

    table = Table(title=f"{view} / {key}: {len(rows)} rows")
    for col in ("window start", "window end", "value", "source"):
        table.add_column(col)
    for r in rows:
        table.add_row(ms_to_iso(r["window_start"]) or "", ms_to_iso(r["window_end"]) or "", str(r["value"]),
                      str(r["source"]))
    console.print(table)


# --------------------------------------------------------------------------- ui
@app.command()
def ui(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    load_data_: Annotated[
        Optional[bool],
        typer.Option("--load/--no-load", help="Reset the pipelines' topics and lake tables and load their sample data "
                     "(default: only into the embedded broker)."),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Interface the Dagster UI binds.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port of the Dagster UI.")] = 3000,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """The Dagster UI (`dagster dev`: webserver and daemon) on the pipeline (with none given
    and outside a duet project: both examples), with Kafka ready: the embedded broker (loaded
    with the sample data) unless --bootstrap or $KAFKA_BOOTSTRAP_SERVERS names a cluster.
    Runs until Ctrl-C; the runs it launches use that broker and the lake."""
    _setup_logging(verbose)
    import signal
    import subprocess

    from pipelines.dagster_home import ensure_dagster_home
    from pipelines.preflight import check_port_free
    from pipelines.resolve import EXAMPLE_PIPELINES, PIPELINE_ENV, find_project, load_pipeline
    from pipelines.steps import resolve_lake

    console = _console()
    with _user_errors("ui", verbose):
        check_port_free(host, port)
        project = find_project()
        chosen = pipeline_ref or os.environ.get(PIPELINE_ENV, "").strip() or (project.pipeline if project else None)
        refs = [chosen] if chosen else list(EXAMPLE_PIPELINES)
        search = project.root if project else None
        pipelines = [load_pipeline(r, search) for r in refs]
        root = resolve_lake(lake, project.lake if project else None)
    with _user_errors("ui", verbose), _cluster(bootstrap, console) as (servers, embedded):
        if load_data_ if load_data_ is not None else embedded:
            from pipelines.steps import ensure_pipeline_topics, load_data, reset_pipeline

            for pipeline in pipelines:
                with console.status(f"resetting the topics and lake tables of {pipeline.name}..."):
                    reset_pipeline(pipeline, servers, pipeline.lake(root))
                if pipeline.sample is not None:
                    with _reporter(console) as rep:
                        counts = load_data(pipeline, servers, limit, rep)
                    console.print(f"{pipeline.name}: loaded " + ", ".join(f"{t}: {n:,}" for t, n in counts.items()))
                ensure_pipeline_topics(pipeline, servers)
        home = ensure_dagster_home()
        env = {**os.environ, _BOOTSTRAP_ENV: servers, "DUET_LAKE": str(root), "DAGSTER_HOME": str(home),
               "DUET_PIPELINES": ",".join(refs)}
        if search is not None:
            env["DUET_PROJECT_ROOT"] = str(search)
        dagster = Path(sys.executable).with_name("dagster")
        cmd = [str(dagster), "dev", "-m", "pipelines.dagster.workspace", "-h", host, "-p", str(port)]
        proc = subprocess.Popen(cmd, env=env, cwd=search or Path.cwd(), start_new_session=True)

        def _stop(signum: int, frame: object) -> None:  # SIGTERM: stop dagster dev, then the broker
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _stop)
        console.print(f"Dagster UI at [bold]http://{host}:{port}[/] ({', '.join(p.name for p in pipelines)}; "
                      f"Kafka {servers}, lake {root}, DAGSTER_HOME {home}); Ctrl-C stops it")
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            code = 0
        finally:
            if proc.poll() is None:  # stop dagster dev and its children (webserver, daemon, code server)
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
    if code:
        _console(stderr=True).print(f"[bold red]duet ui[/]: dagster dev exited with status {code}")
        raise typer.Exit(2)


# --------------------------------------------------------------------------- backfill
@app.command()
def backfill(
    first: Annotated[str, typer.Argument(help="First day, YYYY-MM-DD (a daily partition of the pipeline).")],
    last: Annotated[Optional[str], typer.Argument(help="Last day, inclusive (default: FIRST).")] = None,
    pipeline_ref: PipelineOpt = None,
    url: Annotated[str, typer.Option("--url", help="The Dagster UI started by `duet ui`.")] = "http://127.0.0.1:3000",
    views: Annotated[
        Optional[str], typer.Option("--views", help="Comma-separated batch views (default: all of them).")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Show the progress until the backfill ends.")] = True,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for the end.")] = 3600.0,
) -> None:
    """Backfill the pipeline's batch views over the days FIRST..LAST through the Dagster UI (a
    partition backfill, as the UI's "Materialize" dialog launches it) and show its progress.
    Exit 0 when every partition was materialized, 1 when some failed."""
    import time

    from pipelines.dagster import partitions_def, view_asset_key
    from pipelines.dagster_client import DagsterClient
    from pipelines.preflight import UserError

    console = _console()
    with _user_errors("backfill"):
        pipeline, _ = _pipeline(pipeline_ref, None)
        keys = partitions_def(pipeline).get_partition_keys()
        if not keys:
            raise UserError(f"pipeline {pipeline.name!r} has no daily partition yet (its partitions start "
                            f"{pipeline.partitions.start})")
        for day in (first, last or first):
            if day not in keys:
                raise UserError(f"invalid day {day!r}: expected a daily partition YYYY-MM-DD of {pipeline.name} "
                                f"from {keys[0]} to {keys[-1]}")
        lo, hi = keys.index(first), keys.index(last or first)
        if lo > hi:
            raise UserError(f"first day {first} is after last day {last}")
        names = pipeline.view_names
        selected = [v.strip() for v in views.split(",") if v.strip()] if views else list(names)
        unknown = [v for v in selected if v not in names]
        if unknown:
            raise UserError(f"unknown view {unknown[0]!r}; batch views of {pipeline.name}: {', '.join(names)}")
        client = DagsterClient(url)
        days = keys[lo:hi + 1]
        backfill_id = client.launch_backfill([view_asset_key(pipeline, v) for v in selected], days,
                                             title=f"duet backfill {pipeline.name} {days[0]}..{days[-1]}")
        console.print(f"backfill {backfill_id}: {len(days)} days x {len(selected)} views, "
                      f"{url}/runs/b/{backfill_id}", soft_wrap=True)
        if not wait:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        deadline = time.monotonic() + timeout
        with Progress(TextColumn("backfill"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                      TimeElapsedColumn(), console=console, transient=False) as bar:
            task = bar.add_task("requested", total=len(days) * len(selected))
            while True:
                state = client.backfill_progress(backfill_id)
                runs = ", ".join(f"{s.lower()} {sum(1 for _, x in state.runs if x == s)}"
                                 for s in sorted({x for _, x in state.runs})) or "no run yet"
                bar.update(task, completed=state.materialized + state.failed,
                           total=state.targeted or len(days) * len(selected),
                           description=f"{state.status.lower()}; runs: {runs}")
                if state.done:
                    break
                if time.monotonic() > deadline:
                    raise UserError(f"backfill {backfill_id} still {state.status} after {timeout:.0f} s; "
                                    f"follow it at {url}/runs/b/{backfill_id}")
                time.sleep(2)
    console.print(f"backfill {backfill_id} {state.status.lower()}: {state.materialized} asset partitions "
                  f"materialized, {state.failed} failed", soft_wrap=True)
    raise typer.Exit(0 if state.status in ("COMPLETED_SUCCESS", "COMPLETED") and not state.failed else 1)


# --------------------------------------------------------------------------- init
@app.command()
def init(
    path: Annotated[Path, typer.Argument(help="Folder of the new project (created; must be empty or absent).")],
    name: Annotated[
        Optional[str], typer.Option("--name", help="Pipeline name, [a-z][a-z0-9_]* (default: from the folder name).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a folder that is not empty.")] = False,
) -> None:
    """Scaffold a new pipeline project: a module with an example topology, its views and
    expectations, sample data, a test with the TopologyTestDriver, and a `[tool.duet]` entry.
    It runs as created: `cd PATH && duet run`."""
    from pipelines.scaffold import init_project

    console = _console()
    with _user_errors("init"):
        written = init_project(path, name, force=force)
    root = path.resolve()
    console.print(f"created {root}:")
    for f in written:
        console.print(f"  {f.relative_to(root)}")
    console.print(f"next: [bold]cd {path} && duet run[/] (then `duet serve`, `duet ui`, `pytest`)")


def main() -> None:  # pragma: no cover - ``python -m pipelines.cli``
    """Entry point for ``python -m pipelines.cli``."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
