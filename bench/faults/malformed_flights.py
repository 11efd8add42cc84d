"""Malformed flight records mixed into the flights input; prints the figures.

    .venv/bin/python -m bench.faults.malformed_flights [--malformed 10000] [--flights 20000]

Half of the malformed records go into ``flights`` before the data set, half after it. Kinds:
empty, random bytes, invalid UTF-8, truncated JSON, JSON that is not an object, objects
lacking each required field or holding it as null, ``time_hour`` not ISO-8601 or not a
string, ``minute`` out of range or not a number, JSON nested 5,000 deep, and a key that is
not UTF-8. The flagship topology runs on the speed layer until everything is consumed.

Checked: the speed layer does not crash; every malformed record is in ``flights-dlq``
exactly once, byte-equal, with the reason in its headers (``__streams.errors.exception`` /
``message`` / ``kind``, the source topic and offset); every good flight is counted: the
``departures_hourly`` counts plus the records it dropped as late equal the good flights.
``tests/test_flagship/test_malformed_flights.py`` runs a small version.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REASON_HEADERS = ("__streams.errors.exception", "__streams.errors.message", "__streams.errors.kind",
                  "__streams.errors.topic", "__streams.errors.offset")

GOOD = {"year": 2013, "month": 1, "day": 1, "dep_time": 517, "sched_dep_time": 515, "dep_delay": 2,
        "carrier": "UA", "flight": 1545, "tailnum": "N14228", "origin": "EWR", "dest": "IAH", "air_time": 227,
        "distance": 1400, "hour": 5, "minute": 15, "time_hour": "2013-01-01T10:00:00Z"}


def malformed_records(n: int, seed: int = 3) -> list[tuple[str, bytes | None, bytes]]:
    """``n`` malformed flights as ``(kind, key, value)``, cycling through the kinds."""
    rng = random.Random(seed)
    text = json.dumps(GOOD).encode()

    def without(field_: str) -> bytes:
        return json.dumps({k: v for k, v in GOOD.items() if k != field_}).encode()

    def with_(field_: str, value: object) -> bytes:
        return json.dumps({**GOOD, field_: value}).encode()

    kinds: list[tuple[str, object]] = [
        ("empty", lambda: b""),
        ("random bytes", lambda: rng.randbytes(rng.randint(1, 200))),
        ("invalid utf-8", lambda: b"\xff\xfe{\"origin\": \"\xc3\x28\"}"),
        ("truncated json", lambda: text[: rng.randint(1, len(text) - 1)]),
        ("json array", lambda: b"[1, 2, 3]"),
        ("json number", lambda: b"42"),
        ("json string", lambda: b"\"a flight\""),
        ("json null", lambda: b"null"),
        *[(f"lacks {f}", lambda f=f: without(f)) for f in ("origin", "dest", "carrier", "time_hour", "minute")],
        *[(f"null {f}", lambda f=f: with_(f, None)) for f in ("origin", "dest", "carrier", "time_hour", "minute")],
        ("time_hour not ISO", lambda: with_("time_hour", "yesterday at ten")),
        ("time_hour a number", lambda: with_("time_hour", 1357034400)),
        ("minute out of range", lambda: with_("minute", rng.choice((60, 75, -3)))),
        ("minute not a number", lambda: with_("minute", "fifteen")),
        ("nested 5000 deep", lambda: b"[" * 5000 + b"]" * 5000),
    ]
    out: list[tuple[str, bytes | None, bytes]] = []
    for i in range(n):
        if i % (len(kinds) + 1) == len(kinds):
            out.append(("key not utf-8", b"N\xff\xfe" + str(i).encode(), text))
            continue
        kind, make = kinds[i % (len(kinds) + 1)]
        out.append((kind, f"N{i:05d}".encode(), make()))  # type: ignore[operator]
    return out


@dataclass
class MalformedReport:
    """What the run found."""

    malformed: int
    good_flights: int
    by_kind: dict[str, int] = field(default_factory=dict)
    dead_lettered: int = 0
    dlq_matched: int = 0
    dlq_without_reason: int = 0
    dlq_unexpected: int = 0
    counted: int = 0
    dropped_late: int = 0
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return (self.dlq_matched == self.malformed == self.dead_lettered and not self.dlq_without_reason
                and not self.dlq_unexpected and self.counted + self.dropped_late == self.good_flights)


def _produce(bootstrap: str, records: list[tuple[str, bytes | None, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for _, key, value in records:
        producer.produce("flights", key=key, value=value, timestamp=1_357_034_400_000)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("malformed records left unsent")


def _read_topic(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:
    from confluent_kafka import Consumer, TopicPartition

    from speed_layer.admin import end_offsets

    ends = {p: e for p, e in end_offsets(bootstrap, topic).items() if e > 0}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "duet-fault-dlq", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out = []
    pending = dict(ends)
    deadline = time.monotonic() + 120
    try:
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1):
                if msg.error():
                    continue
                out.append((msg.key(), msg.value(), dict(msg.headers() or [])))
                if msg.offset() >= pending.get(msg.partition(), 0) - 1:
                    pending.pop(msg.partition(), None)
    finally:
        consumer.close()
    return out


def run(bootstrap: str, malformed: int, flights: int, lake: Path) -> MalformedReport:
    """Load the data set with ``malformed`` bad flights mixed in, run the speed layer, check."""
    from pipelines.examples.flights import pipeline
    from pipelines.examples.flights.topology import DLQ_TOPIC
    from pipelines.job.steps import load_data, reset_pipeline, run_speed
    from pipelines.produce.topics import ensure_pipeline_topics
    from serving.views.speed import read_view_topic

    bad = malformed_records(malformed)
    report = MalformedReport(malformed=malformed, good_flights=flights,
                             by_kind=dict(collections.Counter(kind for kind, _, _ in bad)))
    reset_pipeline(pipeline, bootstrap, lake)
    ensure_pipeline_topics(pipeline, bootstrap)
    _produce(bootstrap, bad[: malformed // 2])
    counts = load_data(pipeline, bootstrap, flights)
    report.good_flights = counts["flights"]
    _produce(bootstrap, bad[malformed // 2:])
    t0 = time.monotonic()
    stats = run_speed(pipeline, bootstrap, timeout_s=1800)
    report.seconds = time.monotonic() - t0
    report.dead_lettered = stats.dead_lettered
    expected = collections.Counter((key, value) for _, key, value in bad)
    for key, value, headers in _read_topic(bootstrap, DLQ_TOPIC):
        if expected[(key, value)] > 0:
            expected[(key, value)] -= 1
            report.dlq_matched += 1
        else:
            report.dlq_unexpected += 1
        if not all(headers.get(h) for h in REASON_HEADERS) or headers["__streams.errors.topic"] != b"flights":
            report.dlq_without_reason += 1
    view = read_view_topic(bootstrap, "departures_hourly", True, timeout_s=120)
    report.counted = int(sum(json.loads(v)["count"] for v in view["value"]))
    report.dropped_late = sum(1 for r in stats.late if r.store == "departures_hourly")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--malformed", type=int, default=10_000)
    parser.add_argument("--flights", type=int, default=20_000, help="good flights (the first N of 2013)")
    parser.add_argument("--bootstrap", default="")
    args = parser.parse_args()
    from speed_layer.admin import kafka_cluster

    lake = Path(tempfile.mkdtemp(prefix="duet-fault-")) / "lake"
    with contextlib.nullcontext(args.bootstrap) if args.bootstrap else kafka_cluster() as bootstrap:
        report = run(bootstrap, args.malformed, args.flights, lake)
    print(f"{report.malformed:,} malformed records of {len(report.by_kind)} kinds mixed into "
          f"{report.good_flights:,} flights; the speed layer ran {report.seconds:.1f} s without a crash")
    print(f"flights-dlq: {report.dlq_matched:,} of {report.malformed:,} malformed records, byte-equal "
          f"(dead-lettered metric {report.dead_lettered:,}); without their reason headers: "
          f"{report.dlq_without_reason}; unexpected: {report.dlq_unexpected}")
    print(f"good flights counted: departures_hourly {report.counted:,} + dropped as late {report.dropped_late:,} = "
          f"{report.counted + report.dropped_late:,} of {report.good_flights:,} -> "
          f"{'EXACT' if report.exact else 'DIFFERENT'}")
    return 0 if report.exact else 1


if __name__ == "__main__":
    sys.exit(main())
