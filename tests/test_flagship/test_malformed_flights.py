"""Malformed flights mixed into the input: no crash, every one in ``flights-dlq`` with its
reason, every good flight counted (small version of ``bench/faults/malformed_flights.py``)."""

from __future__ import annotations

import json

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


def test_the_timestamp_extractor_reuses_the_parse_of_the_same_flight_only() -> None:
    """The serde's validation computes the scheduled departure once; the extractor takes it
    for that very object and computes it for any other (another thread's, a copy)."""
    from pipelines.examples.flights.topology import FLIGHT_SERDE, flight_timestamp, scheduled_departure_ms

    a = {"origin": "EWR", "dest": "IAH", "carrier": "UA", "time_hour": "2013-01-01T10:00:00Z", "minute": 15}
    b = {**a, "time_hour": "2013-06-30T23:00:00Z", "minute": 59}
    pa = FLIGHT_SERDE.deserialize(json.dumps(a).encode())
    pb = FLIGHT_SERDE.deserialize(json.dumps(b).encode())
    assert flight_timestamp(None, pb, -1, -1) == scheduled_departure_ms(b) == 1372636740000
    assert flight_timestamp(None, pa, -1, -1) == scheduled_departure_ms(a) == 1357035300000
    assert flight_timestamp(None, dict(pb), -1, -1) == 1372636740000
