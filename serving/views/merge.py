"""Merge a batch view and a speed view into the served view (lambda architecture).

The batch layer saw every record up to the batch watermark ``W`` (the largest record
timestamp of its input, ms) and never drops late records, so it is authoritative for
everything that cannot change any more at stream time ``W``. The speed layer is authoritative
for the fresh edge.

Closure at ``W`` (Kafka Streams semantics, see :meth:`ViewSpec.close_time_ms`):

* tumbling / hopping window ``[start, end)``: closed iff ``end + grace_ms <= W``;
* session ``[start, end]`` (inclusive): closed iff ``end + gap_ms + grace_ms < W``
  (stream time must *pass* ``end + gap + grace``: a record at exactly ``end + gap`` would
  still merge into the session).

Rules of :func:`merge_view`:

1. Time windows (tumbling/hopping), identity ``(key, window_start)``:
   closed windows come from the batch only; a closed window found only in speed is dropped
   (the batch saw all of its data and produced nothing there, which only happens when the
   two layers had different inputs: the batch decision is kept). Open windows come from
   speed; an open window present only in the batch (the speed layer has not produced it) is
   served from the batch.
2. Sessions: closed batch sessions are kept; speed sessions that are closed, or that overlap
   (inclusive bounds) a closed batch session of the same key, are dropped (superseded by
   batch); open speed sessions are kept; open batch sessions are kept unless a kept speed
   session of the same key overlaps them.
3. Tables (not windowed), identity ``key``: a key comes from the batch unless the speed row's
   ``timestamp`` is newer than ``W`` (``timestamp > W``). A speed-only key whose timestamp is
   ``<= W`` is dropped, for the same reason as rule 1 (the batch saw that update; the key is
   absent from the batch, e.g. deleted).

``W = None`` (no batch has run) closes nothing: every speed row wins, batch rows fill in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from serving.views.frames import normalize_view_frame
from serving.views.model import ViewSpec

__all__ = ["merge_view", "agreement", "AgreementReport", "values_equal", "speed_read_start"]

#: ms a view topic is read from before the oldest record a merge can use (slack for a
#: processor after the aggregation that moves a timestamp a little back)
SPEED_READ_MARGIN_MS = 86_400_000

_REL_TOL = 1e-9


def _closed_mask(spec: ViewSpec, df: pd.DataFrame, watermark_ms: int | None) -> pd.Series:
    """Boolean mask of rows whose window is closed at ``watermark_ms``."""
    if watermark_ms is None or spec.window_kind is None or df.empty:
        return pd.Series(False, index=df.index, dtype=bool)
    end = df["window_end"].astype("Int64")
    if spec.window_kind == "session":
        assert spec.gap_ms is not None
        mask = (end + spec.gap_ms + spec.grace_ms) < watermark_ms
    else:
        mask = (end + spec.grace_ms) <= watermark_ms
    return mask.fillna(False).astype(bool)


def _overlapping(left: pd.DataFrame, right: pd.DataFrame) -> pd.Index:
    """Index labels of ``left`` rows overlapping (inclusive bounds) a ``right`` row of the
    same key."""
    if left.empty or right.empty:
        return pd.Index([])
    lhs = left[["key", "window_start", "window_end"]].reset_index(names="_lidx")
    rhs = right[["key", "window_start", "window_end"]]
    pairs = lhs.merge(rhs, on="key", suffixes=("", "_r"))
    hit = (pairs["window_start"] <= pairs["window_end_r"]) & (
        pairs["window_start_r"] <= pairs["window_end"]
    )
    return pd.Index(pairs.loc[hit.fillna(False).astype(bool), "_lidx"].unique())


def speed_read_start(spec: ViewSpec, batch_watermark_ms: int | None) -> int | None:
    """The timestamp (ms) from which :func:`merge_view` at ``batch_watermark_ms`` needs the
    speed view's topic (``read_view_topic(..., from_timestamp_ms=...)``), ``None``: all of it.

    The speed rows a merge at ``W`` keeps are the open ones: a time window open at ``W``
    starts after ``W - size - grace`` and its records are stamped at least at its start (the
    latest input timestamp, as Kafka Streams' windowed aggregations); a session open at ``W``
    ends at or after ``W - gap - grace`` and each of its records (puts and the tombstones of
    merged sessions) is stamped with its end; a table row is kept when its timestamp is after
    ``W``. So reading from ``W`` minus that lookback (and :data:`SPEED_READ_MARGIN_MS`) gives
    the merge of the full read: a recompute's publish costs the records of the fresh edge,
    not of the whole history (the soak's recomputes, each reading years of view topics, fell
    ever further behind; docs/live-serving.md)."""
    if batch_watermark_ms is None:
        return None
    if not spec.windowed:
        lookback = 0
    elif spec.window_kind == "session":
        lookback = int(spec.gap_ms or 0) + spec.grace_ms
    else:
        lookback = int(spec.size_ms or 0) + spec.grace_ms
    return batch_watermark_ms - lookback - SPEED_READ_MARGIN_MS


def _dedupe(spec: ViewSpec, df: pd.DataFrame) -> pd.DataFrame:
    subset = ["key", "window_start", "window_end"] if spec.windowed else ["key"]
    return df.drop_duplicates(subset=subset, keep="last")


def merge_view(
    spec: ViewSpec,
    batch: pd.DataFrame | None,
    speed: pd.DataFrame | None,
    batch_watermark_ms: int | None,
) -> pd.DataFrame:
    """Merge the batch and speed frames of one view (rules in the module docstring).

    Args:
        spec: the view description.
        batch: the batch view (``key, window_start, window_end, value, timestamp``; ms).
        speed: the speed view, same columns.
        batch_watermark_ms: the batch watermark ``W`` in epoch ms (``None``: no batch yet).

    Returns:
        The merged frame, columns ``key, window_start, window_end, value, timestamp, source``
        (``source`` is ``"batch"`` or ``"speed"``), sorted by ``key, window_start``
        (then ``window_end``), index reset.

    Raises:
        ValueError: if a frame lacks a required column or has null timestamps.
    """
    b = _dedupe(spec, normalize_view_frame(batch)).assign(source="batch")
    s = _dedupe(spec, normalize_view_frame(speed)).assign(source="speed")
    W = batch_watermark_ms

    if not spec.windowed:
        if W is None:
            s_new = s
        else:
            s_new = s[s["timestamp"] > W]
        b_rest = b[~b["key"].isin(s_new["key"])]
        parts = [b_rest, s_new]
    elif spec.window_kind == "session":
        b_closed_mask = _closed_mask(spec, b, W)
        b_closed, b_open = b[b_closed_mask], b[~b_closed_mask]
        s_open = s[~_closed_mask(spec, s, W)]
        s_open = s_open.drop(index=_overlapping(s_open, b_closed))
        b_open = b_open.drop(index=_overlapping(b_open, s_open))
        parts = [b_closed, s_open, b_open]
    else:
        b_closed_mask = _closed_mask(spec, b, W)
        b_closed, b_open = b[b_closed_mask], b[~b_closed_mask]
        s_open = s[~_closed_mask(spec, s, W)]
        s_ids = pd.MultiIndex.from_frame(s_open[["key", "window_start"]])
        b_ids = pd.MultiIndex.from_frame(b_open[["key", "window_start"]])
        b_open = b_open[~b_ids.isin(s_ids)]
        parts = [b_closed, s_open, b_open]

    parts = [p for p in parts if not p.empty]
    if not parts:
        return normalize_view_frame(None, with_source=True)
    out = pd.concat(parts, ignore_index=True)
    out = normalize_view_frame(out, with_source=True)
    out = out.sort_values(["key", "window_start", "window_end"], kind="stable", na_position="first")
    return out.reset_index(drop=True)


# -- agreement ---------------------------------------------------------------------------------


class AgreementReport(BaseModel):
    """How far batch and speed agree on the closed part of a view.

    Attributes:
        view: view name.
        compared: number of identities compared (closed windows present on either side, or
            table keys whose speed row is not newer than the watermark).
        equal: how many of them have equal values on both sides.
        ratio: ``equal / compared`` (1.0 when nothing was compared).
        differences: up to ``max_differences`` entries ``{"key", "window_start",
            "window_end", "batch", "speed", "reason", "explained"}``; reason is
            ``"missing_in_speed"``, ``"missing_in_batch"``, ``"window_end"`` or ``"value"``;
            values are parsed JSON; ``explained`` tells whether a counted loss names it.
        unexplained: how many of the differing identities no counted loss of the speed
            layer names (see :func:`agreement`'s ``explained``): a difference nothing
            accounts for, which ``duet run`` fails on.
    """

    model_config = ConfigDict(frozen=True)

    view: str
    compared: int
    equal: int
    ratio: float
    differences: list[dict[str, Any]]
    unexplained: int = 0

    def summary(self) -> str:
        """One line for logs: ``view: equal/compared agree (ratio %)``."""
        return (
            f"{self.view}: {self.equal}/{self.compared} agree ({self.ratio:.4%}), "
            f"{self.compared - self.equal} differ"
        )

    def __str__(self) -> str:
        return self.summary()


def _parse(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def values_equal(a: Any, b: Any, rel_tol: float = _REL_TOL) -> bool:
    """Deep equality of parsed JSON values; numbers compared with ``math.isclose(rel_tol)``
    (ints and floats compare numerically, booleans only with booleans, NaN equals NaN)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k], rel_tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_equal(x, y, rel_tol) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _nullable_ints(column: pd.Series) -> list[int | None]:
    """The integers of an integer (or integral float) column as Python ints, None for a
    missing value."""
    return pd.array(column, dtype="Int64").to_numpy(dtype=object, na_value=None).tolist()


def agreement(
    batch: pd.DataFrame | None,
    speed: pd.DataFrame | None,
    spec: ViewSpec,
    watermark_ms: int | None,
    exclude: set[tuple[str, int | None]] | None = None,
    max_differences: int = 100,
    explained: Sequence[tuple[int, int]] = (),
) -> AgreementReport:
    """Compare batch and speed results where the batch is authoritative.

    Windowed views: every identity ``(key, window_start)`` whose row is closed at
    ``watermark_ms`` on either side is compared (a side without the row is a difference;
    sessions also differ when their ``window_end`` differs). Tables: every key present on
    either side, except keys whose speed ``timestamp`` is newer than ``watermark_ms``.
    Values are compared as parsed JSON with a relative float tolerance of 1e-9.

    Args:
        batch, speed: view frames (contract columns, ms).
        spec: the view.
        watermark_ms: batch watermark (ms); ``None`` closes no window (tables: all compared).
        exclude: identities ``(key, window_start)`` to skip (``window_start`` ``None`` for
            tables), e.g. windows where the speed layer dropped late records.
        max_differences: cap on the number of differences listed (all are counted).
        explained: ``(first ms, last ms)`` time ranges of results the speed layer counted
            as lost (a stream-stream join's expired window records,
            ``KafkaStreams.expired_join_ranges()``): a differing window that overlaps one
            is explained; any other difference (and every table-view difference) is
            ``unexplained``. Late records and dead letters name theirs by exclusion
            (``exclude``) and by both layers dead-lettering the same records.

    Raises:
        ValueError: if a frame lacks a required column.
    """
    b = _dedupe(spec, normalize_view_frame(batch))
    s = _dedupe(spec, normalize_view_frame(speed))
    id_cols = ["key", "window_start"]

    if spec.windowed:
        closed_ids = pd.concat(
            [b.loc[_closed_mask(spec, b, watermark_ms), id_cols],
             s.loc[_closed_mask(spec, s, watermark_ms), id_cols]],
            ignore_index=True,
        ).drop_duplicates()
    else:
        newer = s["key"].iloc[:0] if watermark_ms is None else s.loc[s["timestamp"] > watermark_ms, "key"]
        keys = pd.concat([b["key"], s["key"]], ignore_index=True).drop_duplicates()
        keys = keys[~keys.isin(newer)].reset_index(drop=True)
        closed_ids = pd.DataFrame(
            {"key": keys, "window_start": pd.Series([pd.NA] * len(keys), dtype="Int64")}
        )

    bs = b.drop_duplicates(subset=id_cols, keep="last")
    ss = s.drop_duplicates(subset=id_cols, keep="last")
    joined = closed_ids.merge(bs, on=id_cols, how="left").merge(
        ss, on=id_cols, how="left", suffixes=("_b", "_s"), indicator=False
    )
    # presence markers: timestamp is never null in a real row
    has_b_col = joined["timestamp_b"].notna().tolist()
    has_s_col = joined["timestamp_s"].notna().tolist()
    starts = _nullable_ints(joined["window_start"])
    if spec.windowed:
        ends_b = _nullable_ints(joined["window_end_b"])
        ends_s = _nullable_ints(joined["window_end_s"])
    else:
        ends_b = ends_s = [None] * len(joined)
    compared = equal = unexplained = 0
    diffs: list[dict[str, Any]] = []
    rows = zip(joined["key"].tolist(), starts, has_b_col, has_s_col, ends_b, ends_s,
               joined["value_b"].tolist(), joined["value_s"].tolist())
    for key, start, has_b, has_s, end_b, end_s, raw_b, raw_s in rows:
        ident = (key, start)
        if exclude and ident in exclude:
            continue
        compared += 1
        if has_b and has_s and end_b == end_s and raw_b == raw_s and raw_b is not None:
            equal += 1  # the same JSON text: equal without parsing
            continue
        vb = _parse(raw_b) if has_b else None
        vs = _parse(raw_s) if has_s else None
        reason = None
        if not has_s:
            reason = "missing_in_speed"
        elif not has_b:
            reason = "missing_in_batch"
        elif end_b != end_s:
            reason = "window_end"
        elif not values_equal(vb, vs):
            reason = "value"
        if reason is None:
            equal += 1
            continue
        end = end_b if has_b else end_s
        named = _named(start, end, explained, spec.window_kind == "session")
        unexplained += not named
        if len(diffs) < max_differences:
            diffs.append(
                {
                    "key": key,
                    "window_start": start,
                    "window_end": end,
                    "batch": vb,
                    "speed": vs,
                    "reason": reason,
                    "explained": named,
                }
            )
    ratio = equal / compared if compared else 1.0
    return AgreementReport(view=spec.name, compared=compared, equal=equal, ratio=ratio,
                           differences=diffs, unexplained=unexplained)


def _named(start: int | None, end: int | None, ranges: Sequence[tuple[int, int]], session: bool) -> bool:
    """Whether the window from ``start`` to ``end`` (ms; end exclusive as Kafka's time
    windows, inclusive for a session; None for a table row) overlaps one of ``ranges``
    (``(first ms, last ms)``, inclusive)."""
    if start is None:
        return False
    last = start if end is None else (end if session else end - 1)
    return any(lo <= last and hi >= start for lo, hi in ranges)
