"""``duet run --limit 2000`` on the embedded broker, started fresh as ``make run`` starts it,
run ONCE for this module (a run is ~50 s of a 2-core host) and looked at twice:

* the happy path is quiet (issue 44): the progress and the summary, and no WARNING or INFO
  line on stderr: no retry that succeeded (topics whose metadata propagates, an idempotent
  producer waiting for a loading coordinator), no third-party INFO (Great Expectations'
  temporary directories), no JVM start notice (``Using incubator modules``);
* Dagster's catalog tells what the lake holds (issue 41, item 6): the instance of the run's
  ``DAGSTER_HOME`` has every daily partition the run's batch views fall on materialized, the
  ``gx_suite`` check of each view evaluated, the raw and published assets materialized.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from pipelines.dagster.catalog import record_lake_write
from pipelines.dagster.keys import CHECK_NAME, publish_key, raw_key, view_asset_key
from pipelines.dagster.partitions import day_of
from pipelines.examples.flights import pipeline as flights  # not named "pipeline": a module attribute so named becomes its reference
from pipelines_testkit import log_lines

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1500)]


@dataclass(frozen=True)
class EmbeddedRun:
    proc: subprocess.CompletedProcess[str]
    lake: Path
    dagster_home: Path


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedRun:
    root = tmp_path_factory.mktemp("embedded-run")
    home, lake = root / "dagster", root / "lake"
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "DUET_PIPELINE", "DUET_LAKE")}
    env.update(PYSPARK_PYTHON=sys.executable, DAGSTER_HOME=str(home))
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--limit", "2000", "--lake", str(lake)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=1400, check=False)
    return EmbeddedRun(proc, lake, home)


def test_duet_run_prints_no_warning_or_info_line(embedded_run: EmbeddedRun) -> None:
    proc = embedded_run.proc
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "OK: every check passed and speed and batch agree" in proc.stdout, proc.stdout[-3000:]
    assert log_lines(proc.stderr) == [], proc.stderr[-5000:]


def test_after_duet_run_the_catalog_holds_the_runs_days_and_checks(embedded_run: EmbeddedRun) -> None:
    from pipelines.job.serving_steps import read_batch_views

    done = embedded_run.proc
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "catalog not updated" not in done.stderr, done.stderr
    frames = read_batch_views(flights, embedded_run.lake / "flights")
    with dg.DagsterInstance.from_config(str(embedded_run.dagster_home)) as instance:
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


def test_the_log_line_check_sees_each_kind_of_line() -> None:
    """The check itself: the CLI's logging, Spark's log4j, a JVM notice and SLF4J's reports are log lines; a
    progress line or an error's one line are not; a dead-lettered record's one WARNING is
    allowed as many times as records were dead-lettered."""
    stderr = ("2026-12-06 04:30:02,370 WARNING speed_layer.timeouts: creating topics [...]\n"
              "2026-12-06 04:32:42,740 INFO great_expectations.data_context.types.base: Created temporary ...\n"
              "WARNING: Using incubator modules: jdk.incubator.vector\n"
              "04:30:02 WARN SparkContext: something\n"
              'SLF4J: Failed to load class "org.slf4j.impl.StaticLoggerBinder".\n'
              "SLF4J(W): Class path contains SLF4J bindings targeting slf4j-api versions 1.7.x or earlier.\n"
              "speed  ━━━━━━━━━━ 2,000 records\n"
              "duet run: the lake is busy\n")
    assert len(log_lines(stderr)) == 6
    dead = ("2026-12-06 04:58:13,599 WARNING speed_layer.task: task 0_1: record readings-1@925 sent to "
            "greenhouse-dlq after deserialization error: SerializationException(...)\n")
    assert log_lines(dead, dead_lettered=1) == []
    assert log_lines(dead) == ["1 dead-letter WARNING lines for 0 dead-lettered records"]
    assert log_lines(dead + stderr, dead_lettered=1) == log_lines(stderr)
