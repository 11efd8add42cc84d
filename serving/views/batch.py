"""Read the batch layer's outputs: ``<lake>/views/<store>`` and ``<lake>/views/_batch.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from batch_layer.delta.layout import LakeLayout
from batch_layer.delta.storage import delta_uri, storage_options
from serving._jsonio import read_json_object
from serving.errors import BatchViewNotFoundError, ServingError
from serving.views.frames import normalize_view_frame

__all__ = ["batch_view_path", "read_batch_view", "read_batch_info", "read_batch_watermark"]


def batch_view_path(lake: Path | str, store: str) -> Path | str:
    """``<lake>/views/<store>`` (a ``Path``, or ``s3://...`` on an object store)."""
    return LakeLayout(lake).batch_view(store)


def read_batch_view(lake: Path | str, store: str) -> pd.DataFrame:
    """Read the latest version of the batch view of ``store`` with delta-rs (no JVM).

    Returns:
        A view frame ``key, window_start, window_end, value, timestamp`` (ms).

    Raises:
        BatchViewNotFoundError: if ``<lake>/views/<store>`` is not a Delta table.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    path = batch_view_path(lake, store)
    try:
        table = DeltaTable(delta_uri(path), storage_options=storage_options(path)).to_pyarrow_table()
    except TableNotFoundError as exc:
        raise BatchViewNotFoundError(f"no batch view {store!r}: {path} is not a Delta table") from exc
    return normalize_view_frame(table.to_pandas(types_mapper=_types_mapper))


def _types_mapper(arrow_type: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_integer(arrow_type):
        return pd.Int64Dtype()
    return None


def read_batch_info(lake: Path | str) -> dict[str, Any] | None:
    """The content of ``<lake>/views/_batch.json`` or ``None`` when no batch has finished.

    Raises:
        ServingError: if the file exists but is not a JSON object.
    """
    return read_json_object(LakeLayout(lake).batch_info, ServingError)


def read_batch_watermark(lake: Path | str) -> int | None:
    """The batch watermark in epoch ms (largest record timestamp of the batch input), or
    ``None`` when ``<lake>/views/_batch.json`` does not exist or has no watermark.

    Raises:
        ServingError: if the file is malformed.
    """
    info = read_batch_info(lake)
    if info is None or info.get("watermark_ms") is None:
        return None
    try:
        return int(info["watermark_ms"])
    except (TypeError, ValueError) as exc:
        raise ServingError(f"bad watermark_ms in _batch.json: {info['watermark_ms']!r}") from exc
