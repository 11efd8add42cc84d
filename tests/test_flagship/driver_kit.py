"""The flights topology in the ``TopologyTestDriver`` with its dimension tables loaded, and
its views read back, as the flagship tests share them."""
from __future__ import annotations

from pipelines.examples.flights.data import table_records
from pipelines.examples.flights.topology import STREAMS_CONFIG, VIEW_NAMES, build_topology
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


def read_views(d: TopologyTestDriver) -> dict[str, dict]:
    """Each view's output topic read back: ``{view: {(key, start, end): value}}``, the last
    value per window, a tombstone removing it."""
    out: dict[str, dict] = {}
    for name in VIEW_NAMES:
        rows: dict = {}
        for rec in d.create_output_topic(name, Serdes.WindowedJSON(Serdes.String()), Serdes.JSON()).read_records_to_list():
            k = (rec.key.key, rec.key.window.start, rec.key.window.end)
            if rec.value is None:
                rows.pop(k, None)
            else:
                rows[k] = rec.value
        out[name] = rows
    return out
