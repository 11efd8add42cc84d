"""Publish merged views to ``<lake>/serving/<view>`` (Delta) and the ``_views.json`` catalogue."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from batch_layer.delta.layout import LakeLayout
from batch_layer.delta.storage import delta_uri, storage_options
from serving.views.frames import to_arrow
from serving.views.merge import merge_view
from serving.views.model import ViewSpec, load_catalogue, save_catalogue

__all__ = ["WATERMARK_KEY", "served_view_path", "write_served_view", "publish"]

#: the commit-info key of a served view's Delta commit holding the batch watermark (epoch ms,
#: ``null``: no batch) the view was merged at: a version and its watermark are one snapshot
WATERMARK_KEY = "duet.batch_watermark_ms"


def served_view_path(lake: Path | str, view: str) -> Path | str:
    """``<lake>/serving/<view>`` (a ``Path``, or ``s3://...`` on an object store)."""
    return LakeLayout(lake).serving_view(view)


def write_served_view(lake: Path | str, view: str, merged: pd.DataFrame,
                      watermark_ms: int | None = None) -> int:
    """Overwrite ``<lake>/serving/<view>`` with ``merged`` (one new Delta version), recording
    ``watermark_ms`` (the batch watermark ``merged`` was merged at, epoch ms) in the commit
    info under :data:`WATERMARK_KEY`, so a reader takes the version and its watermark as one
    immutable snapshot (:class:`serving.views.index.ViewSnapshot`).

    Returns:
        The new Delta version of the table.
    """
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    path = served_view_path(lake, view)
    if isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
    write_deltalake(delta_uri(path), to_arrow(merged, with_source=True), mode="overwrite",
                    schema_mode="overwrite", storage_options=storage_options(path),
                    commit_properties=CommitProperties(custom_metadata={WATERMARK_KEY: watermark_ms}))
    return DeltaTable(delta_uri(path), storage_options=storage_options(path)).version()


def publish(
    lake: Path | str,
    specs: Iterable[ViewSpec],
    batch_frames: Mapping[str, pd.DataFrame],
    speed_frames: Mapping[str, pd.DataFrame],
    watermark_ms: int | None,
) -> dict[str, int]:
    """Merge each view (:func:`merge_view`) and publish it.

    For every spec: ``merge_view(spec, batch_frames.get(name), speed_frames.get(name),
    watermark_ms)`` is written to ``<lake>/serving/<name>`` (Delta, ``mode="overwrite"``);
    then the catalogue ``<lake>/serving/_views.json`` is updated (views published earlier and
    not in ``specs`` keep their entries). A view missing from a frame mapping is treated as
    empty on that side.

    Args:
        lake: the lake root.
        specs: the views to publish.
        batch_frames / speed_frames: view frames by view name (contract columns, ms).
        watermark_ms: the batch watermark in epoch ms (``None``: no batch yet).

    Returns:
        ``{view: number of rows written}``.

    Raises:
        ValueError: on a malformed frame or duplicate view names in ``specs``.
        CatalogueError: if the existing catalogue is malformed.
    """
    specs = list(specs)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate view names in specs: {names}")
    catalogue = load_catalogue(lake)
    counts: dict[str, int] = {}
    for spec in specs:
        merged = merge_view(spec, batch_frames.get(spec.name), speed_frames.get(spec.name),
                            watermark_ms)
        write_served_view(lake, spec.name, merged, watermark_ms)
        counts[spec.name] = len(merged)
        catalogue[spec.name] = spec
    save_catalogue(lake, catalogue)
    return counts
