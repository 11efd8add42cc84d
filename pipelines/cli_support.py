"""What the ``duet`` commands share (:mod:`pipelines.cli`, :mod:`pipelines.cli_dagster`): the
Typer app, the common options, the error boundary (a user's mistake is one line on stderr and
exit status 2), the Kafka cluster of a command (the embedded broker unless one is named), and
the pipeline a command works on with its folder of the lake."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

__all__ = ["app", "LakeOpt", "PipelineOpt", "BootstrapOpt", "LimitOpt", "make_console", "setup_logging", "cluster",
           "user_errors", "stdout_to_stderr", "reporter", "pipeline_and_lake", "BOOTSTRAP_ENV"]


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

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


def make_console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


def setup_logging(verbose: bool) -> None:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@contextlib.contextmanager
def cluster(bootstrap: str | None, console: Any) -> Iterator[tuple[str, bool]]:
    """Yield ``(bootstrap servers, embedded?)``; an embedded broker is stopped on exit."""
    external = bootstrap or os.environ.get(BOOTSTRAP_ENV, "").strip()
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
def user_errors(command: str, verbose: bool = False) -> Iterator[None]:
    """The CLI's error boundary: a user's mistake is one line on stderr and exit status 2; an
    unexpected failure is one line too (``Type: message``), with the traceback under -v."""
    from rich.markup import escape

    from batch_layer.spark import SparkConfigError
    from pipelines.pipeline import PipelineError
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


def pipeline_and_lake(ref: str | None, lake: Path | None) -> tuple[Any, Path]:
    """The pipeline a command works on and its folder of the lake (see the module docstring).

    Raises:
        PipelineError: the reference or the declaration is wrong (one line).
    """
    from pipelines.resolve import resolve_pipeline
    from pipelines.steps import resolve_lake

    pipeline, project = resolve_pipeline(ref)
    return pipeline, pipeline.lake(resolve_lake(lake, project.lake if project else None))

