"""The ``duet`` command line (the console script ``duet = "pipelines.cli:app"``).

* :mod:`.commands`: ``run``, ``load``, ``speed``, ``batch``, ``serve``, ``query``;
* :mod:`.dagster_commands`: ``ui`` and ``backfill`` (Dagster);
* :mod:`.up`: ``up`` (the pipeline live: speed service, serving, Dagster, a fed sample);
* :mod:`.objectstore_command`: ``objectstore`` (a local S3-compatible store, SeaweedFS);
* :mod:`.support`: what the commands share (options, the Typer app, the embedded broker,
  phases, interrupts, lake locks, user errors);
* :mod:`.scaffold`: ``init`` and its project, from the templates in ``templates/project``;

The top room of :mod:`pipelines`: nothing below imports it.
"""

from pipelines.cli.commands import app, main
import pipelines.cli.up  # noqa: E402,F401 - registers up on the app
import pipelines.cli.objectstore_command  # noqa: E402,F401 - registers objectstore on the app

__all__ = ["app", "main"]
