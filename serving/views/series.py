"""A view as a time series: one numeric field of the value, summed per window, by source.

This is what the views page charts: for a windowed view, ``x`` is the window start (epoch
ms); for a table view (no windows), ``x`` is the row timestamp. Rows come from the merged
frame, so each point says whether the batch or the speed layer produced it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from numbers import Number
from typing import Any

import pandas as pd

from serving.errors import ServingError, UnknownKeyError

__all__ = ["Series", "UnknownFieldError", "numeric_fields", "view_series"]


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
        field: the value field summed (``"rows"``: the number of rows, for values without a
            numeric field).
        x_kind: ``"window_start"`` or ``"timestamp"``.
        points: ``{source: [(x epoch ms, y), ...]}`` sorted by ``x``; sources ``batch`` and
            ``speed`` (``unknown`` for rows without a source).
    """

    field: str
    x_kind: str
    points: dict[str, list[tuple[int, float]]]


def _parse(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _is_number(v: Any) -> bool:
    return isinstance(v, Number) and not isinstance(v, bool)


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


def view_series(view: str, frame: pd.DataFrame, windowed: bool, field: str | None = None,
                key: str | None = None) -> Series:
    """Sum ``field`` of the rows of ``frame`` (a served frame, see ``serving.views.frames``)
    per ``x`` and source; only the rows of ``key`` when given.

    Args:
        view: the view name (for error messages).
        frame: the served frame (``key, window_start, window_end, value, timestamp, source``).
        windowed: ``x`` is ``window_start`` when true, else ``timestamp``.
        field: the value field; ``None``: ``count`` if numeric, else the first numeric field,
            else ``"rows"`` (the number of rows).

    Raises:
        UnknownFieldError: ``field`` is not a numeric field of the values.
        UnknownKeyError: ``key`` has no row.
    """
    if key is not None:
        frame = frame[frame["key"] == key]
        if frame.empty:
            raise UnknownKeyError(view, key)
    fields = numeric_fields(frame)
    if field is None:
        field = "count" if "count" in fields else (fields[0] if fields else "rows")
    elif field != "rows" and field not in fields:
        raise UnknownFieldError(view, field, fields)
    x_kind = "window_start" if windowed else "timestamp"
    if field == "rows":
        y = pd.Series(1.0, index=frame.index)
    else:
        values = frame["value"].map(_parse)
        y = values.map(lambda v: v if field == "value" and _is_number(v)
                       else (v.get(field) if isinstance(v, dict) else None))
        y = pd.to_numeric(y, errors="coerce")
    data = pd.DataFrame({"x": frame[x_kind].astype("Int64"), "y": y,
                         "source": frame["source"].fillna("unknown")}).dropna(subset=["x", "y"])
    grouped = data.groupby(["source", "x"], sort=True)["y"].sum()
    points: dict[str, list[tuple[int, float]]] = {}
    for (source, x), total in grouped.items():
        points.setdefault(str(source), []).append((int(x), float(total)))
    return Series(field=field, x_kind=x_kind, points=points)
