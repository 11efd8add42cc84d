"""Pieces of the main job that need neither a broker nor Spark."""

from __future__ import annotations


import pandas as pd
import pytest

from pipelines.examples.flights import pipeline as flights
from pipelines.examples.flights.topology import build_topology
from pipelines.speed.service import LateRecord, late_exclusions, metric_total, new_application_id

VIEW_SPECS = flights.view_specs

H = 3_600_000


def test_application_ids_are_fresh() -> None:
    a, b = new_application_id(flights.run_app_id_prefix), new_application_id(flights.run_app_id_prefix)
    assert a != b and a.startswith("duet-flights-run-")


def test_late_exclusions_time_windows() -> None:
    late = [LateRecord("departures_hourly", "JFK", 10 * H + 5), LateRecord("same_tz_hourly", "JFK", 3 * H)]
    got = late_exclusions(VIEW_SPECS["departures_hourly"], flights.windows_of("departures_hourly"), late)
    assert got == {("JFK", 10 * H)}
    hopping = late_exclusions(VIEW_SPECS["seats_by_dest_daily"], flights.windows_of("seats_by_dest_daily"),
                              [LateRecord("seats_by_dest_daily", "LAX", 30 * H)])
    assert len(hopping) == 24 and ("LAX", 30 * H) in hopping and ("LAX", 7 * H) in hopping


def test_late_exclusions_sessions_touching_the_record() -> None:
    gap = 4 * H
    speed = pd.DataFrame({"key": ["N1", "N1", "N1", "N2"], "window_start": [0, 10 * H, 30 * H, 0],
                          "window_end": [2 * H, 12 * H, 31 * H, H]})
    batch = pd.DataFrame({"key": ["N1"], "window_start": [0], "window_end": [12 * H]})
    late = [LateRecord("plane_duty_sessions", "N1", 6 * H)]
    got = late_exclusions(VIEW_SPECS["plane_duty_sessions"], flights.windows_of("plane_duty_sessions"), late,
                          [batch, speed])
    assert got == {("N1", 0), ("N1", 10 * H)}
    assert gap == VIEW_SPECS["plane_duty_sessions"].gap_ms


def test_the_flights_topology_reports_late_records_per_store() -> None:
    """The runtime names each late record's store, key and timestamp (what
    ``late_exclusions`` needs): a flight two days behind the stream time misses its
    departures and seats windows (grace 2 h) and its plane's session (no airports loaded:
    its destination's time zone is unknown, so the same-tz view never sees it)."""
    from speed_layer.testing import TopologyTestDriver

    def flight(day: int, hour: int, tailnum: str) -> dict[str, object]:
        return {"origin": "EWR", "dest": "BOS", "carrier": "UA", "tailnum": tailnum, "dep_time": 600,
                "time_hour": f"2013-01-{day:02d}T{hour:02d}:00:00Z", "minute": 0}

    with TopologyTestDriver(build_topology()) as d:
        flights = d.create_input_topic("flights")
        flights.pipe_input("N1", flight(3, 10, "N1"))
        flights.pipe_input("N2", flight(1, 10, "N2"))  # 2 days late
        late = d.metrics.late_records
    ts = 1357034400000  # 2013-01-01T10:00Z
    assert late == {("departures_hourly", "EWR", ts), ("seats_by_dest_daily", "BOS", ts), ("plane_duty_sessions", "N2", ts)}


def test_metric_total_flat_and_nested() -> None:
    assert metric_total({"dropped-records-total": 3}, "dropped-records-total") == 3
    assert metric_total({"0_0": {"dropped-records": 2}, "0_1": {"dropped-records": 5}}, "dropped-records") == 7
    assert metric_total({}, "x") == 0


def test_replay_latency_quantiles() -> None:
    from pipelines.produce.replay import ReplayStats

    stats = ReplayStats(latencies_s=[0.1 * i for i in range(1, 101)])
    assert stats.latency(0.5) == pytest.approx(5.0, abs=0.11)
    assert stats.latency(1.0) == pytest.approx(10.0)
    assert ReplayStats().latency(0.5) is None
