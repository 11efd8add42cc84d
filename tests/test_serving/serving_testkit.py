"""Shared constants and builders of the serving tests (imported by conftest and tests)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from serving.views import ViewSpec

T0 = 1356998400000  # 2013-01-01T00:00:00Z
MIN = 60_000
HOUR = 3_600_000


def frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """Rows ``(key, window_start, window_end, value, timestamp)`` -> a view frame (value dumped
    as JSON)."""
    return pd.DataFrame(
        [(k, ws, we, json.dumps(v), ts) for k, ws, we, v, ts in rows],
        columns=["key", "window_start", "window_end", "value", "timestamp"],
    )


TUMBLING = ViewSpec.tumbling("dep_counts", HOUR, grace_ms=10 * MIN)
SESSION = ViewSpec.session("sessions", gap_ms=30 * MIN)
TABLE = ViewSpec.table("latest")
WATERMARK = T0 + 5 * HOUR


def lake_frames() -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    """Batch and speed frames of the three test views."""
    batch = {
        "dep_counts": frame([
            ("EWR", T0 + 3 * HOUR, T0 + 4 * HOUR, {"count": 5, "mean_delay": 1.5}, T0 + 4 * HOUR - 1),
            ("EWR", T0 + 4 * HOUR, T0 + 5 * HOUR, {"count": 2, "mean_delay": 0.0}, T0 + 5 * HOUR - 1),
            ("JFK", T0 + 2 * HOUR, T0 + 3 * HOUR, {"count": 7, "mean_delay": -3.0}, T0 + 3 * HOUR - 1),
        ]),
        "sessions": frame([
            ("N14228", T0 + 1 * HOUR, T0 + 2 * HOUR, {"n": 3}, T0 + 2 * HOUR),
        ]),
        "latest": frame([
            ("UA", None, None, {"name": "United"}, T0 + HOUR),
            ("AA", None, None, {"name": "American"}, T0 + HOUR),
        ]),
    }
    speed = {
        "dep_counts": frame([
            ("EWR", T0 + 4 * HOUR, T0 + 5 * HOUR, {"count": 3, "mean_delay": 0.5}, T0 + 5 * HOUR - 1),
            ("EWR", T0 + 5 * HOUR, T0 + 6 * HOUR, {"count": 1, "mean_delay": 2.0}, T0 + 5 * HOUR + 1),
        ]),
        "sessions": frame([
            ("N14228", T0 + 4 * HOUR + 50 * MIN, T0 + 5 * HOUR, {"n": 2}, T0 + 5 * HOUR),
        ]),
        "latest": frame([
            ("UA", None, None, {"name": "United Air Lines"}, T0 + 6 * HOUR),
        ]),
    }
    return batch, speed
