"""The views page's series (``serving.views.series``) and key search, without a browser:
bucketing keeps every chart under its bound, the aggregates and defaults, sessions, top keys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.api.keysearch import search_keys
from serving.views.series import (
    DAY_MS,
    HOUR_MS,
    WEEK_MS,
    WEEK_ORIGIN_MS,
    choose_bucket,
    default_agg,
    field_values,
    session_series,
    top_keys,
    view_series,
)
from serving_testkit import T0, frame


def _served(rows: list[tuple], sources: list[str]) -> pd.DataFrame:
    df = frame(rows)
    df["source"] = sources
    return df


def _hourly(hours: int, keys: tuple[str, ...] = ("A", "B"), speed_from: int | None = None) -> pd.DataFrame:
    rows, sources = [], []
    for h in range(hours):
        for i, k in enumerate(keys):
            ws = T0 + h * HOUR_MS
            rows.append((k, ws, ws + HOUR_MS, {"count": 1 + i, "mean_delay": float(h % 5)}, ws + HOUR_MS - 1))
            sources.append("speed" if speed_from is not None and h >= speed_from else "batch")
    return _served(rows, sources)


def test_choose_bucket_takes_the_finest_that_fits() -> None:
    hours = T0 + np.arange(24 * 60) * HOUR_MS  # 60 days of hours
    assert choose_bucket([hours], 2000) is None
    assert choose_bucket([hours], 1000).name == "day"
    assert choose_bucket([hours], 1000, finer_than_ms=DAY_MS).name == "week"
    assert choose_bucket([hours[:100]], 1000, at_least=choose_bucket([hours], 1000)).name == "day"
    week = choose_bucket([hours], 30)
    assert week.name == "week" and week.origin == WEEK_ORIGIN_MS
    # weeks start on Mondays: 2013-01-01 was a Tuesday, its week started on 2012-12-31
    assert int(week.floor(np.array([T0]))[0]) == T0 - DAY_MS
    coarse = choose_bucket([hours], 3)
    assert coarse.name.endswith(" weeks") and coarse.ms % WEEK_MS == 0
    assert len(np.unique(coarse.floor(hours))) <= 3
    with pytest.raises(ValueError, match="max_points must be >= 1"):
        choose_bucket([hours], 0)


@settings(max_examples=40, deadline=None)
@given(hours=st.integers(1, 3000), max_points=st.integers(2, 1200), speed=st.integers(0, 3000))
def test_a_series_never_draws_more_than_asked(hours: int, max_points: int, speed: int) -> None:
    df = _hourly(hours, speed_from=speed if speed < hours else None)
    series = view_series("v", df, True, window_kind="tumbling", step_ms=HOUR_MS, max_points=max_points)
    assert series.n_points <= max_points
    assert series.windows == hours  # distinct (source, window): each hour is batch or speed
    # the sum over the whole range is the same at every resolution
    total = sum(y for pts in series.points.values() for _, y in pts)
    assert total == pytest.approx(3 * hours)


def test_bucket_aggregates_and_defaults() -> None:
    df = _hourly(24 * 3)
    by_day = view_series("v", df, True, field="count", window_kind="tumbling", step_ms=HOUR_MS, max_points=10)
    assert by_day.bucket.name == "day" and by_day.agg == "sum"
    assert by_day.points["batch"] == [(T0 + d * DAY_MS, 72.0) for d in range(3)]  # 24 h * (1 + 2)
    maxed = view_series("v", df, True, field="count", step_ms=HOUR_MS, max_points=10, agg="max")
    assert [y for _, y in maxed.points["batch"]] == [3.0, 3.0, 3.0]
    # a mean field: keys combined by mean, buckets by mean
    delay = view_series("v", df, True, field="mean_delay", window_kind="tumbling", step_ms=HOUR_MS, max_points=10)
    assert delay.key_agg == "mean" and delay.agg == "mean"
    assert delay.points["batch"][0][1] == pytest.approx(np.mean([h % 5 for h in range(24)]))
    assert default_agg("hopping", "seats") == "mean" and default_agg("tumbling", "count") == "sum"
    assert default_agg("tumbling", "avg_delay") == "mean" and default_agg(None, "dep_delay_mean") == "mean"
    with pytest.raises(ValueError, match="unknown aggregate 'median'"):
        view_series("v", df, True, agg="median")


def test_range_keeps_the_windows_starting_in_it() -> None:
    df = _hourly(48, speed_from=40)
    s = view_series("v", df, True, from_ms=T0 + 10 * HOUR_MS, to_ms=T0 + 41 * HOUR_MS, max_points=1000)
    assert s.bucket is None
    assert [x for x, _ in s.points["batch"]] == [T0 + h * HOUR_MS for h in range(10, 40)]
    assert [x for x, _ in s.points["speed"]] == [T0 + 40 * HOUR_MS, T0 + 41 * HOUR_MS]


def test_sessions_per_bucket_and_mean_duration() -> None:
    rows, sources = [], []
    for d in range(3):
        for p, minutes in enumerate((30, 90, 60)):
            start = T0 + d * DAY_MS + p * HOUR_MS
            rows.append((f"P{p}", start, start + minutes * 60_000, {"legs": 1}, start))
            sources.append("speed" if d == 2 and p > 0 else "batch")
    df = _served(rows, sources)
    s = session_series("v", df, max_points=5)
    assert s.bucket.name == "day" and s.total == 9
    assert s.sessions == {"batch": [(T0, 3.0), (T0 + DAY_MS, 3.0), (T0 + 2 * DAY_MS, 1.0)],
                          "speed": [(T0 + 2 * DAY_MS, 2.0)]}
    assert s.duration_min["batch"][0] == (T0, 60.0) and s.duration_min["speed"] == [(T0 + 2 * DAY_MS, 75.0)]
    hourly = session_series("v", df, key="P1", max_points=1000)
    assert hourly.bucket.name == "hour" and hourly.total == 3


def test_top_keys_and_field_values() -> None:
    df = _served([("a", None, None, {"n": 3}, 5), ("b", None, None, {"n": 9}, 4), ("c", None, None, {"n": True}, 9)],
                 ["batch", "speed", "batch"])
    top = top_keys("t", df, n=2)
    assert top.field == "n" and [r["key"] for r in top.rows] == ["b", "a"] and top.total == 3
    latest = top_keys("t", _served([("a", None, None, {"s": "x"}, 5), ("b", None, None, {"s": "y"}, 7)],
                                   ["batch", "batch"]))
    assert latest.field is None and [r["key"] for r in latest.rows] == ["b", "a"]
    values = field_values(_served([("a", 1, 2, 4, 1), ("b", 1, 2, {"n": 1}, 1), ("c", 1, 2, "oops", 1)],
                                  ["batch"] * 3), "value")
    assert values[0] == 4 and np.isnan(values[1:]).all()


def test_search_keys_prefix_first_ignoring_case() -> None:
    keys = ["A11", "B11x", "N11", "n110", "X"]
    assert search_keys(keys, "n11") == (2, ["N11", "n110"])
    assert search_keys(keys, "11") == (4, ["A11", "B11x", "N11", "n110"])
    assert search_keys(keys, "1", limit=2, offset=0) == (4, ["A11", "B11x"])
    assert search_keys(keys, "1", limit=2, offset=1) == (4, ["B11x", "N11"])
    assert search_keys(keys, "") == (5, keys) and search_keys(keys, "zz") == (0, [])
