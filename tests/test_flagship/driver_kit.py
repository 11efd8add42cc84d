"""The flights topology in the ``TopologyTestDriver`` with its dimension tables loaded, as
the flagship tests share it."""
from __future__ import annotations

from pipelines.examples.flights.data import table_records
from pipelines.examples.flights.topology import STREAMS_CONFIG, build_topology
from speed_layer import Serdes
from speed_layer.testing import TopologyTestDriver


def flights_driver(application_id: str) -> TopologyTestDriver:
    """A driver of the flights topology (its Streams config, ``application_id``) with every
    plane, airport and airline piped in at their table timestamp."""
    d = TopologyTestDriver(build_topology(), {**STREAMS_CONFIG, "application.id": application_id})
    for name in ("planes", "airports", "airlines"):
        t = d.create_input_topic(name, Serdes.String(), Serdes.JSON())
        for r in table_records(name):
            t.pipe_input(r.key, r.value, r.timestamp)
    return d
