"""The flagship topology in the TopologyTestDriver against the independent pandas reference.

Records are piped in timestamp order here, so no record is late and every view must equal
the reference exactly; a second test pipes them in departure order (real late data) and
checks that only windows touched by late drops differ.
"""
from __future__ import annotations

import json

import pytest

from pipelines.examples.flights.data import flight_records, table_records
from pipelines.examples.flights.topology import VIEW_NAMES as VIEWS
from speed_layer import Serdes
from speed_layer.testing import TopologyTestDriver

from .driver_kit import flights_driver, read_views

from . import reference

N = 1500


@pytest.fixture(scope="module")
def records():
    return flight_records(N)


def _driver() -> TopologyTestDriver:
    return flights_driver("flagship-test")


def _reference(records) -> dict[str, dict]:
    f = reference.enriched_frame([r.value for r in records], [r.timestamp for r in records],
                                 [r.value for r in table_records("planes")], [r.value for r in table_records("airports")])
    return reference.all_views(f)


def test_in_timestamp_order_every_view_equals_the_pandas_reference(records):
    d = _driver()
    inp = d.create_input_topic("flights", Serdes.String(), Serdes.String())
    for r in sorted(records, key=lambda r: r.timestamp):
        inp.pipe_input(r.key, json.dumps(r.value), r.timestamp)
    assert d.dropped_records() == 0
    speed = read_views(d)
    ref = _reference(records)
    for name in VIEWS:
        assert speed[name] == ref[name], name
    # the window stores hold the same (queryable) results
    store = d.get_window_store("departures_hourly")
    for (origin, start, end), value in list(ref["departures_hourly"].items())[:50]:
        assert store.fetch(origin, start) == value
    d.close()


def test_in_departure_order_late_records_are_dropped_and_only_their_windows_differ(records):
    d = _driver()
    inp = d.create_input_topic("flights", Serdes.String(), Serdes.String())
    for r in records:  # the order the flights actually left: delayed flights arrive late
        inp.pipe_input(r.key, json.dumps(r.value), r.timestamp)
    assert d.dropped_records() > 0
    speed = read_views(d)
    ref = _reference(records)
    # windows of the hourly view: a difference is only possible where the reference has more
    diffs = {k for k in ref["departures_hourly"] if speed["departures_hourly"].get(k) != ref["departures_hourly"][k]}
    assert diffs, "departure order must produce late drops in some hourly window"
    for k in diffs:
        got = speed["departures_hourly"].get(k, {"count": 0})
        assert got["count"] < ref["departures_hourly"][k]["count"]
    d.close()
