"""A view as a time series: what the views page charts.

All times are epoch milliseconds (UTC). Rows come from the merged frame, so each point says
whether the batch or the speed layer produced it.

* :func:`view_series`: one numeric field of the value per window (``x`` = window start; a table
  view's ``x`` is the row timestamp), combined over keys, by source. Beyond ``max_points``
  points it is aggregated per coarser bucket (:data:`BUCKETS`: hour, day, week, then whole
  weeks), ``agg`` per bucket (:func:`default_agg`: ``sum`` for tumbling windows, ``mean`` for
  overlapping hopping windows and for fields that are means).
* :func:`session_series`: a session-window view as sessions started per bucket and their mean
  duration (minutes), by source (a sum of the sessions' values has no clear meaning).
* :func:`top_keys`: a table view's keys ranked by a field (its current value per key).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field as dc_field
from numbers import Number
from typing import Any, Literal

import numpy as np
import orjson
import pandas as pd

from serving.errors import ServingError, UnknownKeyError

__all__ = [
    "AGGREGATES",
    "BUCKETS",
    "Bucket",
    "Series",
    "SessionSeries",
    "TopKeys",
    "UnknownFieldError",
    "choose_bucket",
    "default_agg",
    "field_values",
    "numeric_fields",
    "session_series",
    "top_keys",
    "view_series",
]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
WEEK_MS = 7 * DAY_MS
#: Weeks start on Mondays, 00:00 UTC (1970-01-05 was a Monday).
WEEK_ORIGIN_MS = 4 * DAY_MS

Aggregate = Literal["sum", "mean", "max", "min"]
#: How the points of one bucket are combined.
AGGREGATES: tuple[str, ...] = ("sum", "mean", "max", "min")


@dataclass(frozen=True)
class Bucket:
    """A time bucket: ``[origin + i * ms, origin + (i + 1) * ms)`` for integer ``i``.

    Attributes:
        name: ``"hour"``, ``"day"``, ``"week"`` or ``"N weeks"``.
        ms: the bucket length (ms).
        origin: an instant where a bucket starts (epoch ms; weeks start on Mondays).
    """

    name: str
    ms: int
    origin: int = 0

    def floor(self, x: np.ndarray) -> np.ndarray:
        """The start (epoch ms) of the bucket holding each ``x`` (epoch ms, int64)."""
        return self.origin + (x - self.origin) // self.ms * self.ms


#: The buckets tried, finest first, when a series has more points than asked for (only those
#: coarser than the view's own windows); beyond a week, whole numbers of weeks.
BUCKETS: tuple[Bucket, ...] = (Bucket("hour", HOUR_MS), Bucket("day", DAY_MS),
                               Bucket("week", WEEK_MS, WEEK_ORIGIN_MS))


class UnknownFieldError(ServingError, LookupError):
    """A value field that the view's values do not hold as a number.

    Attributes:
        view: the view name.
        field: the requested field.
        known: the numeric fields the view does hold.
    """

    def __init__(self, view: str, field: str, known: list[str]) -> None:
        self.view, self.field, self.known = view, field, known
        super().__init__(f"unknown field {field!r} in view {view!r}; numeric fields: "
                         f"{', '.join(known) or '(none)'}")

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class Series:
    """Points of one field, split by source.

    Attributes:
        field: the value field (``"rows"``: the number of rows, for values without a numeric
            field).
        x_kind: ``"window_start"`` or ``"timestamp"``.
        points: ``{source: [(x epoch ms, y), ...]}`` sorted by ``x``; sources ``batch`` and
            ``speed`` (``unknown`` for rows without a source). With a ``bucket``, ``x`` is the
            bucket start and ``y`` the ``agg`` of the points in it.
        bucket: the bucket the points were aggregated per; ``None``: one point per window
            (per timestamp for a table) as stored.
        agg: how the points of a bucket were combined (meaningful with a ``bucket``).
        key_agg: how the keys' values of one window were combined (``sum``, or ``mean`` for a
            field that is a mean).
        windows: the number of points before bucketing (distinct source and ``x``).
    """

    field: str
    x_kind: str
    points: dict[str, list[tuple[int, float]]]
    bucket: Bucket | None = None
    agg: str = "sum"
    key_agg: str = "sum"
    windows: int = 0

    @property
    def n_points(self) -> int:
        """The number of points drawn (all sources)."""
        return sum(len(p) for p in self.points.values())


@dataclass(frozen=True)
class SessionSeries:
    """A session-window view per bucket, by source (``x`` = bucket start, epoch ms).

    Attributes:
        bucket: the bucket (an hour at the finest).
        sessions: ``{source: [(x, sessions starting in the bucket), ...]}``.
        duration_min: ``{source: [(x, mean duration of those sessions in minutes), ...]}``
            (a session's duration is ``window_end - window_start``).
        total: the number of sessions in the range.
    """

    bucket: Bucket
    sessions: dict[str, list[tuple[int, float]]]
    duration_min: dict[str, list[tuple[int, float]]]
    total: int

    @property
    def n_points(self) -> int:
        """The number of buckets drawn per chart (all sources)."""
        return sum(len(p) for p in self.sessions.values())


@dataclass(frozen=True)
class TopKeys:
    """The keys of a table view ranked by a field.

    Attributes:
        field: the field ranked (``None``: the view has no numeric field; ``rows`` are then
            the most recently updated rows).
        rows: ``[{"key", "y" (float or None), "value" (JSON text), "timestamp" (epoch ms),
            "source"}, ...]``, best first.
        total: the number of keys.
    """

    field: str | None
    rows: list[dict[str, Any]] = dc_field(default_factory=list)
    total: int = 0


def _parse(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return orjson.loads(text)
    except (orjson.JSONDecodeError, ValueError):
        try:  # what orjson refuses and the standard library reads (NaN, big integers)
            return json.loads(text)
        except json.JSONDecodeError:
            return None


def _is_number(v: Any) -> bool:
    return isinstance(v, Number) and not isinstance(v, bool)


def _is_mean(field: str) -> bool:
    f = field.lower()
    return f.startswith(("mean", "avg", "average")) or f.endswith(("_mean", "_avg"))


def numeric_fields(frame: pd.DataFrame, sample: int = 200) -> list[str]:
    """Top-level fields whose value is a number in the first ``sample`` rows, in the order
    they first appear (a bare numeric value is the field ``"value"``)."""
    out: list[str] = []
    for text in frame["value"].head(sample):
        v = _parse(text)
        if _is_number(v) and "value" not in out:
            out.append("value")
        elif isinstance(v, dict):
            out.extend(k for k, x in v.items() if _is_number(x) and k not in out)
    return out


def field_values(frame: pd.DataFrame, field: str) -> np.ndarray:
    """``field`` of each row's JSON value as float64, NaN where it is not a number (``"rows"``:
    1 per row; ``"value"``: a bare numeric value). Aligned with ``frame``'s rows."""
    if field == "rows":
        return np.ones(len(frame))
    out = np.full(len(frame), np.nan)
    for i, text in enumerate(frame["value"].to_numpy(dtype=object)):
        v = _parse(text)
        if field == "value":
            if _is_number(v):
                out[i] = v
        elif isinstance(v, dict):
            x = v.get(field)
            if _is_number(x):
                out[i] = x
    return out


