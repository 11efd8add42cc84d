"""A pandas reference of the flagship's four questions, written independently of the
topology (no speed_layer code): the ground truth the speed and batch layers are checked
against. Rows: ``{(key, window_start, window_end): value}`` with the value shapes of
``pipelines/examples/flights/topology.py``.
"""
from __future__ import annotations

import pandas as pd

HOUR = 3_600_000
DAY = 24 * HOUR
GAP = 4 * HOUR
NY = "America/New_York"


def enriched_frame(flights: list[dict], timestamps: list[int], planes: list[dict], airports: list[dict]) -> pd.DataFrame:
    f = pd.DataFrame(flights)
    f["ts"] = timestamps
    p = pd.DataFrame(planes)[["tailnum", "seats"]]
    a = pd.DataFrame(airports)[["faa", "tzone"]].rename(columns={"faa": "dest", "tzone": "dest_tz"})
    f = f.merge(p, on="tailnum", how="left").merge(a, on="dest", how="left")
    return f


def departures_hourly(f: pd.DataFrame) -> dict:
    g = f.assign(start=f.ts // HOUR * HOUR)
    out = {}
    for (origin, start), grp in g.groupby(["origin", "start"]):
        delays = grp["dep_delay"].dropna()
        n = int(len(delays))
        s = int(delays.sum()) if n else 0
        out[(origin, int(start), int(start) + HOUR)] = {
            "count": int(len(grp)),
            "cancelled": int(grp["dep_time"].isna().sum()),
            "dep_delay_sum": s,
            "dep_delay_n": n,
            "mean_dep_delay": s / n if n else None,
        }
    return out


def same_tz_hourly(f: pd.DataFrame) -> dict:
    g = f[f["dest_tz"] == NY]
    g = g.assign(start=g.ts // HOUR * HOUR)
    return {(o, int(s), int(s) + HOUR): int(n) for (o, s), n in g.groupby(["origin", "start"]).size().items()}


def seats_by_dest_daily(f: pd.DataFrame) -> dict:
    out: dict = {}
    for dest, ts, seats in zip(f["dest"], f["ts"], f["seats"].fillna(0)):
        last = ts // HOUR * HOUR  # the latest 1 h-aligned start containing ts
        for k in range(24):
            start = last - k * HOUR
            if start < 0 or start + DAY <= ts:
                continue
            key = (dest, int(start), int(start) + DAY)
            out[key] = out.get(key, 0) + int(seats)
    return out


def plane_duty_sessions(f: pd.DataFrame) -> dict:
    g = f[f["tailnum"].notna() & f["dep_time"].notna()].sort_values(["tailnum", "ts"])
    out = {}
    for tail, grp in g.groupby("tailnum"):
        ts = grp["ts"].tolist()
        air = grp["air_time"].fillna(0).astype(int).tolist()
        start = prev = ts[0]
        legs, total = 0, 0
        for t, a in zip(ts, air):
            if t - prev > GAP:
                out[(tail, start, prev)] = {"legs": legs, "air_time": total}
                start, legs, total = t, 0, 0
            legs += 1
            total += a
            prev = t
        out[(tail, start, prev)] = {"legs": legs, "air_time": total}
    return out


def all_views(f: pd.DataFrame) -> dict[str, dict]:
    return {
        "departures_hourly": departures_hourly(f),
        "same_tz_hourly": same_tz_hourly(f),
        "seats_by_dest_daily": seats_by_dest_daily(f),
        "plane_duty_sessions": plane_duty_sessions(f),
    }
