"""The Dagster definitions load, and their pieces have the expected shape."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from pipelines.steps import ALL_TOPICS
from pipelines.views import VIEW_NAMES


@pytest.fixture(scope="module")
def defs() -> dg.Definitions:
    from pipelines.definitions import defs

    return defs


def test_definitions_load(defs: dg.Definitions) -> None:
    dg.Definitions.validate_loadable(defs)


def test_asset_graph(defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    raw = {f"raw_{t.replace('-', '_')}" for t in ALL_TOPICS}
    views = {f"view_{v}" for v in VIEW_NAMES}
    assert raw | views | {"serving_publish", "speed_layer"} == keys
    # every view depends on the four input topics; publish on every view
    deps = {k.to_user_string() for k in graph.get(dg.AssetKey("view_departures_hourly")).parent_keys}
    assert deps == {"raw_flights", "raw_planes", "raw_airports", "raw_airlines"}
    pub = {k.to_user_string() for k in graph.get(dg.AssetKey("serving_publish")).parent_keys}
    assert views <= pub
    # one blocking GX check per view
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert checks == {(v, "gx_suite") for v in views}


def test_views_are_daily_partitioned_with_single_run_backfills(defs: dg.Definitions) -> None:
    node = defs.resolve_asset_graph().get(dg.AssetKey("view_seats_by_dest_daily"))
    pdef = node.partitions_def
    assert isinstance(pdef, dg.DailyPartitionsDefinition)
    keys = pdef.get_partition_keys()
    assert (keys[0], keys[-1], len(keys)) == ("2013-01-01", "2013-12-31", 365)
    assert node.backfill_policy == dg.BackfillPolicy.single_run()


def test_hourly_schedule_requests_the_last_partition(defs: dg.Definitions) -> None:
    from pipelines.schedules import hourly_recompute

    assert hourly_recompute.cron_schedule == "0 * * * *"
    ctx = dg.build_schedule_context(
        scheduled_execution_time=dt.datetime(2025, 3, 1, 7, tzinfo=dt.timezone.utc),
        repository_def=defs.get_repository_def(),
    )
    (req,) = hourly_recompute.evaluate_tick(ctx).run_requests or []
    assert req.partition_key == "2013-12-31"
    assert req.run_key == "2025-03-01T07"


def test_lag_sensor_skips_without_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.resources import KafkaResource
    from pipelines.sensors import speed_layer_lag

    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with dg.build_sensor_context(resources={"kafka": KafkaResource()}) as ctx:
        result = speed_layer_lag.evaluate_tick(ctx)
    assert result.skip_message and "no Kafka cluster" in result.skip_message


def test_partition_range_ms() -> None:
    from pipelines.partitions import partition_range_ms

    lo, hi = partition_range_ms("2013-01-01", "2013-01-03")
    assert (lo, hi - lo) == (1356998400000, 3 * 86_400_000)
