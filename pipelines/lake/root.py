"""The lake root a command works on (``--lake``, ``$DUET_LAKE``, a project's
``[tool.duet] lake``, ``<repo>/lake``); a pipeline's tables live in its folder of it
(:meth:`Pipeline.lake <pipelines.declaration.pipeline.Pipeline.lake>`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["resolve_lake"]


def resolve_lake(lake: str | Path | None, default: Path | None = None) -> Path:
    """The lake root: ``lake`` as an absolute path, else ``$DUET_LAKE``, else ``default``
    (a project's ``[tool.duet] lake``), else ``<repo>/lake``. A pipeline's tables live in
    ``<root>/<pipeline name>`` (:meth:`Pipeline.lake`)."""
    from speed_layer.runtime.paths import default_lake

    if lake:
        return Path(lake).expanduser().resolve()
    if default is not None and not os.environ.get("DUET_LAKE"):
        return default
    return default_lake()
