"""How many copies of its sample data a pipeline's topics hold, recorded in its lake folder.

``duet load --years N``, ``duet run --years N`` and ``duet ui --load --years N`` produce copies
``0 .. N-1`` of the sample (:meth:`pipelines.declaration.pipeline.Pipeline.sample_data`); the flights'
copy ``k`` is year ``2013 + k``. They record N in ``<lake>/<name>/_loaded.json``
(``{"copies": N}``), and the Dagster definitions give partitions over those copies'
days (:meth:`pipelines.declaration.pipeline.Partitioning.for_copies`, :func:`loaded_pipeline`). Loading
appends, so the record keeps the largest N since the last reset of the input topics, which
removes it (:func:`pipelines.job.steps.reset_pipeline`). No record: one copy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipelines.declaration.pipeline import Pipeline

__all__ = ["LOADED_FILE", "record_loaded", "loaded_copies", "loaded_pipeline"]

#: the record's name in a pipeline's lake folder
LOADED_FILE = "_loaded.json"


def loaded_copies(folder: Path | str) -> int:
    """The copies recorded in the pipeline's lake folder ``folder`` (local or ``s3://...``); 1
    without a (readable) record."""
    from batch_layer.delta.io import join_location
    from batch_layer.delta.storage import read_text

    try:
        copies = json.loads(read_text(join_location(folder, LOADED_FILE)) or "")["copies"]
    except (OSError, ValueError, KeyError, TypeError):
        return 1
    return copies if isinstance(copies, int) and copies >= 1 else 1


def record_loaded(folder: Path | str, copies: int) -> int:
    """Record that the topics of the pipeline whose lake folder is ``folder`` hold copies
    ``0 .. copies-1`` of its sample data (the larger of ``copies`` and the record's, written
    atomically); returns the copies recorded. One copy and no record: nothing is written (no
    record means one copy), so a plain ``duet load`` leaves the lake as it found it."""
    from batch_layer.delta.io import join_location
    from batch_layer.delta.storage import exists, write_text

    copies = max(copies, loaded_copies(folder))
    record = join_location(folder, LOADED_FILE)
    if copies <= 1 and not exists(record):
        return 1
    write_text(record, json.dumps({"copies": copies}) + "\n")  # atomic: temp file + rename, or one PutObject
    return copies


def loaded_pipeline(p: Pipeline, root: Path | str) -> Pipeline:
    """``p`` with partitions over the copies of its sample data recorded in its folder of the
    lake ``root`` (``p`` itself when they are its declared ones).

    >>> from pipelines.examples.flights import pipeline
    >>> loaded_pipeline(pipeline, Path("/nonexistent")) is pipeline
    True
    """
    partitions = p.partitions.for_copies(loaded_copies(p.lake(root)))
    return p if partitions is p.partitions else p.model_copy(update={"partitions": partitions})
