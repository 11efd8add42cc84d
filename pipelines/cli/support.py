"""What the ``duet`` commands share (:mod:`pipelines.cli`, :mod:`pipelines.cli.dagster_commands`): the
Typer app, the common options, the error boundary (a user's mistake is one line on stderr and
exit status 2), the Ctrl-C boundary (one line saying what was interrupted and what is kept,
exit status 130), the phase a long command is in, the lake lock of the commands that write,
the Kafka cluster of a command (the embedded broker unless one is named), and the pipeline a
command works on with its folder of the lake."""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

__all__ = ["app", "LakeOpt", "PipelineOpt", "BootstrapOpt", "LimitOpt", "ScaleOpt", "InstancesOpt", "YesOpt", "make_console",
           "setup_logging", "cluster", "external_bootstrap", "user_errors", "interrupts", "BackgroundSpark", "Phases",
           "PhaseReporter", "lake_locks", "lake_tables", "confirm_deletion", "stdout_to_stderr", "reporter",
           "pipeline_and_lake", "CatalogRecorder", "BOOTSTRAP_ENV", "INTERRUPTED_EXIT"]


def _flags_read_as_flags() -> None:
    """Typer's rich help (0.2x) shows a type after every option, ``<bool>`` after a flag too
    (``--json <bool>`` reads as if it took a value): show none after a flag or a counter, as
    its plain help does."""
    option = getattr(typer.core, "TyperOption", None)
    show = getattr(option, "display_type_rich", None)
    if show is None or getattr(show, "_duet_flags", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> Any:
        if getattr(self, "is_flag", False) or getattr(self, "count", False):
            return None
        return show(self, ctx)

    display_type_rich._duet_flags = True  # type: ignore[attr-defined]
    option.display_type_rich = display_type_rich


_flags_read_as_flags()

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

ScaleOpt = Annotated[
    int, typer.Option("--scale", "--years", min=1, metavar="N",
                      help="Load N copies of the sample data, each one period of the sample later with keys of its "
                      "own (the flights: N years from 2013, new tail and flight numbers; the pipeline's "
                      "`sample_copy`); with --limit, the first events of each copy.")
]

InstancesOpt = Annotated[
    Optional[int], typer.Option("--instances", min=1, metavar="N",
                                help="Run the speed layer as N processes of one application, each running whole "
                                "sub-topologies placed by their cost (one progress display; Ctrl-C stops them all). "
                                "Default 1.", show_default=False)
]

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking (needed when stdin is not a "
                                       "terminal).")]

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
#: the exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
INTERRUPTED_EXIT = 130
#: a Ctrl-C lost in a finalizer is delivered again after this many seconds
_REDELIVER_S = 0.05


def make_console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


