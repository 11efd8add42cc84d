"""The ``duet`` command line (the console script ``duet = "pipelines.cli:app"``).

* :mod:`.commands`: ``run``, ``load``, ``speed``, ``batch``, ``serve``, ``query``, ``init``;
* :mod:`.dagster_commands`: ``ui`` and ``backfill`` (Dagster);
* :mod:`.up`: ``up`` (the pipeline live: speed service, serving, Dagster, a fed sample);
* :mod:`.support`: what the commands share (options, the Typer app, the embedded broker,
  phases, interrupts, lake locks, user errors);
* :mod:`.scaffold`: ``duet init``'s project, from the templates in ``templates/project``.

The top room of :mod:`pipelines`: nothing below imports it.
"""

from pipelines.cli.commands import app, main

__all__ = ["app", "main"]
