"""Dagster assets run in process on a tiny lake, against the session's broker and real Spark."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from pipelines.dagster import KafkaResource, LakeResource, SparkResource, view_asset_key
from pipelines.examples.flights import pipeline as flights

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]


def _resources(bootstrap: str, root: Path) -> dict[str, object]:
    return {"kafka": KafkaResource(bootstrap_servers=bootstrap), "lake": LakeResource(path=str(root)),
            "spark": SparkResource()}


def test_raw_asset_archives_a_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    from pipelines.dagster.assets import raw_asset
    from pipelines.produce.load import produce_tables
    from pipelines.job.steps import input_record_count

    # appends the dimension tables (creates the topics if needed)
    produce_tables(flights, kafka_bootstrap, flights.sample_data(0))
    expected = input_record_count(kafka_bootstrap, ["airlines"])["airlines"]
    root = tmp_path / "lake"
    asset = raw_asset(flights, "airlines")
    assert asset.key == dg.AssetKey(["flights", "raw_airlines"])
    for added in (expected, 0):  # a second materialization adds nothing (idempotent by offset)
        res = dg.materialize([dg.AssetSpec(dg.AssetKey(["flights", "topic_airlines"])), asset],
                             resources=_resources(kafka_bootstrap, root), instance=dg.DagsterInstance.ephemeral())
        assert res.success
        (mat,) = res.asset_materializations_for_node(asset.node_def.name)
        assert mat.metadata["records_added"].value == added
        assert mat.metadata["offsets_added"].value == ({"0": [0, expected - 1]} if added else {})  # one partition
        assert mat.metadata["records"].value == expected
    assert (root / "flights" / "raw" / "airlines" / "_delta_log").is_dir()  # the pipeline's folder of the lake


@pytest.mark.spark
def test_batch_views_and_their_blocking_checks(kafka_bootstrap: str, tmp_path: Path) -> None:
    from pipelines.dagster.assets import batch_views, raw_assets
    from pipelines.dagster.checks import view_checks
    from pipelines.job.steps import load_data, reset_pipeline

    root = tmp_path / "lake"
    reset_pipeline(flights, kafka_bootstrap, flights.lake(root))
    load_data(flights, kafka_bootstrap, limit=300)
    resources = _resources(kafka_bootstrap, root)
    instance = dg.DagsterInstance.ephemeral()
    raws = raw_assets(flights)
    assert dg.materialize(raws, resources=resources, instance=instance).success

    res = dg.materialize(
        [*(dg.AssetSpec(a.key) for a in raws), batch_views(flights), *view_checks(flights)],
        partition_key="2013-01-01",
        resources=resources,
        instance=instance,
    )
    assert res.success
    mats = {m.materialization.asset_key: m.materialization for m in res.get_asset_materialization_events()}
    assert set(mats) == {view_asset_key(flights, v) for v in flights.view_names}
    dep = mats[view_asset_key(flights, "departures_hourly")].metadata
    assert dep["rows"].value > 0
    assert 0 < dep["day_windows"].value <= dep["rows"].value  # the 300 flights all leave on 2013-01-01
    assert dep["partitions"].value == "2013-01-01"
    # the records were ingested by the run before: this run's only day is the one it targets
    assert (dep["days_with_new_data"].value, dep["materialized_because"].value) == ("none", "the run targets it")
    evaluations = res.get_asset_check_evaluations()
    assert len(evaluations) == 4
    assert all(ev.passed for ev in evaluations), [(ev.asset_key, ev.metadata["failed"]) for ev in evaluations]
    assert (root / "flights" / "quality" / "departures_hourly.json").is_file()


def test_the_local_variant_loads_each_asking_pipeline_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No cluster configured: the run starts its own embedded broker (the one test that does:
    it is what the local variant is) and loads the sample of each pipeline whose assets ask
    for the servers, once per run."""
    from pipelines.dagster.assets import raw_asset
    from pipelines.examples.shop import pipeline as shop

    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    limit = 20
    assets = [raw_asset(shop, "products"), raw_asset(shop, "clicks"), raw_asset(shop, "orders"),
              raw_asset(flights, "airlines")]
    res = dg.materialize(assets, resources={"kafka": KafkaResource(embedded_limit=limit),
                                            "lake": LakeResource(path=str(tmp_path / "lake"))},
                         instance=dg.DagsterInstance.ephemeral())
    assert res.success
    records = {a.key.to_user_string(): res.asset_materializations_for_node(a.node_def.name)[0].metadata["records"].value
               for a in assets}
    sample = shop.sample_data(limit)
    assert records["shop/raw_products"] == len(sample.tables["products"])  # loaded once, not once per asset
    assert records["shop/raw_clicks"] + records["shop/raw_orders"] == limit
    assert records["flights/raw_airlines"] == len(flights.sample_data(0).tables["airlines"])
