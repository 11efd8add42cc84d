"""The ``duet`` commands that drive Dagster: ``ui`` (``dagster dev`` on the pipelines) and
``backfill`` (a partition backfill through a running UI). Registered on the app of
:mod:`pipelines.cli`."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pipelines.cli.support import (
    BOOTSTRAP_ENV, BootstrapOpt, LakeOpt, Phases, PipelineOpt, YesOpt, app, cluster, confirm_deletion,
    external_bootstrap, interrupts, lake_locks, lake_tables, make_console, pipeline_and_lake, reporter, setup_logging,
    user_errors,
)


# --------------------------------------------------------------------------- ui
@app.command()
def ui(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    load_data_: Annotated[
        bool,
        typer.Option("--load/--no-load", help="Before the UI starts, DELETE the pipelines' topics and lake tables and "
                     "load their sample data into Kafka (asks first; --yes does not). Default: the lake and the "
                     "topics as they are."),
    ] = False,
    limit: Annotated[
        Optional[int], typer.Option("--limit", min=1, help="With --load: load only the first N events of the "
                                    "sample data (default: all).")
    ] = None,
    scale: Annotated[
        int, typer.Option("--scale", "--years", min=1, metavar="N",
                          help="With --load: load N copies of the sample data (the flights: N years from 2013, "
                          "the daily partitions then cover them; the pipeline's `sample_copy`); --limit cuts each "
                          "copy.")
    ] = 1,
    yes: YesOpt = False,
    host: Annotated[str, typer.Option("--host", help="Interface the Dagster UI binds.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port of the Dagster UI.")] = 3000,
    dagster_storage: Annotated[
        Optional[str], typer.Option("--dagster-storage", envvar="DUET_DAGSTER_STORAGE", show_envvar=True,
                                    metavar="URL", help="postgresql://user:password@host:port/db: Dagster's run, "
                                    "event-log and schedule storage in PostgreSQL (dagster-postgres; default: "
                                    "SQLite in DAGSTER_HOME). See docs/deploy.md.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """The Dagster UI (`dagster dev`: webserver and daemon) on the pipeline (with none given
    and outside a duet project: both examples), on the lake and the Kafka topics as they are:
    the embedded broker (started empty) unless --bootstrap or $KAFKA_BOOTSTRAP_SERVERS names a
    cluster. Nothing is deleted unless --load is given. Runs until Ctrl-C; the runs it
    launches use that broker and the lake."""
    setup_logging(verbose)
    from pipelines.speed.live_groups import check_not_running
    from pipelines.preflight import UserError, check_port_free
    from pipelines.declaration.resolve import EXAMPLE_PIPELINES, PIPELINE_ENV, find_project, load_pipeline
    from pipelines.lake.root import resolve_lake

    console = make_console()
    phases = Phases("ui", console, first="start")
    with interrupts("ui", lambda: _ui_kept(phases)):
        with user_errors("ui", verbose):
            for flag, what, given in (("--limit", "limits", limit is not None), ("--years", "scales", scale > 1)):
                if given and not load_data_:
                    raise UserError(f"{flag} {what} the sample data that --load loads: add --load (which deletes the "
                                    f"topics and the lake tables first) or drop {flag}")
            check_port_free(host, port)
            if dagster_storage:
                from pipelines.dagster.home import check_storage

                try:
                    check_storage(dagster_storage)  # sets $DUET_DAGSTER_STORAGE for dagster dev
                except ValueError as exc:
                    raise UserError(str(exc)) from None
            project = find_project()
            chosen = pipeline_ref or os.environ.get(PIPELINE_ENV, "").strip() or (project.pipeline if project else None)
            refs = [chosen] if chosen else list(EXAMPLE_PIPELINES)
            search = project.root if project else None
            pipelines = [load_pipeline(r, search) for r in refs]
            if scale > 1:
                for pipeline in pipelines:  # fails at once, before a broker starts
                    pipeline.require_sample_copy()
            root = resolve_lake(lake, project.lake if project else None)
        external = external_bootstrap(bootstrap)
        with user_errors("ui", verbose), contextlib.ExitStack() as locks:
            if load_data_:
                locks.enter_context(lake_locks("ui", [p.lake(root) for p in pipelines]))
                if external is None:  # an embedded broker starts empty: only the lake has something to lose
                    confirm_deletion("ui", "--load", _doomed(pipelines, root, None), yes)
            with cluster(bootstrap, console, phases) as (servers, embedded):
                if load_data_:
                    if not embedded:
                        for pipeline in pipelines:  # before asking: refused if any is running
                            check_not_running(pipeline, servers)
                        confirm_deletion("ui", "--load", _doomed(pipelines, root, servers), yes)
                    _reset_and_load(pipelines, root, servers, limit, scale, console, phases)
                    locks.close()  # the UI's runs write the lake from now on
                else:
                    _say_how_to_fill(pipelines, root, embedded, console)
                phases.current = "ui"  # Ctrl-C from now on is the normal stop
                code = _dagster_dev(refs, [p.name for p in pipelines], search, root, servers, host, port, console)
    if code:
        make_console(stderr=True).print(f"[bold red]duet ui[/]: dagster dev exited with status {code}")
        raise typer.Exit(2)


def _doomed(pipelines: list[Any], root: Path, servers: str | None) -> list[str]:
    """What ``duet ui --load`` deletes, as phrases for the question: the lake tables of each
    pipeline that has some and, on a cluster (``servers``), its topics there."""
    doomed = []
    for pipeline in pipelines:
        folder = pipeline.lake(root)
        tables = lake_tables(folder)
        if tables:
            doomed.append(f"the lake tables of {pipeline.name} in {folder} ({', '.join(tables)})")
        topics = _existing_topics(pipeline, servers) if servers else []
        if topics:
            doomed.append(f"the topics of {pipeline.name} on {servers} ({', '.join(topics)})")
    return doomed


def _existing_topics(pipeline: Any, servers: str) -> list[str]:
    """The topics of ``pipeline`` that ``reset_pipeline`` deletes and exist on ``servers``: its
    source, dead-letter and view topics, and the internal topics of earlier ``duet run`` s."""
    from speed_layer.admin import admin_client

    present = set(admin_client(servers).list_topics(timeout=10).topics)
    own = [*pipeline.input_topics, *([pipeline.dlq_topic] if pipeline.dlq_topic else []), *pipeline.view_names]
    named = [t for t in dict.fromkeys(own) if t in present]
    internal = sum(1 for t in present if t.startswith(f"{pipeline.run_app_id_prefix}-"))
    return named + ([f"{internal} internal topics of earlier runs"] if internal else [])


def _reset_and_load(pipelines: list[Any], root: Path, servers: str, limit: int | None, scale: int, console: Any,
                    phases: Phases) -> None:
    """``duet ui --load``: reset each pipeline's topics and lake tables, load ``scale`` copies
    of its sample data (recorded for the partitions, :mod:`pipelines.lake.loaded`)."""
    from pipelines.lake.loaded import record_loaded
    from pipelines.job.steps import load_data, reset_pipeline
    from pipelines.produce.topics import ensure_pipeline_topics

    for pipeline in pipelines:
        phases.enter("reset")
        with console.status(f"resetting the topics and lake tables of {pipeline.name}..."):
            reset_pipeline(pipeline, servers, pipeline.lake(root))
        if pipeline.sample is not None:
            phases.enter("load")
            record_loaded(pipeline.lake(root), scale)
            with reporter(console) as rep:
                counts = load_data(pipeline, servers, limit, rep, scale=scale)
            console.print(f"{pipeline.name}: loaded " + ", ".join(f"{t}: {n:,}" for t, n in counts.items()))
        ensure_pipeline_topics(pipeline, servers)


def _say_how_to_fill(pipelines: list[Any], root: Path, embedded: bool, console: Any) -> None:
    """One line per pipeline whose lake folder holds no table yet: how to fill it. Another
    writer holding the lake lock (a ``duet run``) is named too: the UI's runs that write that
    folder fail until it ends."""
    from rich.markup import escape

    from pipelines.lake.locking import lock_holder

    for pipeline in pipelines:
        folder = pipeline.lake(root)
        holder = lock_holder(folder)
        if holder is not None:
            console.print(f"[yellow]duet ui[/]: {pipeline.name}: {escape(holder.describe())} is writing {folder}; "
                          "runs launched from the UI meanwhile fail until it ends", soft_wrap=True)
        elif not lake_tables(folder):
            source = ("the embedded broker starts empty too" if embedded
                      else "the UI's runs ingest what its topics hold")
            console.print(f"[yellow]duet ui[/]: {pipeline.name}: no tables in {folder} yet ({source}): fill it with "
                          "`duet run`, or start with `duet ui --load` (deletes the topics and lake tables, loads the "
                          "sample data)", soft_wrap=True)


def _dagster_dev(refs: list[str], names: list[str], search: Path | None, root: Path, servers: str, host: str,
                 port: int, console: Any) -> int:
    """Run ``dagster dev`` on the pipelines ``refs`` (named ``names``) until it ends or Ctrl-C /
    SIGTERM (then stop it and its children); its exit status (0 after Ctrl-C)."""
    import signal

    proc, home = start_dagster_dev(refs, search, root, servers, host, port)

    def _stop(signum: int, frame: object) -> None:  # SIGTERM: stop dagster dev, then the broker
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    from pipelines.dagster.home import STORAGE_ENV, redact_url

    storage = os.environ.get(STORAGE_ENV)
    where = f"storage {redact_url(storage)}" if storage else "SQLite storage"
    console.print(f"Dagster UI at [bold]http://{host}:{port}[/] ({', '.join(names)}; Kafka {servers}, lake {root}, "
                  f"DAGSTER_HOME {home}, {where}); Ctrl-C stops it")
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop_process_group(proc)


def start_dagster_dev(refs: list[str], search: Path | None, root: Path, servers: str, host: str, port: int,
                      env: dict[str, str] | None = None, output: Any = None, nice: int = 0) -> tuple[Any, Path]:
    """Start ``dagster dev`` (webserver, daemon, code server) on the pipelines ``refs``, the
    lake ``root`` and the Kafka ``servers``, in a session of its own (a terminal's Ctrl-C
    reaches the caller only: :func:`stop_process_group` stops it); ``env``: more variables;
    ``output``: a file its stdout and stderr go to (default: the caller's); ``nice``: its
    nice value increment (coreutils ``nice -n``; the runs it launches, their Spark JVMs
    included, inherit it).
    Returns the process and the ``DAGSTER_HOME`` (:func:`pipelines.dagster.home.ensure_dagster_home`)."""
    import subprocess

    from pipelines.dagster.home import ensure_dagster_home

    home = ensure_dagster_home()
    full = {**os.environ, BOOTSTRAP_ENV: servers, "DUET_LAKE": str(root), "DAGSTER_HOME": str(home),
            "DUET_PIPELINES": ",".join(refs), **(env or {})}
    if search is not None:
        full["DUET_PROJECT_ROOT"] = str(search)
    dagster = Path(sys.executable).with_name("dagster")
    cmd = [str(dagster), "dev", "-m", "pipelines.dagster.workspace", "-h", host, "-p", str(port)]
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]  # nice execs dagster: the same process, its group and session
    return subprocess.Popen(cmd, env=full, cwd=search or Path.cwd(), start_new_session=True, stdout=output,
                            stderr=output), home


def stop_process_group(proc: Any, timeout_s: float = 30.0, *, terminate: bool = True) -> None:
    """Stop a child started in a session of its own: SIGTERM to it (unless ``terminate`` is
    false: it was sent already), which stops its own children in order (``dagster dev``: the
    daemon, the webserver, the code server), SIGKILL to its process group after
    ``timeout_s``; then SIGKILL to what is left of the group (a child its leader did not wait
    for: no orphan outlives the command)."""
    import signal
    import subprocess

    if proc.poll() is None:
        if terminate:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _ui_kept(phases: Phases) -> str:
    """What an interrupted ``duet ui`` keeps, for :func:`interrupts` (Ctrl-C while the UI runs
    is the normal stop and prints nothing)."""
    if phases.current == "reset":
        return ("while resetting the topics and lake tables: they may be partly deleted; run `duet ui --load` "
                "again")
    if phases.current == "load":
        return (f"while loading the sample data: the lake tables were deleted, {phases.topics_kept()}; run "
                "`duet ui --load` again")
    if phases.current == "ui":
        return "while stopping the UI"
    return "before the UI started: nothing was changed"


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
    from pipelines.dagster.client import DagsterClient
    from pipelines.lake.loaded import loaded_pipeline
    from pipelines.preflight import UserError

    console = make_console()
    launched: dict[str, str] = {}
    with interrupts("backfill", lambda: _backfill_kept(launched, url)), user_errors("backfill"):
        declared, folder = pipeline_and_lake(pipeline_ref, None)
        root = folder.parent if isinstance(folder, Path) else folder.rsplit("/", 1)[0]  # s3://bucket/prefix
        pipeline = loaded_pipeline(declared, root)  # the UI's partitions: the years loaded
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
        launched["id"] = backfill_id
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


def _backfill_kept(launched: dict[str, str], url: str) -> str:
    """What an interrupted ``duet backfill`` leaves, for :func:`interrupts`."""
    if "id" not in launched:
        return "before the backfill was launched: nothing was launched"
    return (f"while following backfill {launched['id']}: it goes on in Dagster; follow or cancel it at "
            f"{url}/runs/b/{launched['id']}")
