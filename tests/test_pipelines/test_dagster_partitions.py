"""Partitions that tell the truth (:mod:`pipelines.dagster.partitions`): a run materializes
the days it targets and the days its new records fall on, nothing else; the sensor and the
schedule target the days new data falls on, or skip.

The day arithmetic and the run request are pure functions (hypothesis); the sensor, the run
and the schedule then go through the session's broker and Spark on a small pipeline of the
test's own (the examples go through the Dagster UI in test_dagster_ui)."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import dagster as dg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.dagster.new_data import NewData
from pipelines.dagster.partitions import (
    compact_days, count_per_day, day_blocks, day_of, days_in_partitions, parse_days, partition_keys, partitions_def,
)
from pipelines.dagster.schedules import RANGE_END_TAG, RANGE_START_TAG, recompute_request
from pipelines.examples.flights import pipeline as flights
from pipelines.declaration.pipeline import Partitioning, Pipeline, Source, View
from pipelines_testkit import flight_on

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


@settings(deadline=None)  # the first example paid an import once beside busy processes (257 ms)
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
    from pipelines.declaration.pipeline import Partitioning

    live = flights.model_copy(update={"partitions": Partitioning(start=dt.date(2026, 1, 1))})
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert partitions_def(live).get_last_partition_key() == today  # live data lands on today: a partition


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    """A persistent Dagster instance in a temporary folder (a schedule's context needs one)."""
    with dg.instance_for_test() as inst:
        yield inst


def _sensor_and_schedule_say(instance: dg.DagsterInstance, lake: Path) -> list[object]:
    """What ``flights_new_kafka_data`` and ``flights_recompute_schedule`` return on ``lake``,
    with an unreachable broker configured."""
    from pipelines.dagster import KafkaResource, LakeResource
    from pipelines.dagster.schedules import recompute_job, recompute_schedule
    from pipelines.dagster.sensors import new_kafka_data

    resources = {"kafka": KafkaResource(bootstrap_servers="127.0.0.1:1"), "lake": LakeResource(path=str(lake))}
    job = recompute_job(flights)
    tick = dt.datetime(2025, 3, 1, 7, tzinfo=dt.timezone.utc)
    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        sensor_says = new_kafka_data(flights, job)(ctx)
    with dg.build_schedule_context(instance=instance, resources=resources, scheduled_execution_time=tick) as ctx:
        schedule_says = recompute_schedule(flights, job)(ctx)
    return [sensor_says, schedule_says]


def test_no_request_while_a_recompute_runs(instance: dg.DagsterInstance, tmp_path: Path) -> None:
    instance.add_run(dg.DagsterRun(job_name="flights_recompute", run_id="r-1", status=dg.DagsterRunStatus.STARTED))
    for skip in _sensor_and_schedule_say(instance, tmp_path):  # before the unreachable broker is asked anything
        assert isinstance(skip, dg.SkipReason), skip
        assert skip.skip_message == "run r-1 of flights_recompute is started: the next tick looks again"


def test_no_request_while_another_writer_holds_the_lake(instance: dg.DagsterInstance, tmp_path: Path) -> None:
    """A run now would fail at its first writing step (and use up its run key)."""
    from pipelines.lake.lock import LakeLock

    with LakeLock(tmp_path / "flights", "duet run --limit 20000"):
        says = _sensor_and_schedule_say(instance, tmp_path)
    for skip in says:  # before the unreachable broker is asked anything
        assert isinstance(skip, dg.SkipReason), skip
        assert skip.skip_message.startswith(f"{tmp_path / 'flights'} is in use by `duet run --limit 20000` (pid "
                                            f"{os.getpid()} on "), skip.skip_message
        assert skip.skip_message.endswith(" ago): the next tick looks again"), skip.skip_message


def _json(value: object) -> bytes:
    from pipelines.produce.load import encode_value

    out = encode_value(value)
    assert out is not None
    return out


# ---------------------------------------------------------------- sensor, run, schedule: for real
def _readings(prefix: str) -> Pipeline:
    """Not an example: readings ``<prefix>-readings`` (2 partitions, key: sensor, value
    ``{"at": epoch ms}``) whose event time is their ``at`` (a timestamp extractor), counted
    per sensor (``<prefix>-per_sensor``, a KTable) and per sensor and hour
    (``<prefix>-hourly``)."""
    from speed_layer import Consumed, Materialized, Produced, Serdes, StreamsBuilder, TimeWindows

    topic, per_sensor, hourly = f"{prefix}-readings", f"{prefix}-per_sensor", f"{prefix}-hourly"

    def build() -> Any:
        def at(key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
            return int(value["at"])

        b = StreamsBuilder()
        text, js = Serdes.String(), Serdes.JSON()
        s = b.stream(topic, Consumed(key_serde=text, value_serde=js, timestamp_extractor=at))
        s.group_by_key().count(Materialized.as_(per_sensor)).to_stream().to(
            per_sensor, Produced(key_serde=text, value_serde=js))
        (s.group_by_key().windowed_by(TimeWindows.of_size_and_grace(dt.timedelta(hours=1), dt.timedelta(days=365)))
         .count(Materialized.as_(hourly)).to_stream()
         .to(hourly, Produced(key_serde=Serdes.WindowedJSON(text), value_serde=js)))
        return b.build()

    return Pipeline(name="readings", topology=build, sources=[Source(topic=topic, partitions=2)],
                    views=[View(store=per_sensor), View(store=hourly)],
                    partitions=Partitioning(start=dt.date(2026, 3, 1), end=dt.date(2026, 4, 1)))


def _produce_readings(bootstrap: str, topic: str, readings: list[tuple[str, str, int]]) -> None:
    """``(sensor, day, hour)`` readings at ``day hour:30`` UTC, each produced with the Kafka
    timestamp 2026-03-01T00:00Z (their event time is their ``at``); ``day`` ``"garbage"``: a
    value that is no JSON."""
    from confluent_kafka import Producer

    failed: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    producer = Producer({"bootstrap.servers": bootstrap})
    for sensor, day, hour in readings:
        at = dt.datetime.fromisoformat(f"{day}T{hour:02d}:30:00+00:00") if day != "garbage" else None
        value = json.dumps({"at": int(at.timestamp() * 1000)}).encode() if at else b"{not json"
        producer.produce(topic, key=sensor.encode(), value=value, timestamp=1772323200000, on_delivery=delivered)
    assert producer.flush(30) == 0 and failed == []
    del producer  # closed now, not at the end of the session (after the broker)


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_sensor_run_materializes_exactly_the_days_its_data_falls_on(kafka_bootstrap: str, spark: object,
                                                                      instance: dg.DagsterInstance, unique_name: str,
                                                                      tmp_path: Path) -> None:
    """A pipeline of its own (event time from the value), a fresh lake, readings on 03-02,
    03-04, 03-05, one before the partitions and one that is no JSON, all produced with a Kafka
    timestamp of 03-01. The sensor asks for 03-04..03-05 (the last block) naming 03-02 as
    touched; one more reading, on 03-08, arrives before the run ingests. The run materializes
    03-02, 03-04, 03-05 and 03-08, each saying why; 03-01, 03-03, 03-06, 03-07 stay missing.
    Then the sensor and the schedule skip; a reading after the partitions alone is no run; two
    on 03-10 and 03-11 make a schedule run for them."""
    from pipelines.dagster import KafkaResource, LakeResource, SparkResource, definitions, view_asset_key

    from pipelines.produce.topics import ensure_pipeline_topics

    p = _readings(unique_name)
    topic = f"{unique_name}-readings"
    root = tmp_path / "lake"
    ensure_pipeline_topics(p, kafka_bootstrap)
    _produce_readings(kafka_bootstrap, topic, [("a", "2026-03-02", 9), ("a", "2026-03-02", 10), ("b", "2026-03-04", 23),
                                               ("b", "2026-03-05", 0), ("b", "2026-02-20", 5), ("a", "garbage", 0)])
    resources = {"kafka": KafkaResource(bootstrap_servers=kafka_bootstrap), "lake": LakeResource(path=str(root)),
                 "spark": SparkResource()}
    defs = definitions(p, resources=resources)
    repo = defs.get_repository_def()
    sensor, schedule = repo.get_sensor_def("readings_new_kafka_data"), repo.get_schedule_def("readings_recompute_schedule")

    def tick(what: Any, **kw: Any) -> Any:
        if what is sensor:
            with dg.build_sensor_context(instance=instance, resources=resources, repository_def=repo) as ctx:
                return sensor.evaluate_tick(ctx)
        with dg.build_schedule_context(instance=instance, resources=resources, **kw,
                                       scheduled_execution_time=dt.datetime(2026, 3, 12, 7, tzinfo=dt.timezone.utc)) as ctx:
            return schedule.evaluate_tick(ctx)

    first = tick(sensor)
    (req,) = first.run_requests or pytest.fail(str(first.skip_message))
    assert req.partition_key is None and (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG]) == \
        ("2026-03-04", "2026-03-05")
    assert req.tags["duet/touched_days"] == "2026-03-02, 2026-03-04..2026-03-05"
    assert req.tags["duet/new_records"] == "6" and req.tags["duet/trigger"] == "new_kafka_data"

    _produce_readings(kafka_bootstrap, topic, [("c", "2026-03-08", 12)])  # after the tick, before the run's ingest
    result = defs.resolve_job_def("readings_recompute").execute_in_process(instance=instance, tags=req.tags)
    assert result.success
    touched = ["2026-03-02", "2026-03-04", "2026-03-05", "2026-03-08"]
    mats: dict[str, dict[str, Any]] = {}
    for view in p.view_names:
        assert sorted(instance.get_materialized_partitions(view_asset_key(p, view))) == touched, view
        mats[view] = {e.materialization.partition: e.materialization.metadata for e in
                      result.get_asset_materialization_events() if e.materialization.asset_key == view_asset_key(p, view)}
        assert sorted(mats[view]) == touched
    per_sensor, hourly = p.view_names
    because = {d: m["materialized_because"].value for d, m in mats[hourly].items()}
    assert because == {"2026-03-02": "2 new records of this run fall on it",
                       "2026-03-04": "the run targets it; 1 new record of this run falls on it",
                       "2026-03-05": "the run targets it; 1 new record of this run falls on it",
                       "2026-03-08": "1 new record of this run falls on it"}
    assert {d: m["day_windows"].value for d, m in mats[hourly].items()} == \
        {"2026-03-02": 2, "2026-03-04": 1, "2026-03-05": 1, "2026-03-08": 1}  # (sensor, hour) windows
    assert {d: m["day_rows_updated"].value for d, m in mats[per_sensor].items()} == \
        {"2026-03-02": 1, "2026-03-04": 0, "2026-03-05": 1, "2026-03-08": 1}  # a, b, c: each its last reading's day
    for meta in mats[hourly].values():
        assert meta["partitions"].value == "2026-03-04..2026-03-05"
        assert meta["days_with_new_data"].value == "2026-03-02, 2026-03-04..2026-03-05, 2026-03-08"
        assert meta["recomputed"].value == "every day: the whole raw history"

    assert tick(sensor).skip_message == f"no new records in {topic}"
    assert tick(schedule).skip_message == f"no new records in {topic}"
    _produce_readings(kafka_bootstrap, topic, [("a", "2026-05-01", 8)])
    assert tick(sensor).skip_message == (f"1 new record in {topic}, none on a day of the partitions "
                                         "(2026-03-01..2026-03-31): they fall on 2026-05-01; launch a run from the UI "
                                         "to ingest them")
    _produce_readings(kafka_bootstrap, topic, [("a", "2026-03-11", 8), ("b", "2026-03-10", 8)])
    (req,) = tick(schedule).run_requests or []
    assert (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG]) == ("2026-03-10", "2026-03-11")
    assert req.tags["duet/touched_days"] == "2026-03-10..2026-03-11" and req.tags["duet/new_records"] == "3"
    assert req.run_key == "2026-03-12T07:00" and req.tags["duet/trigger"] == "schedule"


