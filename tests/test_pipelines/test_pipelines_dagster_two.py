"""Two pipelines in ONE Dagster ``Definitions``: flights and shop (``pipelines.examples.shop``),
each materialized for a day (ingest, batch views, GX checks, publish) against the session's
broker and Spark, into one lake root (``<root>/flights``, ``<root>/shop``)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from pipelines.examples.flights import pipeline as flights
from pipelines.examples.shop import pipeline as shop
from pipelines.declaration.pipeline import Pipeline

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.timeout(900)]

#: events of each pipeline's sample loaded into the broker
LIMIT = 400


def _of(defs: dg.Definitions, p: Pipeline) -> tuple[list[object], list[dg.AssetChecksDefinition]]:
    """The asset definitions / specs and the checks of ``p`` in ``defs``."""
    def keys(a: object) -> set[dg.AssetKey]:
        return {a.key} if isinstance(a, dg.AssetSpec) else set(a.keys)  # type: ignore[attr-defined]

    assets = [a for a in defs.assets or [] if {k.path[0] for k in keys(a)} == {p.name}]
    checks = [c for c in defs.asset_checks or [] if {k.asset_key.path[0] for k in c.check_keys} == {p.name}]
    return assets, checks


def test_two_pipelines_materialize_a_day_each(kafka_bootstrap: str, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from pipelines.dagster import KafkaResource, LakeResource, SparkResource, definitions, view_asset_key
    from pipelines.dagster.keys import group, publish_key, raw_key, speed_key
    from pipelines.job.steps import load_data, reset_pipeline

    root = tmp_path / "lake"
    resources = {"kafka": KafkaResource(bootstrap_servers=kafka_bootstrap), "lake": LakeResource(path=str(root)),
                 "spark": SparkResource()}
    defs = definitions(flights, shop, resources=resources)
    dg.Definitions.validate_loadable(defs)
    instance = dg.DagsterInstance.ephemeral()
    for p in (flights, shop):
        reset_pipeline(p, kafka_bootstrap, p.lake(root))
        loaded = load_data(p, kafka_bootstrap, limit=LIMIT)
        assets, all_checks = _of(defs, p)
        # one GX check per view, plus speed_lag on the speed layer (observed, not materialized here)
        checks = [c for c in all_checks if all(k.asset_key != speed_key(p) for k in c.check_keys)]
        assert len(checks) == len(p.view_names) and len(all_checks) == len(p.view_names) + 1
        day = p.partitions.start.isoformat()  # the sample starts on the first day
        res = dg.materialize(
            [*assets, *checks],
            selection=dg.AssetSelection.groups(group(p, "ingest"), group(p, "batch"), group(p, "serving")),
            partition_key=day,
            resources=resources,
            instance=instance,
        )
        assert res.success, p.name
        mats = {e.materialization.asset_key: e.materialization for e in res.get_asset_materialization_events()}
        views = {view_asset_key(p, v) for v in p.view_names}
        raws = {raw_key(p, t) for t in p.archived_topics}
        assert set(mats) == raws | views | {publish_key(p)}, p.name
        for topic, n in loaded.items():  # every loaded record archived in the pipeline's folder
            assert mats[raw_key(p, topic)].metadata["records"].value == n
            assert DeltaTable(str(p.lake(root) / "raw" / topic)).to_pyarrow_dataset().count_rows() == n
        for key in views:
            meta = mats[key].metadata
            assert meta["rows"].value > 0, key
            assert meta["partitions"].value == day
            assert meta["path"].value == str(p.lake(root) / "views" / key.path[-1].removeprefix("view_"))
        evaluations = res.get_asset_check_evaluations()
        assert {ev.asset_key for ev in evaluations} == views
        assert all(ev.passed for ev in evaluations), [(ev.asset_key, ev.metadata["failed"]) for ev in evaluations]
        publish = mats[publish_key(p)].metadata
        assert {f"rows_{v}" for v in p.view_names} <= set(publish)
        for v in p.view_names:
            assert (p.lake(root) / "serving" / v / "_delta_log").is_dir()
            assert (p.lake(root) / "quality" / f"{v}.json").is_file()
    # the pipelines' runs are apart in one instance: flights' day and shop's day
    for p in (flights, shop):
        key = view_asset_key(p, p.view_names[0])
        assert instance.get_materialized_partitions(key) == {p.partitions.start.isoformat()}
