"""The two user reports of duet issue 25 (items 2 and 3) on the flights topology in the
TopologyTestDriver: a tombstone on ``flights`` (its timestamp extractor has no flight to
read) and a flight with a wrong-typed field (``dest`` a number, ``carrier`` an object,
``origin`` a list) are dead-lettered with their reason, and the valid flights around
them are all counted (the views equal those of the valid flights alone).
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from pipelines.examples.flights.data import flight_records
from pipelines.examples.flights.topology import DLQ_TOPIC
from speed_layer import Serdes
from speed_layer.testing import TopologyTestDriver

from .driver_kit import flights_driver, read_views

N = 40


@pytest.fixture(scope="module")
def records() -> list[Any]:
    return flight_records(N)


def _driver() -> TopologyTestDriver:
    return flights_driver("bad-flights-test")


def _pipe(d: TopologyTestDriver, r: Any) -> None:
    d.pipe_raw("flights", r.key.encode(), json.dumps(r.value).encode(), r.timestamp)


def _run(records: list[Any], bad_at: int | None = None, bad: Any = None) -> tuple[dict[str, dict], list[Any], int]:
    """Views, dead letters and dropped records of ``records`` with ``bad(d)`` piped before
    record ``bad_at``."""
    with _driver() as d:
        for i, r in enumerate(records):
            if i == bad_at:
                bad(d)
            _pipe(d, r)
        dead = d.create_output_topic(DLQ_TOPIC, Serdes.Bytes(), Serdes.Bytes()).read_records_to_list()
        return read_views(d), dead, d.dropped_records()


@pytest.fixture(scope="module")
def good_views(records: list[Any]) -> dict[str, dict]:
    views, dead, dropped = _run(records)
    assert dead == [] and dropped == 0
    assert all(views.values())
    return views


@pytest.mark.parametrize("bad_at", [0, N // 2], ids=["before-any-flight", "after-a-flight"])
def test_a_tombstone_on_flights_is_dead_lettered_and_the_flights_around_it_counted(records, good_views, bad_at) -> None:
    # the user's reproduction: ``pipe_raw('flights', b'N12345', None, ts)``; before any
    # valid flight the extractor used to return 0 (a wrong timestamp), after one it raised TypeError
    views, dead, dropped = _run(records, bad_at, lambda d: d.pipe_raw("flights", b"N12345", None, records[bad_at].timestamp))
    assert views == good_views
    [letter] = dead
    assert (letter.key, letter.value, letter.timestamp) == (b"N12345", None, records[bad_at].timestamp)
    h = dict(letter.headers)
    assert h["__streams.errors.kind"] == b"timestamp_extraction"
    assert h["__streams.errors.exception"] == b"InvalidFlightError"
    assert b"null (a tombstone)" in h["__streams.errors.message"]
    assert (h["__streams.errors.topic"], h["__streams.errors.offset"]) == (b"flights", str(bad_at).encode())
    assert dropped == 1


@pytest.mark.parametrize("field, value, kind, exception", [
    # the lookups of the joins by dest (airports) and carrier (airlines) serialize the key:
    # the SerializationException of a processor goes to the processing exception handler
    ("dest", 5, b"processing", b"SerializationException"),
    ("carrier", {"code": "UA"}, b"processing", b"SerializationException"),
    # the per-origin windowed views' output key serde (WindowedJSON(String)) rejects a
    # list: production.exception.handler (KIP-399), here dead_letter
    ("origin", ["EWR"], b"serialization", b"SerializationException"),
])
def test_a_wrong_typed_field_is_dead_lettered_and_the_flights_around_it_counted(records, good_views, field, value, kind,
                                                                               exception) -> None:
    at = N // 2
    flight = {**records[at].value, field: value}

    def bad(d: TopologyTestDriver) -> None:
        d.pipe_raw("flights", b"N99999", json.dumps(flight).encode(), records[at].timestamp)

    views, dead, dropped = _run(records, at, bad)
    assert dead, "the bad flight must be dead-lettered"
    for letter in dead:
        h = dict(letter.headers)
        assert (h["__streams.errors.kind"], h["__streams.errors.exception"]) == (kind, exception)
        assert h["__streams.errors.message"] and h["__streams.errors.stacktrace"]
    if field == "origin":
        # Kafka's CONTINUE drops the failing sends only: the views keyed by origin lack the
        # bad flight, the views keyed by dest and tail number count it (its dest is valid)
        assert len(dead) == dropped and 1 <= len(dead) <= 2
        assert {dict(x.headers)["__streams.errors.sink.topic"] for x in dead} <= {b"departures_hourly", b"same_tz_hourly"}
        for name in ("departures_hourly", "same_tz_hourly"):
            assert views[name] == good_views[name]
    else:
        assert len(dead) == dropped == 1
        # the joins run after the repartition by dest: the source record of the error (the
        # dead letter's key, value and coordinates, as KIP-1034's sourceRawKey/Value) is the
        # flight's record on the repartition topic
        h = dict(dead[0].headers)
        assert h["__streams.errors.topic"] == b"bad-flights-test-flights-by-dest-repartition"
        assert dead[0].timestamp == records[at].timestamp
        assert views == good_views
