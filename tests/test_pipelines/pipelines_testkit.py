"""Helpers shared by the pipelines tests: a tiny batch view in the contract layout.

A plain module, not ``conftest``: test modules import it by name, and another folder's
``conftest`` module could shadow that name."""

from __future__ import annotations

import json
from pathlib import Path


#: 2013-01-01T10:00Z, an hour with departures
HOUR0 = 1357034400000
HOUR_MS = 3_600_000


def departures_rows(mean_delay: float = 12.5) -> list[dict[str, object]]:
    """Two windows of ``departures_hourly`` in the contract layout (``views/<store>``)."""
    rows = []
    for i, origin in enumerate(("EWR", "JFK")):
        start = HOUR0 + i * HOUR_MS
        value = {"count": 3, "cancelled": 1, "dep_delay_sum": 25, "dep_delay_n": 2, "mean_dep_delay": mean_delay}
        rows.append({"key": origin, "window_start": start, "window_end": start + HOUR_MS,
                     "value": json.dumps(value), "timestamp": start + 60_000})
    return rows


def write_batch_view(lake: Path, store: str, rows: list[dict[str, object]]) -> Path:
    """Write ``rows`` as the Delta table ``<lake>/views/<store>`` (delta-rs)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    schema = pa.schema([("key", pa.string()), ("window_start", pa.int64()), ("window_end", pa.int64()),
                        ("value", pa.string()), ("timestamp", pa.int64())])
    path = lake / "views" / store
    path.parent.mkdir(parents=True, exist_ok=True)
    write_deltalake(str(path), pa.Table.from_pylist(rows, schema=schema), mode="overwrite")
    return path


