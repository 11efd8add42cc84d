"""Column layout of view frames (docs/contracts.md) and their Arrow schemas.

A view frame has the columns ``key, window_start, window_end, value, timestamp``:

* ``key``: ``object`` (str), the table key;
* ``window_start`` / ``window_end``: ``Int64`` (nullable) epoch ms, null when not windowed;
* ``value``: ``object`` (str), the JSON of the aggregate;
* ``timestamp``: ``int64`` epoch ms, the record / row timestamp.

A merged (served) frame adds ``source``: ``"batch" | "speed"``.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

__all__ = [
    "VIEW_COLUMNS",
    "SERVED_COLUMNS",
    "VIEW_SCHEMA",
    "SERVED_SCHEMA",
    "empty_view_frame",
    "normalize_view_frame",
    "to_arrow",
]

VIEW_COLUMNS: list[str] = ["key", "window_start", "window_end", "value", "timestamp"]
SERVED_COLUMNS: list[str] = [*VIEW_COLUMNS, "source"]

VIEW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string()),
        pa.field("window_start", pa.int64()),
        pa.field("window_end", pa.int64()),
        pa.field("value", pa.string()),
        pa.field("timestamp", pa.int64()),
    ]
)
SERVED_SCHEMA = VIEW_SCHEMA.append(pa.field("source", pa.string()))


def empty_view_frame(with_source: bool = False) -> pd.DataFrame:
    """An empty frame with the view columns and dtypes (plus ``source`` if asked)."""
    return normalize_view_frame(pd.DataFrame(), with_source=with_source)


def normalize_view_frame(df: pd.DataFrame | None, with_source: bool = False) -> pd.DataFrame:
    """Return a copy of ``df`` with exactly the view columns in order and canonical dtypes.

    Missing ``window_start`` / ``window_end`` columns are added as nulls (non-windowed);
    extra columns are dropped.

    Raises:
        ValueError: if ``key``, ``value`` or ``timestamp`` is missing from a non-empty frame,
            or a ``timestamp`` is null.
    """
    cols = SERVED_COLUMNS if with_source else VIEW_COLUMNS
    if df is None:
        df = pd.DataFrame()
    out = pd.DataFrame(index=df.index)
    for col in cols:
        if col in df.columns:
            out[col] = df[col]
        elif col in ("window_start", "window_end") or len(df) == 0:
            out[col] = pd.Series([None] * len(df), index=df.index, dtype="object")
        else:
            raise ValueError(f"view frame lacks column {col!r} (has {list(df.columns)})")
    out["key"] = out["key"].astype("object").where(out["key"].notna(), None)
    if pd.api.types.infer_dtype(out["key"], skipna=True) not in ("string", "empty"):
        out["key"] = out["key"].map(lambda k: k if k is None or isinstance(k, str) else str(k))
    out["window_start"] = pd.to_numeric(out["window_start"]).astype("Int64")
    out["window_end"] = pd.to_numeric(out["window_end"]).astype("Int64")
    out["value"] = out["value"].astype("object").where(out["value"].notna(), None)
    if out["timestamp"].isna().any():
        raise ValueError("view frame has null timestamps")
    out["timestamp"] = pd.to_numeric(out["timestamp"]).astype("int64")
    if with_source:
        out["source"] = out["source"].astype("object")
    return out.reset_index(drop=True)


def to_arrow(df: pd.DataFrame, with_source: bool = True) -> pa.Table:
    """Convert a (normalised) view frame to an Arrow table with the canonical schema."""
    schema = SERVED_SCHEMA if with_source else VIEW_SCHEMA
    df = normalize_view_frame(df, with_source=with_source)
    arrays = []
    for field in schema:
        col = df[field.name]
        if field.type == pa.int64():
            arrays.append(pa.array(col.astype("Int64"), type=pa.int64()))  # nulls kept (pandas' __arrow_array__)
        else:
            arrays.append(pa.array(col.to_list(), type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