def default_agg(window_kind: str | None, field: str) -> str:
    """How a bucket combines its points by default: ``mean`` for a field that is a mean (its
    name starts with mean/avg) and for hopping windows (they overlap: a sum would count each
    record size/advance times), else ``sum``."""
    return "mean" if window_kind == "hopping" or _is_mean(field) else "sum"


def resolve_field(view: str, frame: pd.DataFrame, field: str | None) -> str:
    """``field``, or the default (``count`` if numeric, else the first numeric field, else
    ``"rows"``).

    Raises:
        UnknownFieldError: ``field`` is not a numeric field of the values.
    """
    fields = numeric_fields(frame)
    if field is None:
        return "count" if "count" in fields else (fields[0] if fields else "rows")
    if field != "rows" and field not in fields:
        raise UnknownFieldError(view, field, fields)
    return field


def _in_range(x: np.ndarray, from_ms: int | None, to_ms: int | None) -> np.ndarray:
    keep = np.ones(len(x), dtype=bool)
    if from_ms is not None:
        keep &= x >= from_ms
    if to_ms is not None:
        keep &= x <= to_ms
    return keep


def _xs(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """``column`` as int64 epoch ms and the mask of its non-null rows."""
    col = frame[column]
    present = col.notna().to_numpy()
    return col.fillna(0).to_numpy(dtype="int64"), present


def choose_bucket(xs: Sequence[np.ndarray], max_points: int, finer_than_ms: int = 0,
                  at_least: Bucket | None = None) -> Bucket | None:
    """The finest bucket that leaves at most ``max_points`` points over all ``xs`` (one array
    of distinct epoch-ms ``x`` per source), among :data:`BUCKETS` coarser than
    ``finer_than_ms`` (the view's own step) and no finer than ``at_least``; beyond a week,
    whole numbers of weeks. ``None`` when the points fit as they are and no ``at_least`` is
    asked.

    Raises:
        ValueError: ``max_points`` < 1.
    """
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, not {max_points}")
    if at_least is None and sum(len(x) for x in xs) <= max_points:
        return None

    def count(bucket: Bucket) -> int:
        return sum(len(np.unique(bucket.floor(x))) for x in xs)

    for bucket in BUCKETS:
        if bucket.ms <= finer_than_ms or (at_least is not None and bucket.ms < at_least.ms):
            continue
        if count(bucket) <= max_points:
            return bucket
    weeks = max(2, math.ceil(count(BUCKETS[-1]) / max_points))
    while True:  # ends: one bucket per source at the latest (every x in one bucket)
        bucket = Bucket(f"{weeks} weeks", weeks * WEEK_MS, WEEK_ORIGIN_MS)
        if count(bucket) <= max(max_points, len(xs)):
            return bucket
        weeks = max(weeks + 1, int(weeks * 1.25))


def _by_source(df: pd.DataFrame, y: str) -> dict[str, list[tuple[int, float]]]:
    points: dict[str, list[tuple[int, float]]] = {}
    for source, x, v in df[["source", "x", y]].itertuples(index=False):
        points.setdefault(str(source), []).append((int(x), float(v)))
    return points


def view_series(view: str, frame: pd.DataFrame, windowed: bool, field: str | None = None,
                key: str | None = None, *, window_kind: str | None = None, step_ms: int = 0,
                from_ms: int | None = None, to_ms: int | None = None, max_points: int | None = None,
                agg: str | None = None, values: np.ndarray | None = None) -> Series:
    """``field`` of the rows of ``frame`` (a served frame, see ``serving.views.frames``) per
    ``x`` and source, combined over keys (sum; mean for a field that is a mean); only the
    rows of ``key`` when given; downsampled beyond ``max_points``.

    Args:
        view: the view name (for error messages).
        frame: the served frame (``key, window_start, window_end, value, timestamp, source``).
        windowed: ``x`` is ``window_start`` when true, else ``timestamp``.
        field: the value field; ``None``: ``count`` if numeric, else the first numeric field,
            else ``"rows"`` (the number of rows).
        key: one key (default: every key).
        window_kind: the view's window kind (picks the default ``agg``).
        step_ms: the distance between the view's windows (advance, ms): buckets start coarser.
        from_ms, to_ms: keep the points whose ``x`` lies in ``[from_ms, to_ms]`` (epoch ms,
            inclusive; ``None``: unbounded).
        max_points: the most points drawn (all sources); ``None``: no limit, no bucketing.
        agg: how a bucket combines its points (:data:`AGGREGATES`); ``None``: :func:`default_agg`.
        values: ``field_values(frame, field)`` when the caller has it (a cache).

    Raises:
        UnknownFieldError: ``field`` is not a numeric field of the values.
        UnknownKeyError: ``key`` has no row.
        ValueError: ``agg`` is not one of :data:`AGGREGATES`, or ``max_points`` < 1.
    """
    if agg is not None and agg not in AGGREGATES:
        raise ValueError(f"unknown aggregate {agg!r}; expected one of {', '.join(AGGREGATES)}")
    if key is not None:
        keep = (frame["key"] == key).to_numpy()
        if not keep.any():
            raise UnknownKeyError(view, key)
        frame = frame[keep]
        if values is not None:
            values = values[keep]
    field = resolve_field(view, frame, field)
    x_kind = "window_start" if windowed else "timestamp"
    y = field_values(frame, field) if values is None else values
    x, present = _xs(frame, x_kind)
    keep = present & ~np.isnan(y) & _in_range(x, from_ms, to_ms)
    key_agg = "mean" if _is_mean(field) else "sum"
    data = pd.DataFrame({"source": frame["source"].fillna("unknown").to_numpy()[keep], "x": x[keep],
                         "y": y[keep]})
    combined = data.groupby(["source", "x"], sort=True)["y"].agg(key_agg).reset_index()
    agg = agg or default_agg(window_kind, field)
    bucket = None
    if max_points is not None:
        xs = [g["x"].to_numpy() for _, g in combined.groupby("source")]
        bucket = choose_bucket(xs, max_points, finer_than_ms=step_ms)
    if bucket is None:
        points = _by_source(combined, "y")
    else:
        combined["x"] = bucket.floor(combined["x"].to_numpy())
        points = _by_source(combined.groupby(["source", "x"], sort=True)["y"].agg(agg).reset_index(), "y")
    return Series(field=field, x_kind=x_kind, points=points, bucket=bucket, agg=agg, key_agg=key_agg,
                  windows=len(combined))


def session_series(view: str, frame: pd.DataFrame, key: str | None = None, *, from_ms: int | None = None,
                   to_ms: int | None = None, max_points: int = 1000) -> SessionSeries:
    """Sessions started per bucket and their mean duration, by source, for the sessions of
    ``frame`` (a session view's served frame) whose start lies in ``[from_ms, to_ms]`` (epoch
    ms, inclusive; ``None``: unbounded). The bucket is the finest of :data:`BUCKETS`, an hour
    at least, that leaves at most ``max_points`` buckets (all sources).

    Raises:
        UnknownKeyError: ``key`` has no row.
        ValueError: ``max_points`` < 1.
    """
    if key is not None:
        frame = frame[frame["key"] == key]
        if frame.empty:
            raise UnknownKeyError(view, key)
    start, has_start = _xs(frame, "window_start")
    end, has_end = _xs(frame, "window_end")
    keep = has_start & has_end & _in_range(start, from_ms, to_ms)
    data = pd.DataFrame({"source": frame["source"].fillna("unknown").to_numpy()[keep], "x": start[keep],
                         "minutes": (end[keep] - start[keep]) / 60_000})
    xs = [np.unique(g["x"].to_numpy()) for _, g in data.groupby("source")]
    bucket = choose_bucket(xs, max_points, at_least=BUCKETS[0])
    assert bucket is not None
    data["x"] = bucket.floor(data["x"].to_numpy())
    per = data.groupby(["source", "x"], sort=True)["minutes"].agg(["size", "mean"]).reset_index()
    return SessionSeries(bucket=bucket, sessions=_by_source(per, "size"), duration_min=_by_source(per, "mean"),
                         total=len(data))


def top_keys(view: str, frame: pd.DataFrame, field: str | None = None, n: int = 20,
             values: np.ndarray | None = None) -> TopKeys:
    """The ``n`` keys of a table view (one current row per key) with the largest ``field``;
    with no numeric field in the values (and ``field`` not given), the ``n`` most recently
    updated rows.

    Raises:
        UnknownFieldError: ``field`` is not a numeric field of the values.
    """
    fields = numeric_fields(frame)
    if field is None:
        field = "count" if "count" in fields else (fields[0] if fields else None)
    elif field not in fields:
        raise UnknownFieldError(view, field, fields)
    out = frame[["key", "value", "timestamp", "source"]].copy()
    if field is None:
        out["y"] = np.nan
        out = out.sort_values(["timestamp", "key"], ascending=[False, True], kind="stable")
    else:
        out["y"] = field_values(frame, field) if values is None else values
        out = out.dropna(subset=["y"]).sort_values(["y", "key"], ascending=[False, True], kind="stable")
    rows = [{"key": k, "y": None if pd.isna(y) else float(y), "value": v, "timestamp": int(ts),
             "source": s if isinstance(s, str) else "unknown"}
            for k, v, ts, s, y in out.head(n)[["key", "value", "timestamp", "source", "y"]].itertuples(index=False)]
    return TopKeys(field=field, rows=rows, total=int(frame["key"].nunique()))
