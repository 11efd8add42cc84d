"""The Dagster definitions of duet's example pipelines (what ``workspace.yaml`` loads):
flights and shop in one ``Definitions``, each under its own asset prefix.

``dagster dev -w workspace.yaml`` or ``dagster definitions validate -m pipelines.examples.definitions``.
"""

from __future__ import annotations

import importlib
import importlib.util

from pipelines.dagster import definitions
from pipelines.examples import flights
from pipelines.declaration.pipeline import Pipeline

__all__ = ["defs", "example_pipelines"]


def example_pipelines() -> list[Pipeline]:
    """flights, then shop (while ``pipelines.examples.shop`` is being written it may be
    missing: then flights alone; a shop that exists but fails to import fails loudly)."""
    out = [flights.pipeline]
    if importlib.util.find_spec("pipelines.examples.shop") is not None:
        out.append(importlib.import_module("pipelines.examples.shop").pipeline)
    return out


defs = definitions(*example_pipelines())
