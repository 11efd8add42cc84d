"""The Kafka -> Delta ingest killed with SIGKILL mid-way three times, then re-run: the table
holds exactly Kafka's offsets, none twice, every byte equal (small version of
``bench/faults/ingest_kill.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.faults.ingest_kill import kill_and_rerun, produce

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]

RECORDS = 60_000


def test_three_sigkills_then_a_rerun_leave_an_exact_table(kafka_bootstrap: str, unique_name: str,
                                                           tmp_path: Path) -> None:
    topic = f"{unique_name}-raw"
    produce(kafka_bootstrap, topic, RECORDS)
    report = kill_and_rerun(kafka_bootstrap, topic, tmp_path / "lake", RECORDS, kills=3, commit_kib=128)
    assert len(report.rows_at_kill) == 3
    assert 0 < report.rows_at_kill[0] < RECORDS, report  # the first kill landed mid-way
    assert report.records == RECORDS
    assert (report.rows, report.duplicates, report.missing, report.extra, report.mismatched) == (RECORDS, 0, 0, 0, 0)
    assert report.exact
