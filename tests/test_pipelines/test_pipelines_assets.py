"""Dagster assets run in process on a tiny lake, against the session's broker and real Spark."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from pipelines.resources import KafkaResource, LakeResource, SparkResource

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]


def _resources(bootstrap: str, lake: Path) -> dict[str, object]:
    return {"kafka": KafkaResource(bootstrap_servers=bootstrap), "lake": LakeResource(path=str(lake)),
            "spark": SparkResource()}


def test_raw_asset_archives_a_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    from pipelines.assets.ingest import raw_asset
    from pipelines.steps import input_record_count
    from pipelines.replay import produce_tables

    produce_tables(kafka_bootstrap)  # appends the dimension tables (creates the topics if needed)
    expected = input_record_count(kafka_bootstrap, ["airlines"])["airlines"]
    lake = tmp_path / "lake"
    asset = raw_asset("airlines")
    for added in (expected, 0):  # a second materialization adds nothing (idempotent by offset)
        res = dg.materialize([asset], resources=_resources(kafka_bootstrap, lake),
                             instance=dg.DagsterInstance.ephemeral())
        assert res.success
        (mat,) = res.asset_materializations_for_node(asset.node_def.name)
        assert mat.metadata["records_added"].value == added
        assert mat.metadata["records"].value == expected
    assert (lake / "raw" / "airlines" / "_delta_log").is_dir()


@pytest.mark.spark
def test_batch_views_and_their_blocking_checks(kafka_bootstrap: str, tmp_path: Path) -> None:
    from pipelines.assets import RAW_ASSETS, batch_views
    from pipelines.checks import VIEW_CHECKS
    from pipelines.steps import load_data, reset_pipeline

    lake = tmp_path / "lake"
    reset_pipeline(kafka_bootstrap, lake)
    load_data(kafka_bootstrap, limit=300)
    resources = _resources(kafka_bootstrap, lake)
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize(RAW_ASSETS, resources=resources, instance=instance).success

    res = dg.materialize(
        [*(dg.AssetSpec(a.key) for a in RAW_ASSETS), batch_views, *VIEW_CHECKS],
        partition_key="2013-01-01",
        resources=resources,
        instance=instance,
    )
    assert res.success
    mats = {m.asset_key.to_user_string(): m for m in res.get_asset_materialization_events()
            for m in [m.materialization]}
    assert set(mats) == {"view_departures_hourly", "view_same_tz_hourly", "view_seats_by_dest_daily",
                         "view_plane_duty_sessions"}
    dep = mats["view_departures_hourly"].metadata
    assert dep["rows"].value > 0
    assert 0 < dep["windows_in_partitions"].value <= dep["rows"].value
    evaluations = res.get_asset_check_evaluations()
    assert len(evaluations) == 4
    assert all(ev.passed for ev in evaluations), [(ev.asset_key, ev.metadata["failed"]) for ev in evaluations]
    assert (lake / "quality" / "departures_hourly.json").is_file()
