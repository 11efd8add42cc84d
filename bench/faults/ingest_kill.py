"""SIGKILL the Kafka -> Delta ingest mid-way, several times, then re-run it; prints the figures.

    .venv/bin/python -m bench.faults.ingest_kill [--records 300000] [--kills 3] [--bootstrap HOST:PORT]

A topic of 4 partitions gets ``--records`` records: random binary keys and values (some null,
some empty, up to 2 KiB), headers on some, timestamps out of order. An ingest process
(``batch_layer.ingest.ingest_topic``, a Delta commit every ``--commit-kib`` KiB so that kills
land between and during commits) is SIGKILLed at a random moment after its first commit,
``--kills`` times; then one more run completes. Each kill lands a few ms after the run's first or
second Delta commit. The Delta table must then hold exactly Kafka's
offsets of every partition, no offset twice, and every key, value, timestamp and header
byte-equal to Kafka's. Prints the rows after each kill and the comparison; exits 1 on any
difference. ``tests/test_batch_layer/test_ingest_kill.py`` runs a small version.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PARTITIONS = 4


@dataclass
class KillReport:
    """What the run found. ``rows_at_kill``: rows in the table when each kill landed."""

    records: int
    rows_at_kill: list[int] = field(default_factory=list)
    rows: int = 0
    duplicates: int = 0
    missing: int = 0
    extra: int = 0
    mismatched: int = 0

    @property
    def exact(self) -> bool:
        return self.rows == self.records and not (self.duplicates or self.missing or self.extra or self.mismatched)


def produce(bootstrap: str, topic: str, records: int, seed: int = 7) -> None:
    """Create ``topic`` (4 partitions) and produce ``records`` random records into it."""
    from confluent_kafka import Producer

    from speed_layer.admin import TopicSpec, ensure_topics

    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS, {"retention.ms": "-1"})])
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                         "queue.buffering.max.messages": 500_000})
    for i in range(records):
        key = None if i % 97 == 0 else rng.randbytes(rng.randint(0, 24))
        value = None if i % 89 == 0 else rng.randbytes(rng.choice((0, 8, 64, 300, 2048)))
        headers = [("h", rng.randbytes(4)), ("reason", b"x" * (i % 5))] if i % 7 == 0 else None
        ts = 1_356_998_400_000 + rng.randint(0, 365 * 86_400_000)
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records left unsent")


def _commits(log_dir: Path) -> int:
    """Delta commits so far (``_delta_log/*.json``)."""
    try:
        return sum(1 for name in os.listdir(log_dir) if name.endswith(".json"))
    except FileNotFoundError:
        return 0


def _rows(lake: Path, topic: str) -> int:
    from batch_layer.delta.io import read_arrow, table_exists
    from batch_layer.ingest import raw_table_path

    path = raw_table_path(lake, topic)
    return read_arrow(path, columns=["offset"]).num_rows if table_exists(path) else 0


def kill_and_rerun(bootstrap: str, topic: str, lake: Path, records: int, kills: int, commit_kib: int,
                   seed: int = 11) -> KillReport:
    """Run the ingest ``kills`` times, SIGKILLing each mid-way, then once to the end."""
    rng = random.Random(seed)
    report = KillReport(records=records)
    cmd = [sys.executable, "-m", "bench.faults.ingest_kill", "--worker", "--bootstrap", bootstrap, "--topic", topic,
           "--lake", str(lake), "--commit-kib", str(commit_kib)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    log_dir = lake / "raw" / topic / "_delta_log"
    for _ in range(kills):
        # kill right after this run's 1st or 2nd Delta commit, a few ms into the next one
        target = _commits(log_dir) + rng.randint(1, 2)
        proc = subprocess.Popen(cmd, env=env)
        deadline = time.monotonic() + 300
        while _commits(log_dir) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.03))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        report.rows_at_kill.append(_rows(lake, topic))
    from batch_layer.ingest import ingest_topic

    ingest_topic(None, bootstrap, topic, lake, commit_bytes=commit_kib << 10)
    compare(bootstrap, topic, lake, report)
    return report


def compare(bootstrap: str, topic: str, lake: Path, report: KillReport) -> None:
    """Fill ``report`` with the comparison of the Delta table with the topic, record by record."""
    from confluent_kafka import Consumer, TopicPartition

    from batch_layer.delta.io import read_arrow
    from batch_layer.ingest import raw_table_path

    table = read_arrow(raw_table_path(lake, topic)).to_pylist()
    report.rows = len(table)
    archived: dict[tuple[int, int], dict] = {}
    for row in table:
        at = (row["partition"], row["offset"])
        if at in archived:
            report.duplicates += 1
        archived[at] = row
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "duet-fault-compare",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    ends, seen = 0, 0
    try:
        while ends < PARTITIONS:
            for msg in consumer.consume(10_000, timeout=5):
                if msg.error():
                    ends += 1
                    continue
                seen += 1
                row = archived.pop((msg.partition(), msg.offset()), None)
                if row is None:
                    report.missing += 1
                    continue
                headers = [(h["key"], h["value"]) for h in row["headers"]]
                if (row["key"], row["value"], row["timestamp"], headers) != (
                        msg.key(), msg.value(), msg.timestamp()[1], list(msg.headers() or [])):
                    report.mismatched += 1
    finally:
        consumer.close()
    report.extra = len(archived)
    report.records = seen


def _worker(args: argparse.Namespace) -> None:
    from batch_layer.ingest import ingest_topic

    ingest_topic(None, args.bootstrap, args.topic, Path(args.lake), commit_bytes=args.commit_kib << 10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--commit-kib", type=int, default=2048, help="a Delta commit per this many KiB")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    parser.add_argument("--topic", default="")
    parser.add_argument("--lake", default="")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return 0
    import tempfile
    import uuid

    from speed_layer.admin import kafka_cluster

    topic = args.topic or f"fault-ingest-{uuid.uuid4().hex[:8]}"
    lake = Path(args.lake or tempfile.mkdtemp(prefix="duet-fault-")) / "lake"
    with contextlib.nullcontext(args.bootstrap) if args.bootstrap else kafka_cluster() as bootstrap:
        t0 = time.monotonic()
        produce(bootstrap, topic, args.records)
        print(f"produced {args.records:,} records into {topic} in {time.monotonic() - t0:.1f} s")
        t0 = time.monotonic()
        report = kill_and_rerun(bootstrap, topic, lake, args.records, args.kills, args.commit_kib)
    print(f"rows in the table when each SIGKILL landed: {', '.join(f'{n:,}' for n in report.rows_at_kill)}")
    print(f"after the re-run ({time.monotonic() - t0:.1f} s in all): {report.rows:,} rows for {report.records:,} "
          f"Kafka records; duplicates {report.duplicates}, missing {report.missing}, extra {report.extra}, "
          f"not byte-equal {report.mismatched} -> {'EXACT' if report.exact else 'DIFFERENT'}")
    return 0 if report.exact else 1


if __name__ == "__main__":
    sys.exit(main())
