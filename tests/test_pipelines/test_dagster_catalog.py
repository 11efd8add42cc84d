"""Dagster's catalog tells what the lake holds (issue 41, item 6): after ``duet run``, the
instance of duet's ``DAGSTER_HOME`` has every daily partition the run's batch views fall on
materialized, the ``gx_suite`` check of each view evaluated, and the raw and published assets
materialized, as runless asset events under the asset keys of :mod:`pipelines.dagster`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from pipelines.dagster.catalog import lake_write_events, record_lake_write
from pipelines.dagster.keys import CHECK_NAME, publish_key, raw_key, view_asset_key
from pipelines.dagster.partitions import day_of
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


def test_after_duet_run_the_catalog_holds_the_runs_days_and_checks(tmp_path: Path) -> None:
    from pipelines.job.serving_steps import read_batch_views

    home = tmp_path / "dagster"
    env = {**os.environ, "DAGSTER_HOME": str(home), "DUET_PIPELINE": "", "KAFKA_BOOTSTRAP_SERVERS": ""}
    lake = tmp_path / "lake"
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--limit", "2000", "--lake", str(lake)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "catalog not updated" not in done.stderr, done.stderr
    frames = read_batch_views(flights, lake / "flights")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for view, df in frames.items():
            spec = flights.view_specs[view]
            days = {day_of(int(ms)) for ms in df["window_start" if spec.windowed else "timestamp"]}
            days = {d for d in days if d.startswith("2013-")}
            key = view_asset_key(flights, view)
            assert days and instance.get_materialized_partitions(key) == days, view
            record = instance.event_log_storage.get_latest_asset_check_execution_by_key(
                [dg.AssetCheckKey(key, CHECK_NAME)]).get(dg.AssetCheckKey(key, CHECK_NAME))
            assert record is not None and record.evaluation is not None and record.evaluation.passed, view
        assert instance.get_latest_materialization_event(publish_key(flights)) is not None
        for topic in flights.archived_topics:
            assert instance.get_latest_materialization_event(raw_key(flights, topic)) is not None, topic
        key = view_asset_key(flights, "departures_hourly")
        before = instance.get_materialized_partitions(key)
        record_lake_write(flights, "duet batch", frames, {}, None, instance=instance)  # again: the same days
        assert instance.get_materialized_partitions(key) == before
        first_day = {"departures_hourly": frames["departures_hourly"].nsmallest(1, "window_start")}
        record_lake_write(flights, "duet run", first_day, {}, None, instance=instance, rebuilt=True)
        assert instance.get_materialized_partitions(key) == {min(before)}  # a rebuilt lake: the old days go
