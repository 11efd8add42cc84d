"""Two years of flights, small, on both cores: ``duet load --years 2 --limit 1500`` on the
session broker, then the main job on what it loaded with the speed layer as two processes
of one application (``--instances 2``), the batch layer on the session's Spark, the merged
views, the checks and the agreement of speed and batch."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.examples.flights import pipeline as flights

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.timeout(900)]

LIMIT = 1500
YEAR_2014_MS = 1388534400000  # 2014-01-01T00:00Z


def test_two_small_years_on_two_instances_agree(kafka_bootstrap: str, spark: object, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from pipelines.job.main_job import RunOptions, run_main_job
    from pipelines.job.steps import input_record_count, reset_pipeline

    root = tmp_path / "lake"
    lake = flights.lake(root)
    reset_pipeline(flights, kafka_bootstrap, lake)  # the session broker's flights topics start empty
    res = CliRunner().invoke(app, ["load", "--years", "2", "--limit", str(LIMIT), "--bootstrap", kafka_bootstrap,
                                   "--lake", str(root)])
    assert res.exit_code == 0, res.output
    assert "flights: 3,000" in res.output and "planes: 6,644" in res.output, res.output
    assert input_record_count(kafka_bootstrap, flights.input_topics) == {
        "flights": 2 * LIMIT, "planes": 2 * 3322, "airports": 1458, "airlines": 16}
    summary = run_main_job(flights, kafka_bootstrap, RunOptions(lake=lake, load=False, instances=2),
                           spark_factory=lambda: spark)
    assert summary.speed.instances == 2
    # each stage whole on one instance (pipelines.speed.placement); its cost measured for the next run
    assert sorted(sid for subs in summary.speed.placement for sid in subs) == [0, 1, 3, 4], summary.speed.placement
    assert set(summary.speed.subtopology_seconds) == {0, 1, 3, 4}
    # the group left to split the source stage over both instances dropped 34,963 records
    # as late here, one instance 122 (docs/instances.md)
    assert summary.speed.dropped_late < 1_000, summary.speed.dropped_late
    threads = summary.speed.metrics["threads"]  # each instance's stream thread
    assert {t.split("/")[0] for t in threads} == {"instance-1", "instance-2"}, list(threads)
    assert summary.records_in_by_topic["flights"] == 2 * LIMIT
    assert summary.checks == {v: True for v in flights.view_names}, summary.check_failures
    assert summary.agreement == {v: 1.0 for v in flights.view_names}, summary.differences
    assert all(summary.compared[v] > 0 for v in flights.view_names), summary.compared
    assert summary.ok
    raw = DeltaTable(str(lake / "raw" / "flights")).to_pandas(columns=["key", "timestamp"])
    first = raw[raw["timestamp"] < YEAR_2014_MS]
    second = raw[raw["timestamp"] >= YEAR_2014_MS]
    assert len(first) == len(second) == LIMIT
    assert not set(first["key"]) & set(second["key"])  # the second year's tail and flight numbers are its own
    assert all(k.endswith(b"-1") or int(k[2:]) > 10_000 for k in second["key"])
    served = DeltaTable(str(lake / "serving" / "departures_hourly")).to_pandas()
    starts = served["window_start"]
    assert (starts < YEAR_2014_MS).any() and (starts >= YEAR_2014_MS).any()  # windows of both years
