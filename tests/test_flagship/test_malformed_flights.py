"""Malformed flights mixed into the input: no crash, every one in ``flights-dlq`` with its
reason, every good flight counted (small version of ``bench/faults/malformed_flights.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.faults.malformed_flights import malformed_records, run

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]


def test_every_kind_of_malformed_flight_is_dead_lettered_and_every_good_one_counted(kafka_bootstrap: str,
                                                                                   tmp_path: Path) -> None:
    kinds = {kind for kind, _, _ in malformed_records(200)}
    assert len(kinds) == 24
    report = run(kafka_bootstrap, malformed=600, flights=1500, lake=tmp_path / "lake")
    assert report.by_kind.keys() == kinds
    assert (report.dlq_matched, report.dead_lettered, report.dlq_unexpected, report.dlq_without_reason) == (
        600, 600, 0, 0)
    assert report.good_flights == 1500
    assert report.counted > 0 and report.counted + report.dropped_late == 1500
    assert report.exact