def setup_logging(verbose: bool) -> None:
    """Log WARNING and above to stderr (``--verbose``: INFO and above). The level is the
    handler's as well as the root logger's: a library that sets its own logger to INFO
    (Great Expectations' "Created temporary directory ... for ephemeral docs site") stays
    out of a command's stderr unless ``--verbose``."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    level = logging.INFO if verbose else logging.WARNING
    root = logging.getLogger()
    before = set(root.handlers)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in set(root.handlers) - before:  # the one basicConfig added (none if the root had one)
        handler.setLevel(level)
    if not verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_not_an_interrupt)


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    """Drop log records of a ``KeyboardInterrupt`` or of an error it caused (py4j logs the
    Ctrl-C that breaks a call into the JVM, and the broken socket it leaves, with their
    tracebacks, as ERRORs): :func:`interrupts` says it in one line."""
    exc = record.exc_info[1] if record.exc_info else None
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return False
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return True


def external_bootstrap(bootstrap: str | None) -> str | None:
    """The cluster a command uses: ``--bootstrap``, else ``$KAFKA_BOOTSTRAP_SERVERS``; ``None``:
    an embedded broker (started empty by the command)."""
    return bootstrap or os.environ.get(BOOTSTRAP_ENV, "").strip() or None


@contextlib.contextmanager
def cluster(bootstrap: str | None, console: Any, phases: Phases | None = None) -> Iterator[tuple[str, bool]]:
    """Yield ``(bootstrap servers, embedded?)``; an embedded broker is stopped on exit.
    ``phases`` learns the cluster (for the line Ctrl-C prints)."""
    external = external_bootstrap(bootstrap)
    if external:
        from pipelines.preflight import check_kafka_reachable

        with console.status(f"connecting to Kafka at {external}..."):
            check_kafka_reachable(external)
        if phases is not None:
            phases.kafka = (external, False)
        yield external, False
        return
    from speed_layer.admin import EmbeddedKafka

    with console.status("starting the embedded Kafka broker..."):
        broker = EmbeddedKafka()
        broker.start()
    console.print(f"embedded Kafka broker at {broker.bootstrap_servers}")
    if phases is not None:
        phases.kafka = (broker.bootstrap_servers, True)
    try:
        yield broker.bootstrap_servers, True
    finally:
        broker.stop()


@contextlib.contextmanager
def user_errors(command: str, verbose: bool = False) -> Iterator[None]:
    """The CLI's error boundary: a user's mistake is one line on stderr and exit status 2; an
    unexpected failure is one line too (``Type: message``), with the traceback under -v."""
    from rich.markup import escape

    from batch_layer.spark import SparkConfigError
    from pipelines.declaration.pipeline import PipelineError
    from pipelines.preflight import UserError
    from serving.errors import ServingError

    err = make_console(stderr=True)
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
def stdout_to_stderr() -> Iterator[Any]:
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


def reporter(console: Any) -> Any:
    from pipelines.progress import RichReporter

    return RichReporter(console)


def pipeline_and_lake(ref: str | None, lake: Path | None, *, write: bool = True) -> tuple[Any, Path | str]:
    """The pipeline a command works on and its folder of the lake (see the module docstring);
    ``write=False`` for a command that only reads it (an object-store lake is then checked
    for reading only: :func:`pipelines.lake.root.resolve_lake`).

    Raises:
        PipelineError: the reference or the declaration is wrong (one line).
    """
    from pipelines.declaration.resolve import resolve_pipeline
    from pipelines.lake.root import resolve_lake

    pipeline, project = resolve_pipeline(ref)
    return pipeline, pipeline.lake(resolve_lake(lake, project.lake if project else None, write=write))


class CatalogRecorder:
    """What ``duet <command>`` does once it has written and checked the lake: called with its
    batch views (``{view: frame}``), check results and rows published (``None``: none), it
    records them in Dagster's catalog as runless asset events
    (:func:`pipelines.dagster.catalog.record_lake_write`) on a thread, while the command goes
    on (a year of daily partitions is some 1,500 events, written one by one by Dagster's
    SQLite storage); :meth:`wait` waits for it before the command exits. An instance that
    cannot be written is one warning line (the lake is written already). ``rebuilt``: the
    command rebuilt the lake from scratch (``duet run``): the assets' earlier history goes.
    """

    def __init__(self, command: str, pipeline: Any, *, rebuilt: bool = False) -> None:
        self.command, self.pipeline, self.rebuilt = command, pipeline, rebuilt
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __call__(self, frames: Any, checks: Any, published: Any) -> None:
        self._thread = threading.Thread(target=self._record, args=(frames, checks, published),
                                        name="duet-dagster-catalog", daemon=True)
        self._thread.start()

    def _record(self, frames: Any, checks: Any, published: Any) -> None:
        from pipelines.dagster.catalog import record_lake_write

        try:
            record_lake_write(self.pipeline, f"duet {self.command}", frames, checks, published, rebuilt=self.rebuilt)
        except Exception as exc:  # noqa: BLE001 - said by wait(): the lake is written, the command goes on
            self._error = exc

    def wait(self, console: Any) -> None:
        """Wait for the recording (a status line meanwhile); a failure is one warning line."""
        from rich.markup import escape

        if self._thread is None:
            return
        if self._thread.is_alive():
            with console.status("recording the lake's partitions and checks in Dagster's catalog..."):
                self._thread.join()
        self._thread.join()
        if self._error is not None:
            exc = self._error
            make_console(stderr=True).print(
                f"[yellow]duet {self.command}[/]: Dagster's catalog not updated ({type(exc).__name__}: "
                f"{escape(str(exc))}); the lake is written", soft_wrap=True)


# --------------------------------------------------------------------------- Ctrl-C
class Phases:
    """The phase a long command is in, for the line Ctrl-C prints (:func:`interrupts`).

    ``enter(phase)`` moves on; when the console is not a terminal (a log, a CI job), where no
    progress bar is drawn until the end, it also prints ``duet <command>: <phase>...``.
    :func:`cluster` sets ``kafka`` (servers, embedded?) once the cluster is up."""

    def __init__(self, command: str, console: Any, first: str = "start") -> None:
        self.command = command
        self.current = first
        self.kafka: tuple[str, bool] | None = None
        self._console = console
        self._announce = not console.is_terminal

    def enter(self, phase: str) -> None:
        """The command starts ``phase`` (again: nothing)."""
        if phase == self.current:
            return
        self.current = phase
        if self._announce:
            self._console.print(f"duet {self.command}: {phase}...", soft_wrap=True)

    def topics_kept(self) -> str:
        """What Kafka keeps of the command's work: ``the topics on HOST:PORT are kept``, or that
        the embedded broker is gone."""
        if self.kafka is None:
            return "Kafka was not touched"
        servers, embedded = self.kafka
        if embedded:
            return "the embedded broker and its topics are gone (they live as long as the command)"
        return f"the topics on {servers} are kept"


class PhaseReporter:
    """A progress :class:`~pipelines.progress.Reporter` that also moves :class:`Phases` on at the
    start of each reported phase (``duet batch``'s ingest, batch, checks)."""

    def __init__(self, inner: Any, phases: Phases) -> None:
        self._inner, self._phases = inner, phases

    def start(self, phase: str, total: float | None = None) -> None:  # noqa: D102
        self._phases.enter(phase)
        self._inner.start(phase, total)

    def update(self, phase: str, completed: float, total: float | None = None, info: str = "") -> None:  # noqa: D102
        self._inner.update(phase, completed, total, info)

    def finish(self, phase: str, info: str = "") -> None:  # noqa: D102
        self._inner.finish(phase, info)

    def log(self, message: str) -> None:  # noqa: D102
        self._inner.log(message)


@contextlib.contextmanager
def interrupts(command: str, kept: Callable[[], str], cleanup: Callable[[], None] | None = None) -> Iterator[None]:
    """The CLI's Ctrl-C boundary, outside every context that cleans up (broker, lock, stdout):
    a ``KeyboardInterrupt`` becomes one line on stderr, ``duet <command>: interrupted <kept()>``
    (what was interrupted and what is kept), and exit status 130, never a traceback.
    ``cleanup`` runs first (``duet batch`` stops its SparkSession there)."""
    from rich.markup import escape

    previous_hook = sys.unraisablehook

    def redeliver(unraisable: Any) -> None:
        """Python raises the ``KeyboardInterrupt`` of Ctrl-C in whatever Python code runs when
        the signal is handled; in a finalizer (a ``__del__``, a weakref callback during a
        garbage collection) it cannot propagate and would be lost: deliver it again, a moment
        later (at once, it would be raised in this hook, and lost again)."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            again = threading.Timer(_REDELIVER_S, _thread.interrupt_main)
            again.daemon = True
            again.start()
            return
        previous_hook(unraisable)

    sys.unraisablehook = redeliver
    try:
        yield
    except KeyboardInterrupt:
        if cleanup is not None:
            cleanup()
        make_console(stderr=True).print(f"[bold yellow]duet {command}[/]: interrupted {escape(kept())}",
                                        soft_wrap=True)
        raise typer.Exit(INTERRUPTED_EXIT) from None
    finally:
        sys.unraisablehook = previous_hook


class BackgroundSpark:
    """The SparkSession of a command (``batch_layer.spark.get_spark``), started on a daemon
    thread at once, so that the JVM starts while the command does its first steps.

    Not on the main thread: there, pyspark puts its own SIGINT handler, which cancels the jobs
    through py4j from inside the very py4j call Ctrl-C interrupts (a reentrant read of the
    same socket, which py4j logs as an error with its traceback). Nothing waits for the thread:
    a JVM still starting when the command ends exits with it (pyspark's gateway reads its
    stdin until the driver closes it)."""

    def __init__(self, master: str | None) -> None:
        self._future: Future[Any] = Future()
        threading.Thread(target=self._start, args=(master,), name="duet-spark", daemon=True).start()

    def _start(self, master: str | None) -> None:
        if not self._future.set_running_or_notify_cancel():
            return
        try:
            from batch_layer.spark import get_spark

            self._future.set_result(get_spark(master=master))
        except BaseException as exc:  # handed to session()
            self._future.set_exception(exc)

    def session(self) -> Any:
        """The session, once started; raises what its start raised."""
        return self._future.result()

    def stop(self) -> None:
        """Stop the session if it is up (its JVM ends with it)."""
        if self._future.done() and self._future.exception() is None:
            self._future.result().stop()


# --------------------------------------------------------------------------- the lake lock
@contextlib.contextmanager
def lake_locks(command: str, folders: Sequence[Path | str]) -> Iterator[None]:
    """Hold the lake lock (:mod:`pipelines.lake.lock`) of each pipeline folder in ``folders``
    for the block; the second writer fails with :class:`~pipelines.lake.lock.LakeBusy` (one
    line naming the first). A stale lock is taken over with a one-line warning."""
    from rich.markup import escape

    from pipelines.lake.lock import command_line
    from pipelines.lake.locking import open_lake_lock

    err = make_console(stderr=True)

    def warn(message: str) -> None:
        err.print(f"[yellow]duet {command}[/]: {escape(message)}", soft_wrap=True)

    with contextlib.ExitStack() as stack:
        for folder in folders:
            stack.enter_context(open_lake_lock(folder, command_line(), warn=warn))
        yield


def lake_tables(folder: Path | str) -> list[str]:
    """The parts of a pipeline's lake folder (local or ``s3://...``) that hold tables
    (``raw``, ``views``, ``serving``, ``quality``), those present and not empty."""
    from batch_layer.delta.io import join_location
    from batch_layer.delta.layout import LakeLayout
    from batch_layer.delta.storage import is_object_store, list_names

    if is_object_store(folder):
        return [part for part in LakeLayout.PARTS if list_names(join_location(folder, part))]
    return [part for part in LakeLayout.PARTS
            if (folder / part).is_dir() and any((folder / part).iterdir())]


def confirm_deletion(command: str, flag: str, doomed: Sequence[str], yes: bool) -> None:
    """Ask before ``duet <command> <flag>`` deletes ``doomed`` (each a phrase: ``the lake tables
    of flights in ...``), unless ``yes`` or there is nothing to delete.

    Raises:
        UserError: stdin is not a terminal and ``yes`` is false (the message names --yes).
        typer.Exit: the user said no (status 1; nothing deleted).
    """
    from pipelines.preflight import UserError

    if yes or not doomed:
        return
    what = "; ".join(doomed)
    if not (sys.stdin is not None and sys.stdin.isatty()):
        raise UserError(f"{flag} deletes {what}; stdin is not a terminal to ask: pass --yes to confirm")
    if not typer.confirm(f"duet {command} {flag} deletes {what}. Continue?", default=False, err=True):
        make_console(stderr=True).print(f"duet {command}: cancelled; nothing was deleted")
        raise typer.Exit(1)
