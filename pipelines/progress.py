"""Progress reporting of the main job's phases: a tiny protocol, a silent and a rich variant.

The phase functions of :mod:`pipelines.job.main_job` report through a :class:`Reporter` so that
the CLI shows one rich progress bar per phase while Dagster assets and tests stay silent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

__all__ = ["Reporter", "NullReporter", "RichReporter", "load_progress"]


class Reporter(Protocol):
    """Receives the progress of named phases (``"load"``, ``"speed"``, ``"ingest"``...)."""

    def start(self, phase: str, total: float | None = None) -> None:
        """A phase begins; ``total`` units of work (``None``: unknown)."""

    def update(self, phase: str, completed: float, total: float | None = None, info: str = "") -> None:
        """``completed`` units are done (absolute, not a delta); ``info`` is a short status."""

    def finish(self, phase: str, info: str = "") -> None:
        """The phase is over (the bar is filled); ``info`` is a one-line result."""

    def log(self, message: str) -> None:
        """A line of text between the bars."""


class NullReporter:
    """Reports nothing (Dagster assets, tests, ``--json`` without a terminal)."""

    def start(self, phase: str, total: float | None = None) -> None:  # noqa: D102
        pass

    def update(self, phase: str, completed: float, total: float | None = None, info: str = "") -> None:  # noqa: D102
        pass

    def finish(self, phase: str, info: str = "") -> None:  # noqa: D102
        pass

    def log(self, message: str) -> None:  # noqa: D102
        pass


def load_progress(reporter: Reporter, phase: str = "load") -> Callable[[str, int, int | None], None]:
    """A producer's ``progress(topic, done, total)`` callback (``pipelines.produce.load.Progress``)
    that shows on ``reporter``'s ``phase`` the records produced so far over every topic, the
    current topic's count (of its total, when known) and the records per second since the
    callback was made."""
    done: dict[str, int] = {}
    t0 = time.monotonic()

    def progress(topic: str, n: int, total: int | None) -> None:
        done[topic] = n
        count = sum(done.values())
        of = f"/{total:,}" if total is not None else ""
        rate = count / max(1e-9, time.monotonic() - t0)
        reporter.update(phase, count, None, f"{topic} {n:,}{of}, {rate:,.0f} records/s")

    return progress


class RichReporter:
    """One rich progress bar per phase, on ``console`` (stderr in ``--json`` mode).

    Use as a context manager::

        with RichReporter(console) as rep:
            rep.start("load", total=1000)
            rep.update("load", 500)
            rep.finish("load", "1000 records")
    """

    def __init__(self, console: Console | None = None) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Column

        self._progress: Progress = Progress(
            TextColumn("[bold]{task.fields[phase]}", table_column=Column(min_width=8, no_wrap=True)),
            BarColumn(bar_width=20),
            TimeElapsedColumn(table_column=Column(min_width=7, no_wrap=True)),
            TextColumn("{task.fields[info]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
            console=console,
            transient=False,
            expand=True,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> RichReporter:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, phase: str, total: float | None = None) -> None:  # noqa: D102
        if phase in self._tasks:
            self._progress.reset(self._tasks[phase], total=total, info="")
        else:
            self._tasks[phase] = self._progress.add_task(phase, total=total, phase=phase, info="")

    def update(self, phase: str, completed: float, total: float | None = None, info: str = "") -> None:  # noqa: D102
        if phase not in self._tasks:
            self.start(phase, total)
        kwargs: dict[str, object] = {"completed": completed, "info": info}
        if total is not None:
            kwargs["total"] = total
        self._progress.update(self._tasks[phase], **kwargs)  # type: ignore[arg-type]

    def finish(self, phase: str, info: str = "") -> None:  # noqa: D102
        if phase not in self._tasks:
            self.start(phase, 1)
        task = self._tasks[phase]
        total = self._progress.tasks[self._index(task)].total
        if total is None:
            total = max(1.0, self._progress.tasks[self._index(task)].completed)
        self._progress.update(task, total=total, completed=total, info=info)

    def log(self, message: str) -> None:  # noqa: D102
        self._progress.console.print(message)

    def _index(self, task: TaskID) -> int:
        for i, t in enumerate(self._progress.tasks):
            if t.id == task:
                return i
        raise KeyError(task)
