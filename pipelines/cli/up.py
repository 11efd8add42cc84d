"""``duet up``: the pipeline live in one command (issue 41, item 5).

One process group of work, on the embedded broker (started empty) or a cluster
(``--bootstrap``):

* the speed layer as a service in this process (:func:`pipelines.speed.server.serve_speed`,
  as ``duet speed --follow --server``), with ``commit.interval.ms`` 200 (:data:`LIVE_CONFIG`):
  the view topics, which serving reads, trail by a fifth of a second instead of duet's
  default 10 s;
* serving with the live merge (``duet serve --bootstrap``: :func:`serving.api.app.serve`), a
  child process;
* the Dagster webserver and daemon (``dagster dev``, as ``duet ui``), a child process, with the
  recompute schedule and the new-data sensor running (``$DUET_AUTOMATION``,
  :data:`pipelines.dagster.schedules.AUTOMATION_ENV`): batch recomputes advance the watermark
  while data arrives;
* the pipeline's sample replayed into its topics at ``--rate`` events/s
  (:func:`pipelines.produce.replay.sample_feed`); on a cluster nothing is fed unless ``--feed``.

A lake without published views gets an empty catalogue (every view, no batch yet), so that
serving answers from the speed layer alone until the first recompute publishes. Ctrl-C (or
SIGTERM) stops everything and prints one line.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pipelines.cli.dagster_commands import start_dagster_dev, stop_process_group
from pipelines.cli.support import (
    BootstrapOpt, LakeOpt, LimitOpt, Phases, PipelineOpt, ScaleOpt, app, cluster, interrupts, lake_locks, make_console,
    pipeline_and_lake, reporter, setup_logging, user_errors,
)

__all__ = ["up", "LIVE_CONFIG", "RECOMPUTE_NICE"]

#: nice value of ``dagster dev`` (webserver, daemon, code server and the recompute runs with their
#: Spark JVMs) under ``duet up``: a recompute is throughput, the live path is latency. The
#: 30-minute soak at 1,000 flights/s at equal priority (2 cores, 2026-12-07) left the speed
#: service under half a core beside the recompute and serving, and it fell minutes behind
#: the feed (docs/live-serving.md, "The soak")
RECOMPUTE_NICE = 10

#: the speed service's Streams config under ``duet up``: the caches flush to the view topics
#: five times a second (Kafka Streams' ``commit.interval.ms``; duet's default is 10 s;
#: ``--commit-interval`` sets it)
LIVE_CONFIG: dict[str, Any] = {"commit.interval.ms": 200, "poll.ms": 10}


@app.command()
def up(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    bootstrap: BootstrapOpt = None,
    rate: Annotated[float, typer.Option("--rate", min=0.001, help="Events per second of the sample fed into the "
                                        "topics (wall clock).")] = 1000.0,
    feed: Annotated[Optional[bool], typer.Option(
        "--feed/--no-feed", help="Replay the pipeline's sample into its topics at --rate. Default: on the embedded "
        "broker yes, on a cluster (--bootstrap) no: its topics have their own producers.",
        show_default=False)] = None,
    limit: LimitOpt = None,
    scale: ScaleOpt = 1,
    host: Annotated[str, typer.Option("--host", help="Interface serving, the speed service and Dagster bind.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port of serving (/ui, /views).")] = 8000,
    speed_port: Annotated[int, typer.Option("--speed-port", min=0, max=65535, help="TCP port of the speed service "
                                            "(/speed, /health, /metrics); 0: a free one.")] = 8081,
    ui_port: Annotated[int, typer.Option("--ui-port", min=1, max=65535, help="TCP port of the Dagster UI.")] = 3000,
    recompute_nice: Annotated[int, typer.Option(
        "--recompute-nice", min=0, max=19, help="Nice value of Dagster and the recomputes it runs (Spark "
        "included): the live path (speed layer, serving, the feed) keeps the CPU it needs; 0: equal priority.")]
    = RECOMPUTE_NICE,
    commit_interval: Annotated[int, typer.Option(
        "--commit-interval", min=10, max=60_000, help="The speed layer's commit.interval.ms: how often its "
        "record caches flush to the view topics (and serving). Shorter: fresher answers; longer: fewer window "
        "updates sent per record, so more records/s per core (docs/live-serving.md, \"The live cost\").")]
    = LIVE_CONFIG["commit.interval.ms"],
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log INFO lines to stderr.")] = False,
) -> None:
    """The pipeline live, until Ctrl-C: the speed layer as a service (commit interval 200 ms,
    --commit-interval),
    serving with the live merge (every answer: the batch view up to its watermark, the speed
    layer's current results after it), the Dagster webserver and daemon with the recompute
    schedule and the new-data sensor on (at nice 10, --recompute-nice: a recompute yields the
    CPU to the live path), and the sample fed at --rate events/s (on the
    embedded broker; on a cluster only with --feed; --years N: N copies of it, one after the
    other, for a feed that lasts). A lake without published views starts
    with an empty catalogue: answers come from the speed layer until the first recompute.
    Ctrl-C stops all of it in one line (docs/live-serving.md)."""
    setup_logging(verbose)
    from pipelines.preflight import check_port_free

    console = make_console()
    phases = Phases("up", console, first="start")
    with interrupts("up", lambda: _up_kept(phases)), user_errors("up", verbose):
        pipeline, folder = pipeline_and_lake(pipeline_ref, lake)
        if scale > 1:
            pipeline.require_sample_copy()
        for p in {port, ui_port} | ({speed_port} - {0}):
            check_port_free(host, p)
    with interrupts("up", lambda: _up_kept(phases)), user_errors("up", verbose), \
            cluster(bootstrap, console, phases) as (servers, embedded), contextlib.ExitStack() as children:
        fed = embedded if feed is None else feed
        line = _run_live(pipeline, pipeline_ref, folder, servers, embedded, fed, rate, limit, scale, host, port, speed_port,
                         ui_port, console, phases, children, recompute_nice, commit_interval)
        children.close()  # serving and Dagster stop before the broker
        console.print(f"duet up: {line}; serving and Dagster stopped; {phases.topics_kept()}", soft_wrap=True)


def _run_live(pipeline: Any, ref: str | None, folder: Path, servers: str, embedded: bool, fed: bool, rate: float,
              limit: int | None, scale: int, host: str, port: int, speed_port: int, ui_port: int, console: Any,
              phases: Phases, children: contextlib.ExitStack, recompute_nice: int, commit_interval_ms: int) -> str:
    """Start serving and Dagster (stopped by ``children``'s close), then run the speed service
    (feeding the sample when ``fed``) until SIGINT / SIGTERM; the line saying what it did. On
    the ``embedded`` broker the speed service is a fresh application with its state in a
    temporary folder; on a cluster it is the pipeline's service (``service_app_id``: it
    resumes from its committed offsets and local state)."""
    from pipelines.dagster.schedules import AUTOMATION_ENV
    from pipelines.lake.loaded import record_loaded
    from pipelines.produce.load import produce_tables
    from pipelines.produce.replay import sample_feed
    from pipelines.produce.topics import ensure_pipeline_topics
    from pipelines.progress import NullReporter, load_progress
    from pipelines.speed.server import serve_speed

    phases.enter("topics")
    ensure_pipeline_topics(pipeline, servers)
    _ensure_catalogue(pipeline, folder)
    if fed and scale > 1:  # before Dagster loads: its partitions (and the new-data sensor) cover every copy fed
        record_loaded(folder, scale)
    root = folder.parent
    phases.enter("serving")
    chosen, search = _chosen_ref(ref)
    serving_log = children.enter_context(open(_log_folder() / f"up-{pipeline.name}-serving.log", "ab"))
    serving = _Child(_start_serving(chosen, root, servers, host, port, serving_log), 15.0)
    children.callback(serving.stop)
    phases.enter("dagster")
    logs = _log_folder()
    dagster_log = children.enter_context(open(logs / f"up-{pipeline.name}-dagster.log", "ab"))
    proc, home = start_dagster_dev([chosen], search, root, servers, host, ui_port, {AUTOMATION_ENV: "running"},
                                   output=dagster_log, nice=recompute_nice)
    dagster = _Child(proc, 30.0)
    children.callback(dagster.stop)
    feed = None
    if fed and pipeline.sample is not None:
        phases.enter("load")
        sample = pipeline.sample_data(limit, scale)
        with reporter(console) as rep:
            produce_tables(pipeline, servers, sample, load_progress(rep))
        feed = sample_feed(servers, sample, NullReporter(), rate=rate)
    phases.enter("live")
    fed_what = f"the sample fed at {rate:,g} events/s" if feed is not None else "nothing fed"

    def ready(service: Any) -> None:
        console.print(f"duet up: {pipeline.name} live on Kafka {servers} ({fed_what}): views at "
                      f"[bold]http://{host}:{port}/ui[/], speed service at {service.url}, Dagster UI at "
                      f"http://{host}:{ui_port} (recompute schedule and new-data sensor on, DAGSTER_HOME {home}); "
                      f"lake {folder}; their logs in {_log_folder()}; Ctrl-C stops all", soft_wrap=True)

    app_id, state_dir = pipeline.service_app_id, None
    if embedded:  # a fresh broker has no committed offsets: fresh state, in a folder of its own (not one
        # `duet run`'s reset would find in <duet_home>/state and report held)
        app_id, state_dir = None, Path(tempfile.mkdtemp(prefix=f"duet-up-{pipeline.name}-state-"))
        children.callback(shutil.rmtree, state_dir, True)
    served = serve_speed(pipeline, servers, host, speed_port, application_id=app_id, state_dir=state_dir,
                         feed=feed, timeout_s=3600.0, on_ready=ready,
                         config={**LIVE_CONFIG, "commit.interval.ms": commit_interval_ms},
                         on_stop=lambda: (serving.terminate(), dagster.terminate()))
    phases.enter("stop")
    fed_line = f", {served.replay.produced:,} events fed" if served.replay is not None else ""
    failed = [f"{what} had exited with status {child.exited}" for what, child in (("serving", serving),
              ("dagster dev", dagster)) if child.exited is not None]
    return (f"stopped ({served.stopped_by}) after {served.seconds:.1f} s: {served.processed:,} records processed"
            f"{fed_line}, {served.dropped_late:,} dropped as late, {served.dead_lettered:,} dead-lettered"
            + "".join(f"; {f}" for f in failed))


def _chosen_ref(ref: str | None) -> tuple[str, Path | None]:
    """The pipeline reference the children load (as :func:`resolve_pipeline` chooses it) and
    the project folder to search, for ``dagster dev`` and ``duet serve``."""
    import os

    from pipelines.declaration.resolve import DEFAULT_PIPELINE, PIPELINE_ENV, find_project

    project = find_project()
    chosen = ref or os.environ.get(PIPELINE_ENV, "").strip() or (project.pipeline if project else None)
    return chosen or DEFAULT_PIPELINE, project.root if project else None


def _ensure_catalogue(pipeline: Any, folder: Path | str) -> None:
    """A lake folder without published views gets their catalogue, with no batch yet (serving
    then answers from the speed layer alone; the first recompute publishes the batch)."""
    from batch_layer.delta.storage import exists
    from serving.views import publish
    from serving.views.model import catalogue_path

    if exists(catalogue_path(folder)):
        return
    if isinstance(folder, Path):
        folder.mkdir(parents=True, exist_ok=True)
    with lake_locks("up", [folder]):
        publish(folder, pipeline.view_specs.values(), {}, {}, None)


def _log_folder() -> Path:
    """``<duet_home>/logs``: where ``duet up`` writes its children's output."""
    from speed_layer.runtime.paths import duet_home

    folder = duet_home() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _start_serving(ref: str, root: Path, servers: str, host: str, port: int, log: Any) -> subprocess.Popen[bytes]:
    """``duet serve --bootstrap servers`` in a session of its own, its output to ``log``."""
    cmd = [sys.executable, "-m", "pipelines.cli", "serve", "--lake", str(root), "--host", host, "--port", str(port),
           "--bootstrap", servers, "--pipeline", ref]
    return subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)


class _Child:
    """A child process of ``duet up`` in a session of its own: :meth:`terminate` asks it to
    stop (SIGTERM to its group, once), :meth:`stop` waits for it (terminating it first if
    not done), killing it after ``timeout_s``. ``exited``: its status if it ended before
    being told to."""

    def __init__(self, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
        self.proc, self.timeout_s = proc, timeout_s
        self.exited: int | None = None
        self._told = False

    def terminate(self) -> None:
        import signal

        if self._told:
            return
        self._told = True
        self.exited = self.proc.poll()
        if self.exited is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        told, self._told = self._told, True
        if not told:
            self.exited = self.proc.poll()
        stop_process_group(self.proc, self.timeout_s, terminate=not told)


def _up_kept(phases: Phases) -> str:
    """What an interrupted ``duet up`` keeps, for :func:`interrupts`."""
    if phases.current == "start":
        return "before anything started"
    if phases.current == "stop":
        return f"while stopping: serving and Dagster were stopped; {phases.topics_kept()}"
    return (f"while starting ({phases.current}): serving and Dagster were stopped; the lake is as the recomputes "
            f"left it; {phases.topics_kept()}")

