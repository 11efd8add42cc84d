"""The ``duet`` commands that drive Dagster: ``ui`` (``dagster dev`` on the pipelines) and
``backfill`` (a partition backfill through a running UI). Registered on the app of
:mod:`pipelines.cli`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipelines.cli_support import (
    BOOTSTRAP_ENV, BootstrapOpt, LakeOpt, LimitOpt, PipelineOpt, app, cluster, make_console, pipeline_and_lake,
    reporter, setup_logging, user_errors,
)


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
    setup_logging(verbose)
    import signal
    import subprocess

    from pipelines.dagster_home import ensure_dagster_home
    from pipelines.preflight import check_port_free
    from pipelines.resolve import EXAMPLE_PIPELINES, PIPELINE_ENV, find_project, load_pipeline
    from pipelines.steps import resolve_lake

    console = make_console()
    with user_errors("ui", verbose):
        check_port_free(host, port)
        project = find_project()
        chosen = pipeline_ref or os.environ.get(PIPELINE_ENV, "").strip() or (project.pipeline if project else None)
        refs = [chosen] if chosen else list(EXAMPLE_PIPELINES)
        search = project.root if project else None
        pipelines = [load_pipeline(r, search) for r in refs]
        root = resolve_lake(lake, project.lake if project else None)
    with user_errors("ui", verbose), cluster(bootstrap, console) as (servers, embedded):
        if load_data_ if load_data_ is not None else embedded:
            from pipelines.steps import ensure_pipeline_topics, load_data, reset_pipeline

            for pipeline in pipelines:
                with console.status(f"resetting the topics and lake tables of {pipeline.name}..."):
                    reset_pipeline(pipeline, servers, pipeline.lake(root))
                if pipeline.sample is not None:
                    with reporter(console) as rep:
                        counts = load_data(pipeline, servers, limit, rep)
                    console.print(f"{pipeline.name}: loaded " + ", ".join(f"{t}: {n:,}" for t, n in counts.items()))
                ensure_pipeline_topics(pipeline, servers)
        home = ensure_dagster_home()
        env = {**os.environ, BOOTSTRAP_ENV: servers, "DUET_LAKE": str(root), "DAGSTER_HOME": str(home),
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
        make_console(stderr=True).print(f"[bold red]duet ui[/]: dagster dev exited with status {code}")
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

    console = make_console()
    with user_errors("backfill"):
        pipeline, _ = pipeline_and_lake(pipeline_ref, None)
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

