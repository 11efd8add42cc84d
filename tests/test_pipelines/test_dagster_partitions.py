"""Partitions that tell the truth (:mod:`pipelines.dagster.partitions`): a run materializes
the days it targets and the days its new records fall on, nothing else; the sensor and the
schedule target the days new data falls on, or skip.

The day arithmetic and the run request are pure functions (hypothesis); the sensor, the run
and the schedule then go through the session's broker and Spark with a few flights moved to
chosen days."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.dagster.new_data import NewData
from pipelines.dagster.partitions import (
    compact_days, count_per_day, day_blocks, day_of, days_in_partitions, parse_days, partition_keys, partitions_def,
)
from pipelines.dagster.schedules import RANGE_END_TAG, RANGE_START_TAG, recompute_request
from pipelines.examples.flights import pipeline as flights
from pipelines_testkit import flight_on, produce

KEYS = partition_keys(flights)  # 2013-01-01 .. 2013-12-31
_days = st.lists(st.dates(min_value=dt.date(2012, 12, 25), max_value=dt.date(2014, 1, 6)).map(dt.date.isoformat),
                 max_size=40)


# ------------------------------------------------------------------------------ pure functions
@given(_days)
def test_day_blocks_cover_the_days_in_contiguous_separated_blocks(days: list[str]) -> None:
    blocks = day_blocks(days)
    covered = [d for a, b in blocks for d in parse_days(f"{a}..{b}")]
    assert covered == sorted(set(days))  # exactly the days, in order, once each
    for (_, last), (first, _) in zip(blocks, blocks[1:]):
        assert dt.date.fromisoformat(first) - dt.date.fromisoformat(last) > dt.timedelta(days=1)  # a gap between


@given(_days)
def test_compact_days_reads_back(days: list[str]) -> None:
    text = compact_days(days)
    assert parse_days(text) == sorted(set(days))
    assert text.count("..") + text.count(",") + (1 if text else 0) >= len(day_blocks(days))


@given(st.lists(st.integers(min_value=0, max_value=2**45), max_size=50))
def test_count_per_day_counts_each_stamp_on_its_utc_day(stamps: list[int]) -> None:
    counts = count_per_day([*stamps, None])
    assert sum(counts.values()) == len(stamps)
    assert counts == Counter(dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).date().isoformat() for t in stamps)
    assert day_of(1362873600000) == "2013-03-10" and day_of(1362873600000 - 1) == "2013-03-09"


def test_parse_days_refuses_what_is_no_day() -> None:
    for bad in ("2013-13-01", "2013-03-12..2013-03-10", "yesterday"):
        with pytest.raises(ValueError):
            parse_days(bad)


@given(_days)
def test_the_request_targets_the_last_block_of_new_days_within_the_partitions(days: list[str]) -> None:
    new = NewData(records={"flights": len(days) + 1}, days=Counter(days))
    req = recompute_request(flights, new, KEYS, trigger="test", run_key="k")
    inside, outside = days_in_partitions(days, KEYS)
    if not inside:
        assert isinstance(req, dg.SkipReason)
        assert "none on a day of the partitions (2013-01-01..2013-12-31)" in (req.skip_message or "")
        return
    assert isinstance(req, dg.RunRequest)
    first, last = (req.partition_key, req.partition_key) if req.partition_key else \
        (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG])
    assert (first, last) == day_blocks(inside)[-1] and last == max(inside)
    assert parse_days(req.tags["duet/touched_days"]) == inside  # every new day, and no day outside
    assert req.run_key == "k" and req.tags["duet/new_records"] == str(len(days) + 1)


def test_nothing_new_is_no_run() -> None:
    req = recompute_request(flights, NewData(records={"flights": 0, "planes": 0}), KEYS, trigger="t", run_key=None)
    assert isinstance(req, dg.SkipReason) and req.skip_message == "no new records in flights, planes"


def test_the_event_time_is_the_extractors_not_the_record_timestamp() -> None:
    from pipelines.dagster.new_data import record_days, topic_decoders

    decoders = topic_decoders(flights)
    assert set(decoders) == set(flights.input_topics) and all(decoders.values())
    moved = flight_on("2013-03-10", record_timestamp=0)  # produced with a Kafka timestamp of 1970
    rows = [(moved.key.encode(), _json(moved.value), moved.timestamp), (b"N1", b"not json", 5), (b"N1", None, 5)]
    days, undated = record_days(decoders["flights"], rows)
    assert (dict(days), undated) == ({"2013-03-10": 1}, 2)  # a tombstone and garbage fall on no day


def test_open_ended_partitions_include_today() -> None:
    from pipelines.pipeline import Partitioning

    live = flights.model_copy(update={"partitions": Partitioning(start=dt.date(2026, 1, 1))})
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert partitions_def(live).get_last_partition_key() == today  # live data lands on today: a partition


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    """A persistent Dagster instance in a temporary folder (a schedule's context needs one)."""
    with dg.instance_for_test() as inst:
        yield inst


def test_no_request_while_a_recompute_runs(instance: dg.DagsterInstance, tmp_path: Path) -> None:
    from pipelines.dagster import KafkaResource, LakeResource
    from pipelines.dagster.schedules import recompute_job, recompute_schedule
    from pipelines.dagster.sensors import new_kafka_data

    resources = {"kafka": KafkaResource(bootstrap_servers="127.0.0.1:1"), "lake": LakeResource(path=str(tmp_path))}
    job = recompute_job(flights)
    tick = dt.datetime(2025, 3, 1, 7, tzinfo=dt.timezone.utc)
    instance.add_run(dg.DagsterRun(job_name="flights_recompute", run_id="r-1", status=dg.DagsterRunStatus.STARTED))
    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        sensor_skip = new_kafka_data(flights, job)(ctx)
    with dg.build_schedule_context(instance=instance, resources=resources, scheduled_execution_time=tick) as ctx:
        schedule_skip = recompute_schedule(flights, job)(ctx)
    for skip in (sensor_skip, schedule_skip):  # before the unreachable broker is asked anything
        assert isinstance(skip, dg.SkipReason), skip
        assert skip.skip_message == "run r-1 of flights_recompute is started: the next tick looks again"


def _json(value: object) -> bytes:
    from pipelines.load import encode_value

    out = encode_value(value)
    assert out is not None
    return out


# ---------------------------------------------------------------- sensor, run, schedule: for real
@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_sensor_run_materializes_exactly_the_days_its_data_falls_on(kafka_bootstrap: str, spark: object,
                                                                      instance: dg.DagsterInstance,
                                                                      tmp_path: Path) -> None:
    """A fresh lake; the sample's tables and first 30 flights (2013-01-01), flights on 01-03,
    01-05 and 01-06 (one produced with a Kafka timestamp of 01-01: its event time counts). The
    sensor asks for 01-05..01-06 (the last block) naming 01-01, 01-03 as touched; one more
    flight on 01-08 arrives before the run ingests. The run materializes 01-01, 01-03,
    01-05, 01-06 and 01-08, each saying why; 01-02, 01-04, 01-07 and 12-31 stay missing. Then
    the sensor and the schedule skip, until a flight on 01-10 and 01-11: a schedule run for
    them."""
    from pipelines.dagster import KafkaResource, LakeResource, SparkResource, definitions, view_asset_key
    from pipelines.steps import load_data, reset_pipeline

    root = tmp_path / "lake"
    reset_pipeline(flights, kafka_bootstrap, flights.lake(root))
    load_data(flights, kafka_bootstrap, limit=30)
    on_jan_1 = 30 + sum(len(v) for v in flights.sample_data(0).tables.values())
    produce(kafka_bootstrap, "flights", [flight_on("2013-01-03"), flight_on("2013-01-05"),
                                         flight_on("2013-01-06", record_timestamp=1357034400000)])
    resources = {"kafka": KafkaResource(bootstrap_servers=kafka_bootstrap), "lake": LakeResource(path=str(root)),
                 "spark": SparkResource()}
    defs = definitions(flights, resources=resources)
    repo = defs.get_repository_def()
    sensor = repo.get_sensor_def("flights_new_kafka_data")
    schedule = repo.get_schedule_def("flights_recompute_schedule")

    with dg.build_sensor_context(instance=instance, resources=resources, repository_def=repo) as ctx:
        (req,) = sensor.evaluate_tick(ctx).run_requests or []
    assert req.partition_key is None and (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG]) == \
        ("2013-01-05", "2013-01-06")
    assert req.tags["duet/touched_days"] == "2013-01-01, 2013-01-03, 2013-01-05..2013-01-06"
    assert req.tags["duet/new_records"] == str(on_jan_1 + 3) and req.tags["duet/trigger"] == "new_kafka_data"

    produce(kafka_bootstrap, "flights", [flight_on("2013-01-08")])  # after the tick, before the run's ingest
    result = defs.resolve_job_def("flights_recompute").execute_in_process(instance=instance, tags=req.tags)
    assert result.success
    touched = ["2013-01-01", "2013-01-03", "2013-01-05", "2013-01-06", "2013-01-08"]
    for view in flights.view_names:
        assert sorted(instance.get_materialized_partitions(view_asset_key(flights, view))) == touched, view
    key = view_asset_key(flights, "departures_hourly")
    mats = {e.materialization.partition: e.materialization.metadata
            for e in result.get_asset_materialization_events() if e.materialization.asset_key == key}
    assert sorted(mats) == touched
    because = {d: m["materialized_because"].value for d, m in mats.items()}
    assert because["2013-01-06"] == "the run targets it; 1 new record of this run falls on it"
    assert because["2013-01-03"] == because["2013-01-08"] == "1 new record of this run falls on it"
    assert mats["2013-01-01"]["day_new_records"].value == on_jan_1
    assert mats["2013-01-03"]["day_windows"].value == 1  # one flight: one hourly window (EWR, 10:00)
    for meta in mats.values():
        assert meta["partitions"].value == "2013-01-05..2013-01-06"
        assert meta["days_with_new_data"].value == "2013-01-01, 2013-01-03, 2013-01-05..2013-01-06, 2013-01-08"
        assert meta["recomputed"].value == "every day: the whole raw history"

    with dg.build_sensor_context(instance=instance, resources=resources, repository_def=repo) as ctx:
        assert sensor.evaluate_tick(ctx).skip_message == "no new records in flights, planes, airports, airlines"
    tick = dt.datetime(2025, 3, 1, 7, tzinfo=dt.timezone.utc)
    with dg.build_schedule_context(instance=instance, resources=resources, scheduled_execution_time=tick) as ctx:
        assert schedule.evaluate_tick(ctx).skip_message == "no new records in flights, planes, airports, airlines"
    produce(kafka_bootstrap, "flights", [flight_on("2013-01-11"), flight_on("2013-01-10")])
    with dg.build_schedule_context(instance=instance, resources=resources, scheduled_execution_time=tick) as ctx:
        (req,) = schedule.evaluate_tick(ctx).run_requests or []
    assert (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG]) == ("2013-01-10", "2013-01-11")
    assert req.run_key == "2025-03-01T07:00" and req.tags["duet/trigger"] == "schedule"
