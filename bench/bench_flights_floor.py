"""The flagship speed phase against its Kafka I/O floor: how much of a flight's stream-thread
CPU is Kafka I/O any Python client pays, and how much is duet's processing (issue 24 item 2).

1. Loads the flights (``--flights N``, default the full year) into one embedded broker.
2. Runs duet's speed phase once in a fresh process (``bench_flights_speed``'s worker): its
   stream-thread CPU per flight, and the records it consumed and produced per flight, read
   from the end offsets of the run's topics (sources, repartition topics, changelogs, view
   and dead-letter topics).
3. Runs the floor in a fresh process: a bare confluent-kafka loop that consumes and decodes
   (orjson) as many records per flight from ``flights`` and encodes and produces as many,
   each with a delivery callback (any client that handles produce errors needs one), with
   the producer settings of the backlog speed phase (``linger.ms`` 100). No processing.

Prints both CPU figures per flight (ms), their ratio, and the budget of issue 24 item 2:
15,000 flights/s on one core is at most 0.067 ms of stream-thread CPU per flight, of which
the floor leaves the rest to processing. Targets are printed, never asserted.

    .venv/bin/python bench/bench_flights_floor.py --flights 100000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

TARGET_FLIGHTS_PER_S = 15_000


def _floor_worker(bootstrap: str, flights: int, reads: float, writes: float) -> None:
    """Consume ``reads`` x ``flights`` records of ``flights`` (re-reading it from the start),
    produce ``writes`` per record consumed / ``reads``; print one JSON line."""
    import orjson
    from confluent_kafka import Consumer, Producer, TopicPartition

    from speed_layer.admin import TopicSpec, ensure_topics

    out = f"floor-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [TopicSpec(out, 4)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "enable.idempotence": True,
                         "acks": "all", "partitioner": "murmur2_random"})
    delivered = [0]

    def on_delivery(err: object, msg: object) -> None:
        delivered[0] += 1

    def produce(key: bytes | None, value: bytes) -> None:
        try:
            producer.produce(out, key=key, value=value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
            producer.produce(out, key=key, value=value, on_delivery=on_delivery)

    to_read, produced, debt = round(reads * flights), 0, 0.0
    per_read = writes / reads
    t0 = time.thread_time()
    consumed = 0
    while consumed < to_read:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"floor-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 20})
        consumer.assign([TopicPartition("flights", p, 0) for p in range(4)])
        got = 0
        while got < flights and consumed < to_read:
            for m in consumer.consume(1000, timeout=1.0):
                value = orjson.loads(m.value())
                got += 1
                consumed += 1
                debt += per_read
                while debt >= 1:
                    debt -= 1
                    produce(m.key(), orjson.dumps(value))
                    produced += 1
                if consumed >= to_read:
                    break
            producer.poll(0)
        consumer.close()
    producer.flush(60)
    print(json.dumps({"thread_cpu_s": time.thread_time() - t0, "consumed": consumed, "produced": produced,
                      "delivered": delivered[0]}))


def _record_counts(bootstrap: str, application_id: str, inputs: list[str], outputs: list[str]) -> tuple[int, int]:
    """(records consumed, records produced) by the run: end offsets of its topics."""
    from speed_layer.admin import admin_client, end_offsets

    topics = admin_client(bootstrap).list_topics(timeout=10).topics
    internal = [t for t in topics if t.startswith(f"{application_id}-")]
    repartition = [t for t in internal if t.endswith("-repartition")]

    def total(names: list[str]) -> int:
        return sum(sum(end_offsets(bootstrap, t).values()) for t in names) if names else 0

    consumed = total(inputs) + total(repartition)
    produced = total(internal) + total(outputs)
    return consumed, produced


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flights", type=int, default=None, help="first N flights (default: the full year)")
    ap.add_argument("--floor-worker", nargs=4, metavar=("BOOTSTRAP", "FLIGHTS", "READS", "WRITES"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.floor_worker:
        bootstrap, flights, reads, writes = a.floor_worker
        _floor_worker(bootstrap, int(flights), float(reads), float(writes))
        return

    from _broker import bench_broker
    from bench_flights_speed import _run

    from pipelines.examples.flights import pipeline
    from pipelines.job.steps import load_data, reset_pipeline

    with bench_broker(None) as (bootstrap, broker_pid):
        reset_pipeline(pipeline, bootstrap, Path(os.environ.get("TMPDIR", "/tmp")) / "bench-flights-floor-lake")
        n = load_data(pipeline, bootstrap, a.flights)["flights"]
        print(f"loaded {n:,} flights; load average {os.getloadavg()[0]:.1f}", flush=True)
        duet = _run(".", sys.executable, bootstrap, broker_pid)
        outputs = [*pipeline.view_names, *([pipeline.dlq_topic] if pipeline.dlq_topic else [])]
        consumed, produced = _record_counts(bootstrap, duet["application_id"], list(pipeline.input_topics), outputs)
        reads, writes = consumed / n, produced / n
        print(f"duet: {duet['seconds']:.1f} s, {n / duet['seconds']:,.0f} flights/s; per flight {reads:.2f} records "
              f"consumed, {writes:.2f} produced (load {os.getloadavg()[0]:.1f})", flush=True)
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--floor-worker", bootstrap, str(n),
                               str(reads), str(writes)], capture_output=True, text=True, timeout=3600)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"the floor loop failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
        floor = json.loads(lines[-1])
    duet_ms = duet["thread_cpu_s"] / n * 1e3
    floor_ms = floor["thread_cpu_s"] / n * 1e3
    budget_ms = 1e3 / TARGET_FLIGHTS_PER_S
    print(f"\n{n:,} flights as a backlog (load {os.getloadavg()[0]:.1f}); stream-thread CPU per flight:")
    print(f"  floor (Kafka I/O only: {floor['consumed']:,} consumed, {floor['produced']:,} produced): {floor_ms:.4f} ms")
    print(f"  duet's speed phase: {duet_ms:.4f} ms = {duet_ms / floor_ms:.2f}x the floor; processing "
          f"{duet_ms - floor_ms:.4f} ms")
    print(f"  issue 24 item 2 ({TARGET_FLIGHTS_PER_S:,} flights/s on one core): at most {budget_ms:.4f} ms per flight, "
          f"{budget_ms - floor_ms:.4f} ms left for processing = {(duet_ms - floor_ms) / (budget_ms - floor_ms):.1f}x "
          f"less than now")


if __name__ == "__main__":
    main()
