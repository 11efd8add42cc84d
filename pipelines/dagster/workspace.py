"""The code location of ``duet ui``: ``dagster dev -m pipelines.dagster.workspace``.

Its module-level ``defs`` holds the pipelines named by ``$DUET_PIPELINES`` (comma-separated
``module:attribute`` references, each resolved by :func:`pipelines.declaration.resolve.load_pipeline`,
with ``$DUET_PROJECT_ROOT``, a project's folder, put first on ``sys.path``), else the one
pipeline :func:`pipelines.declaration.resolve.resolve_pipeline` finds (``$DUET_PIPELINE``, the
``[tool.duet]`` project, the flights example).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from pipelines.dagster.factory import definitions
from pipelines.declaration.pipeline import Pipeline

__all__ = ["PIPELINES_ENV", "PROJECT_ROOT_ENV", "workspace_pipelines", "defs"]

#: Comma-separated pipeline references (``module:attribute``).
PIPELINES_ENV = "DUET_PIPELINES"
#: A folder put first on ``sys.path`` before importing them.
PROJECT_ROOT_ENV = "DUET_PROJECT_ROOT"


def workspace_pipelines() -> list[Pipeline]:
    """The pipelines of ``$DUET_PIPELINES`` (in order), else the resolved one.

    Raises:
        PipelineError: a reference cannot be loaded (one line naming it).
    """
    from pipelines.declaration.resolve import load_pipeline, resolve_pipeline

    root = os.environ.get(PROJECT_ROOT_ENV, "").strip()
    search = Path(root).expanduser().resolve() if root else None
    refs = [r.strip() for r in os.environ.get(PIPELINES_ENV, "").split(",") if r.strip()]
    if refs:
        return [load_pipeline(r, search) for r in refs]
    return [resolve_pipeline(cwd=search)[0]]


defs: dg.Definitions = definitions(*workspace_pipelines())
