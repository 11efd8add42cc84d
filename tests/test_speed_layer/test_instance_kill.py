"""SIGKILLs of random instances out of three under load, exactly_once_v2: nothing lost,
nothing counted twice, as a read_committed consumer sees the outputs (small version of
``bench/faults/instance_kill.py``; Kafka's ``EosIntegrationTest`` kills stream threads the
same way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.faults.instance_kill import describe, run

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]


def test_sigkills_under_exactly_once_lose_and_repeat_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    report = run(kafka_bootstrap, kills=4, guarantee="exactly_once_v2", work_dir=tmp_path, rate=500.0, seed=7)
    assert report.records > 1000, describe(report)
    assert report.errors == [], describe(report)
    assert (report.lost_keys, report.duplicated_keys, report.repeated_counts) == (0, 0, 0), describe(report)