@pytest.mark.broker
def test_a_transaction_marker_is_no_new_record(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """A topic written in a transaction ends with a commit marker the ingest cannot archive:
    once its records are archived, the sensor sees nothing new (not 'one record on no day')."""
    from confluent_kafka import Producer

    from batch_layer.ingest import ingest_topic
    from pipelines.dagster.new_data import kafka_new_data
    from pipelines.produce.topics import ensure_pipeline_topics

    p = _readings(unique_name)
    topic = f"{unique_name}-readings"
    ensure_pipeline_topics(p, kafka_bootstrap)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{unique_name}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    at = int(dt.datetime(2026, 3, 3, 12, tzinfo=dt.timezone.utc).timestamp() * 1000)
    for sensor in ("a", "b", "c"):
        producer.produce(topic, key=sensor.encode(), value=json.dumps({"at": at}).encode())
    producer.commit_transaction(30)
    del producer
    new = kafka_new_data(p, kafka_bootstrap, tmp_path)
    assert (new.records, dict(new.days)) == ({topic: 3}, {"2026-03-03": 3})
    assert ingest_topic(None, kafka_bootstrap, topic, tmp_path).records_added == 3
    new = kafka_new_data(p, kafka_bootstrap, tmp_path)
    assert new.total == 0 and sum(sum(e.values()) for e in new.ends.values()) > 3  # the markers' offsets
    req = recompute_request(p, new, partition_keys(p), trigger="t", run_key=None)
    assert isinstance(req, dg.SkipReason) and req.skip_message == f"no new records in {topic}"


# ------------------------------------------------------------------ partitions over the years loaded
def _partitions_of(defs: dg.Definitions, p: Pipeline = flights) -> dg.DailyPartitionsDefinition:
    """The one partitions definition of ``p``'s batch views and its recompute job."""
    from pipelines.dagster import view_asset_key

    found = {defs.resolve_assets_def(view_asset_key(p, v)).partitions_def for v in p.view_names}
    found.add(defs.resolve_job_def(f"{p.name}_recompute").partitions_def)
    (one,) = found
    assert isinstance(one, dg.DailyPartitionsDefinition)
    return one


def test_the_partitions_cover_the_years_recorded_in_the_lake(tmp_path: Path) -> None:
    """Real definitions on a lake whose flights folder records N copies (``duet load --years
    N``): daily partitions from 2013-01-01 to the end of year 2013 + N - 1; none recorded,
    or one copy: 2013 alone. The record keeps the most copies loaded since the reset."""
    from pipelines.dagster import LakeResource, definitions
    from pipelines.lake.loaded import LOADED_FILE, loaded_copies, record_loaded

    root = tmp_path / "lake"

    def partitions() -> dg.DailyPartitionsDefinition:
        return _partitions_of(definitions(flights, resources={"lake": LakeResource(path=str(root))}))

    assert partitions().get_partition_keys() == KEYS  # nothing loaded: the declared year
    assert record_loaded(flights.lake(root), 1) == 1 and partitions().get_partition_keys() == KEYS
    assert not flights.lake(root).exists()  # one copy is no record: a plain load leaves the lake alone
    assert record_loaded(flights.lake(root), 3) == 3
    assert record_loaded(flights.lake(root), 2) == 3  # loading appends: the three years are still there
    three = partitions()
    assert (three.start.date(), three.end.date()) == (dt.date(2013, 1, 1), dt.date(2016, 1, 1))  # type: ignore[union-attr]
    keys = three.get_partition_keys()
    assert (keys[0], keys[-1], len(keys)) == ("2013-01-01", "2015-12-31", 3 * 365)
    (flights.lake(root) / LOADED_FILE).write_text("not json")
    assert loaded_copies(flights.lake(root)) == 1 and partitions().get_partition_keys() == KEYS


@pytest.mark.broker
@pytest.mark.timeout(600)
def test_two_years_loaded_are_two_years_of_partitions(kafka_bootstrap: str, instance: dg.DagsterInstance,
                                                      tmp_path: Path) -> None:
    """``duet load --years 2 --limit 2000`` (the first 2,000 flights of 2013 and of 2014)
    records two copies; the definitions built on that lake have 730 daily partitions, and the
    sensor, on the records in Kafka, asks for a run of the days of 2014 the flights fall on
    (the last block), naming the days of 2013 as touched: every day loaded is a partition.
    ``duet ui --load --years 2`` resets and records its two copies too; a reset of the input
    topics forgets the record."""
    from typer.testing import CliRunner

    from pipelines.cli import app
    from pipelines.dagster import KafkaResource, LakeResource, definitions
    from pipelines.lake.loaded import loaded_copies
    from pipelines.job.steps import reset_pipeline

    root = tmp_path / "lake"
    reset_pipeline(flights, kafka_bootstrap, flights.lake(root))  # the session broker's flights topics start empty
    try:
        res = CliRunner().invoke(app, ["load", "--years", "2", "--limit", "2000", "--bootstrap", kafka_bootstrap,
                                       "--lake", str(root)])
        assert res.exit_code == 0, res.output
        assert loaded_copies(flights.lake(root)) == 2
        resources = {"kafka": KafkaResource(bootstrap_servers=kafka_bootstrap), "lake": LakeResource(path=str(root))}
        defs = definitions(flights, resources=resources)
        keys = _partitions_of(defs).get_partition_keys()
        assert (keys[0], keys[-1], len(keys)) == ("2013-01-01", "2014-12-31", 730)
        repo = defs.get_repository_def()
        with dg.build_sensor_context(instance=instance, resources=resources, repository_def=repo) as ctx:
            tick = repo.get_sensor_def("flights_new_kafka_data").evaluate_tick(ctx)
        (req,) = tick.run_requests or pytest.fail(str(tick.skip_message))
        first, last = (req.partition_key, req.partition_key) if req.partition_key else \
            (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG])
        touched = parse_days(req.tags["duet/touched_days"])
        assert first == "2014-01-01" and last == max(touched) and last.startswith("2014-01-"), req.tags
        assert {d[:4] for d in touched} == {"2013", "2014"} and set(touched) <= set(keys), touched
        assert req.tags["duet/new_records"] == str(sum(int(n.replace(",", "")) for n in
                                                       _counts(res.output).values())), (req.tags, res.output)

        # `duet ui --load --years 2 --limit 500`'s reset and load (before `dagster dev` starts)
        from pipelines.cli.dagster_commands import _reset_and_load
        from pipelines.cli.support import Phases, make_console
        from pipelines.job.steps import input_record_count

        console = make_console()
        _reset_and_load([flights], root, kafka_bootstrap, 500, 2, console, Phases("ui", console))
        assert loaded_copies(flights.lake(root)) == 2
        assert input_record_count(kafka_bootstrap, ["flights"]) == {"flights": 1000}
    finally:
        reset_pipeline(flights, kafka_bootstrap, flights.lake(root))
    assert loaded_copies(flights.lake(root)) == 1


def _counts(output: str) -> dict[str, str]:
    """``duet load``'s last line ``topic: n, topic: n`` as ``{topic: n}``."""
    last = [ln for ln in output.strip().splitlines() if ln.strip()][-1]
    return dict(part.strip().split(": ", 1) for part in last.split(", "))
