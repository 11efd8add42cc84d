"""THE acceptance test: ``duet run --limit 2000 --json`` end to end on the session's broker.

Real everything: Apache Kafka (the session broker), the speed layer (KafkaStreams, RocksDB),
Delta ingest, the PySpark batch layer, the merged serving views and the GX checks. Runs the
console script in a subprocess, as a user would, twice on the same lake and broker: the
second run must give the same answer (fresh application id + reset). The first run relies on
the default pipeline (flights), the second names it with ``--pipeline``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipelines.examples.flights import pipeline as flights
from pipelines_testkit import log_lines

VIEW_NAMES = flights.view_names

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.timeout(1800)]

KEYS = {"records_in", "speed_records_per_s", "dropped_late", "dead_lettered", "batch_seconds", "windows",
        "agreement", "checks"}
LIMIT = 2000


def _duet_run(bootstrap: str, lake: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "GX_ANALYTICS_ENABLED": "False",
           "PYSPARK_PYTHON": sys.executable}
    env.pop("DUET_PIPELINE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "--limit", str(LIMIT), "--json", "--lake", str(lake), *args],
        env=env, capture_output=True, text=True, timeout=1500, check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"stdout must hold one JSON object, got:\n{proc.stdout}\nstderr:\n{proc.stderr[-5000:]}"
    return proc, json.loads(lines[0])


@pytest.fixture(scope="module")
def runs(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, dict[str, Any]]]:
    lake = tmp_path_factory.mktemp("e2e") / "lake"
    return [_duet_run(kafka_bootstrap, lake), _duet_run(kafka_bootstrap, lake, "--pipeline", "pipelines.examples.flights:pipeline")]


def test_summary_has_the_issue_keys(runs: list[tuple[Any, dict[str, Any]]]) -> None:
    proc, summary = runs[0]
    assert KEYS <= set(summary), proc.stderr[-3000:]
    assert summary["records_in"] == LIMIT + sum(summary["records_in_by_topic"][t] for t in ("planes", "airports",
                                                                                          "airlines"))
    assert summary["records_in_by_topic"]["flights"] == LIMIT
    assert summary["speed_records_per_s"] > 0
    assert summary["batch_seconds"] > 0
    assert summary["dead_lettered"] == 0
    assert summary["pipeline"] == "flights" and summary["lake"].endswith("/flights")
    assert set(summary["windows"]) == set(VIEW_NAMES)
    assert all(n > 0 for n in summary["windows"].values())


def test_every_check_passes(runs: list[tuple[Any, dict[str, Any]]]) -> None:
    proc, summary = runs[0]
    assert summary["checks"] == {v: True for v in VIEW_NAMES}, summary.get("check_failures")


def test_speed_and_batch_agree_apart_from_late_windows(runs: list[tuple[Any, dict[str, Any]]]) -> None:
    proc, summary = runs[0]
    assert summary["agreement"] == {v: 1.0 for v in VIEW_NAMES}, summary.get("differences")
    # the comparison is not vacuous: closed windows were compared in every view
    assert all(summary["compared"][v] > 0 for v in VIEW_NAMES), summary["compared"]
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_runs_log_no_warning_or_info_line(runs: list[tuple[Any, dict[str, Any]]]) -> None:
    """Issue 44's quiet happy path: a first run and a second on the same lake (its reset
    deletes the first's topics) log no WARNING or INFO line; their stderr holds the
    progress only."""
    for proc, _ in runs:
        assert log_lines(proc.stderr) == [], proc.stderr[-5000:]


def test_busiest_hours_come_from_the_merged_view(runs: list[tuple[Any, dict[str, Any]]]) -> None:
    """The flights pipeline's highlights table: the busiest hours of the merged view."""
    _, summary = runs[0]
    hours = summary["highlights"]["rows"]
    assert summary["highlights"]["title"].endswith("busiest hours (merged departures_hourly)")
    assert len(hours) == 5
    counts = [int(h["departures"]) for h in hours]
    assert counts == sorted(counts, reverse=True)
    for h in hours:
        by_origin = [part.split() for part in h["by origin"].split(", ")]
        assert sum(int(n) for _, n in by_origin) == int(h["departures"])


def test_a_second_run_on_the_same_lake_and_broker_is_consistent(runs: list[tuple[Any, dict[str, Any]]]) -> None:
    (p1, first), (p2, second) = runs
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert first["application_id"] != second["application_id"]
    for key in ("records_in", "windows", "checks", "agreement", "ingested", "highlights"):
        assert first[key] == second[key], key


def test_the_batch_layer_runs_during_the_speed_phase(runs: list[tuple[Any, dict[str, Any]]]) -> None:
    """On a loaded backlog the inputs are archived and recomputed while the speed layer runs;
    the dead-letter topic, which the speed layer writes, is archived after it."""
    proc, summary = runs[0]
    assert summary["batch_during_speed"] is True, proc.stderr[-3000:]
    assert set(summary["ingested"]) == {*flights.input_topics, flights.dlq_topic}
    assert summary["ingested"]["flights"] == LIMIT
    assert list(summary["phase_seconds"]) == ["reset", "load", "speed", "ingest", "batch", "publish", "checks",
                                              "agreement"]
