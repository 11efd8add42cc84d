"""The Dagster definitions load from the declarations, and their pieces have the expected shape."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from pipelines.examples.flights import pipeline as flights
from pipelines.examples.shop import pipeline as shop


@pytest.fixture(scope="module")
def defs() -> dg.Definitions:
    from pipelines.examples.definitions import defs

    return defs


def _key(*path: str) -> dg.AssetKey:
    return dg.AssetKey(list(path))


def _named(defs_list: object, name: str) -> object:
    (found,) = [d for d in defs_list if d.name == name]  # type: ignore[attr-defined]
    return found


def test_definitions_load(defs: dg.Definitions) -> None:
    dg.Definitions.validate_loadable(defs)


def test_asset_graph(defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    for p in (flights, shop):
        slugs = [t.replace("-", "_") for t in p.archived_topics]
        topics = {f"{p.name}/topic_{s}" for s in slugs}
        raw = {f"{p.name}/raw_{s}" for s in slugs}
        views = {f"{p.name}/view_{v}" for v in p.view_names}
        assert topics | raw | views | {f"{p.name}/serving_publish", f"{p.name}/speed_layer"} == \
            {k for k in keys if k.startswith(f"{p.name}/")}
        # groups are the pipeline's: <p>_kafka, <p>_ingest, <p>_batch, <p>_serving, <p>_speed
        assert graph.get(_key(p.name, "serving_publish")).group_name == f"{p.name}_serving"
        assert graph.get(_key(p.name, f"view_{p.view_names[0]}")).group_name == f"{p.name}_batch"
    assert {k.split("/")[0] for k in keys} == {"flights", "shop"}
    # lineage starts at Kafka: topic -> raw -> view -> publish; topics -> speed layer -> publish
    assert graph.get(_key("flights", "raw_flights")).parent_keys == {_key("flights", "topic_flights")}
    deps = {k.to_user_string() for k in graph.get(_key("flights", "view_departures_hourly")).parent_keys}
    assert deps == {"flights/raw_flights", "flights/raw_planes", "flights/raw_airports", "flights/raw_airlines"}
    speed = {k.to_user_string() for k in graph.get(_key("flights", "speed_layer")).parent_keys}
    assert speed == {f"flights/topic_{t}" for t in ("flights", "planes", "airports", "airlines")}
    assert graph.get(_key("flights", "topic_flights_dlq")).parent_keys == {_key("flights", "speed_layer")}
    # the dead-letter topic sits with the speed layer that writes it: the groups stay acyclic
    assert graph.get(_key("flights", "topic_flights_dlq")).group_name == "flights_speed"
    assert graph.get(_key("flights", "topic_flights")).group_name == "flights_kafka"
    pub = {k.to_user_string() for k in graph.get(_key("shop", "serving_publish")).parent_keys}
    assert pub == {f"shop/view_{v}" for v in shop.view_names} | {"shop/speed_layer"}
    # one blocking GX check per view of each pipeline, and the speed layer's lag check
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert checks == {(f"{p.name}/view_{v}", "gx_suite") for p in (flights, shop) for v in p.view_names} | \
        {(f"{p.name}/speed_layer", "speed_lag") for p in (flights, shop)}


def test_descriptions_come_from_the_declaration(defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    view = graph.get(_key("flights", "view_departures_hourly"))
    assert flights.view("departures_hourly").description in (view.description or "")
    assert "tumbling windows of 1 h" in (view.description or "")
    assert "one record per flight" in (graph.get(_key("flights", "topic_flights")).description or "")
    assert flights.description in (graph.get(_key("flights", "speed_layer")).description or "")
    assert graph.get(_key("flights", "topic_flights")).kinds == {"kafka"}


def test_views_are_daily_partitioned_with_single_run_backfills(defs: dg.Definitions) -> None:
    node = defs.resolve_asset_graph().get(_key("flights", "view_seats_by_dest_daily"))
    pdef = node.partitions_def
    assert isinstance(pdef, dg.DailyPartitionsDefinition)
    keys = pdef.get_partition_keys()
    assert (keys[0], keys[-1], len(keys)) == ("2013-01-01", "2013-12-31", 365)
    assert node.backfill_policy == dg.BackfillPolicy.single_run()
    shop_node = defs.resolve_asset_graph().get(_key("shop", "view_conversions_hourly"))
    shop_keys = shop_node.partitions_def.get_partition_keys()
    assert (shop_keys[0], len(shop_keys)) == (shop.partitions.start.isoformat(),
                                              (shop.partitions.end - shop.partitions.start).days)


def test_open_ended_partitions_run_up_to_today() -> None:
    from pipelines.dagster import partitions_def
    from pipelines.declaration.pipeline import Partitioning

    live = flights.model_copy(update={"partitions": Partitioning(start=dt.date(2026, 1, 1))})
    pdef = partitions_def(live)
    assert pdef.end is None
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert pdef.get_last_partition_key() == today  # live data lands on today: it is a partition
    assert live.partitions.day_range_ms("2026-01-01", "2026-01-02") == (1767225600000, 1767225600000 + 2 * 86_400_000)


def test_names_are_per_pipeline(defs: dg.Definitions) -> None:
    repo = defs.get_repository_def()
    assert {s.name for s in repo.schedule_defs} == {"flights_recompute_schedule", "shop_recompute_schedule"}
    assert {s.name for s in repo.sensor_defs} == {"flights_new_kafka_data", "flights_speed_layer_lag",
                                                  "shop_new_kafka_data", "shop_speed_layer_lag"}
    assert {"flights_recompute", "shop_recompute"} <= {j.name for j in repo.get_all_jobs()}
    job = repo.get_job("shop_recompute")
    assert {k.path[0] for k in job.asset_layer.executable_asset_keys} == {"shop"}


def test_the_same_pipeline_twice_is_refused() -> None:
    from pipelines.dagster import definitions
    from pipelines.declaration.pipeline import PipelineError

    with pytest.raises(PipelineError, match="'flights' is given twice"):
        definitions(flights, flights)


def test_the_schedule_follows_the_declared_cron(defs: dg.Definitions) -> None:
    """What it asks for is in test_dagster_partitions (it needs a broker)."""
    schedule = _named(defs.get_repository_def().schedule_defs, "flights_recompute_schedule")
    assert schedule.cron_schedule == flights.partitions.schedule == "0 * * * *"
    assert schedule.execution_timezone == "UTC" and schedule.job_name == "flights_recompute"


def test_sensors_and_schedule_skip_without_a_cluster(defs: dg.Definitions, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.dagster import KafkaResource

    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    resources = {"kafka": KafkaResource(), "lake": dg.ResourceDefinition.none_resource()}
    for name in ("shop_speed_layer_lag", "shop_new_kafka_data"):
        sensor = _named(defs.get_repository_def().sensor_defs, name)
        with dg.build_sensor_context(resources=resources) as ctx:
            result = sensor.evaluate_tick(ctx)
        assert result.skip_message and "no Kafka cluster" in result.skip_message
    schedule = _named(defs.get_repository_def().schedule_defs, "shop_recompute_schedule")
    with dg.instance_for_test() as instance, dg.build_schedule_context(
            instance=instance, resources=resources,
            scheduled_execution_time=dt.datetime(2026, 1, 6, tzinfo=dt.timezone.utc)) as ctx:
        assert schedule.evaluate_tick(ctx).skip_message == "no Kafka cluster configured (set KAFKA_BOOTSTRAP_SERVERS)"


def test_workspace_loads_the_pipelines_of_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    monkeypatch.setenv("DUET_PIPELINES", "pipelines.examples.shop:pipeline, pipelines.examples.flights")
    sys.modules.pop("pipelines.dagster.workspace", None)
    workspace = importlib.import_module("pipelines.dagster.workspace")
    try:
        keys = {k.path[0] for k in workspace.defs.resolve_asset_graph().get_all_asset_keys()}
        assert keys == {"shop", "flights"}
        monkeypatch.delenv("DUET_PIPELINES")
        monkeypatch.delenv("DUET_PIPELINE", raising=False)
        monkeypatch.chdir("/")
        assert [p.name for p in workspace.workspace_pipelines()] == ["flights"]  # the default pipeline
    finally:
        sys.modules.pop("pipelines.dagster.workspace", None)


def test_backfill_selection_takes_multi_part_keys() -> None:
    from pipelines.dagster import view_asset_key
    from pipelines.dagster.client import asset_path

    assert asset_path(view_asset_key(flights, "departures_hourly")) == ["flights", "view_departures_hourly"]
    assert asset_path(["shop", "view_browsing_sessions"]) == ["shop", "view_browsing_sessions"]
    assert asset_path("shop/raw_clicks") == ["shop", "raw_clicks"]
    with pytest.raises(KeyError, match="no view 'nope'"):
        view_asset_key(flights, "nope")
