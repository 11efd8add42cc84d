"""Dagster's catalog tells what the lake holds (issue 41, item 6): after ``duet run``, the
instance of duet's ``DAGSTER_HOME`` has every daily partition the run's batch views fall on
materialized, the ``gx_suite`` check of each view evaluated, and the raw and published assets
materialized, as runless asset events under the asset keys of :mod:`pipelines.dagster`. Here
the events a lake write makes (broker-free); after a real ``duet run``: ``test_embedded_run.py``."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pytest

from pipelines.dagster.catalog import lake_write_events
from pipelines.dagster.keys import CHECK_NAME, publish_key, raw_key, view_asset_key
from pipelines.examples.flights import pipeline as flights  # not named "pipeline": a module attribute so named becomes its reference

pytestmark = [pytest.mark.timeout(900)]


class _Result:
    """A GX result's shape as the catalog reads it (``success``, ``results``)."""

    def __init__(self, success: bool, failed: list[tuple[str, str]]) -> None:
        self.success = success
        self.results = [type("R", (), {"success": False, "type": t, "column": c})() for t, c in failed]


def test_a_view_is_materialized_on_the_days_of_its_rows_inside_the_partitions() -> None:
    day = 86_400_000
    jan1 = 1356998400000  # 2013-01-01T00:00Z
    frame = pd.DataFrame({"key": ["EWR", "EWR", "JFK", "LGA"], "window_start": [jan1, jan1 + 3_600_000, jan1 + day,
                                                                                jan1 - day],  # 2012: no partition
                          "window_end": [0, 0, 0, 0], "value": ["{}"] * 4, "timestamp": [0] * 4})
    events = lake_write_events(flights, "duet run", {"departures_hourly": frame},
                               {"departures_hourly": _Result(False, [("expect_x", "value.count")])}, None)
    mats = [e for e in events if isinstance(e, dg.AssetMaterialization)
            and e.asset_key == view_asset_key(flights, "departures_hourly")]
    assert [(m.partition, m.metadata["day_windows"].value) for m in mats] == [("2013-01-01", 2), ("2013-01-02", 1)]
    checks = [e for e in events if isinstance(e, dg.AssetCheckEvaluation)]
    assert len(checks) == 1 and not checks[0].passed and checks[0].check_name == CHECK_NAME
    assert checks[0].metadata["failed"].value == "expect_x(value.count)"
    assert {e.asset_key for e in events if isinstance(e, dg.AssetMaterialization) and e.partition is None} == {
        raw_key(flights, t) for t in flights.archived_topics}
    assert not any(e.asset_key == publish_key(flights) for e in events)  # nothing published
