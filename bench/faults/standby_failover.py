"""Failover with and without a standby replica: records restored and time until the
survivor serves the moved tasks; prints the figures.

    .venv/bin/python -m bench.faults.standby_failover [--records 200000]

Two instances of one application count records per key (``group_by_key().count()``, 4
partitions, RocksDB, changelog-backed) over ``--records`` distinct keys, so each task's
changelog holds a record per key. Once both run and are caught up, instance A leaves
(``close()``) and B takes over A's tasks. Measured on B: the changelog records it restored
for them and the seconds from A's leaving until B runs every task, caught up. Run twice:
``num.standby.replicas`` 0 (B restores the whole changelog of A's tasks) and 1 (B kept
standbys of A's tasks and restores only the tail past their checkpoints). Both runs must end
with every key's count exact in B's store.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PARTITIONS = 4
ALL_TASKS = {f"0_{p}" for p in range(PARTITIONS)}


@dataclass
class FailoverReport:
    """Figures of one failover."""

    standby_replicas: int
    records: int
    moved_tasks: int = 0
    restored: int = -1
    failover_s: float = 0.0
    wrong_keys: int = -1
    standby_updates: int = 0


def _build(topic: str) -> Any:
    from speed_layer import Consumed, Materialized, Serdes, StreamsBuilder

    b = StreamsBuilder()
    b.stream(topic, Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON())).group_by_key().count(Materialized.as_("counts"))
    return b.build()


def _active(streams: Any) -> set[str]:
    return {t for th in streams.local_thread_metadata() for t in th["active_tasks"]}


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def run(bootstrap: str, records: int, standby_replicas: int, work_dir: Path, timeout_s: float = 600) -> FailoverReport:
    """One failover (see the module docstring); ``bootstrap``: a running broker.

    Raises:
        TimeoutError: the instances did not settle or take over within ``timeout_s`` seconds.
    """
    from confluent_kafka import Producer

    from speed_layer import KafkaStreams
    from speed_layer.admin import TopicSpec, ensure_topics

    name = f"fault-standby-{uuid.uuid4().hex[:8]}"
    topic = f"{name}-in"
    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS)])
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=f"key-{i}".encode(), value=b"1")
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
    assert producer.flush(120) == 0
    config = {"application.id": name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
              "session.timeout.ms": 6000, "num.standby.replicas": standby_replicas}
    a = KafkaStreams(_build(topic), {**config, "state.dir": str(work_dir / "a")})
    b = KafkaStreams(_build(topic), {**config, "state.dir": str(work_dir / "b")})
    report = FailoverReport(standby_replicas, records)
    try:
        a.start()
        b.start()

        def settled() -> bool:
            ta, tb = _active(a), _active(b)
            if not (ta and tb and ta | tb == ALL_TASKS and a.state == b.state == "RUNNING"):
                return False
            return standby_replicas == 0 or set(b.standby_tasks()) == ta

        _wait(settled, timeout_s, "the two instances did not settle")
        if not (a.wait_until_caught_up(timeout_s) and b.wait_until_caught_up(timeout_s)):
            raise TimeoutError("not caught up")
        moved = _active(a)
        report.moved_tasks = len(moved)
        if standby_replicas:
            # the standbys applied the changelogs and checkpointed (commit.interval.ms)
            _wait(lambda: sum(b.metrics()["tasks"].get(t, {}).get("update-total", 0) for t in moved) >= 0.99 * records * len(moved) / PARTITIONS
                  - 1000, timeout_s, "the standbys did not catch up")
            time.sleep(0.5)
            report.standby_updates = sum(b.metrics()["tasks"].get(t, {}).get("update-total", 0) for t in moved)
        before = b.metrics()["restore-total"]
        t0 = time.monotonic()
        a.close(60)
        _wait(lambda: _active(b) == ALL_TASKS and b.state == "RUNNING", timeout_s, "B did not take over")
        if not b.wait_until_caught_up(timeout_s):
            raise TimeoutError("B not caught up")
        report.failover_s = time.monotonic() - t0
        report.restored = b.metrics()["restore-total"] - before
        store = b.store("counts")
        report.wrong_keys = sum(1 for i in range(0, records, max(1, records // 2000)) if store.get(f"key-{i}") != 1)
        report.wrong_keys += abs(sum(1 for _ in store.all()) - records)
    finally:
        a.close(60)
        b.close(60)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    from speed_layer.admin import EmbeddedKafka

    reports = []
    with tempfile.TemporaryDirectory(prefix="duet-standby-") as tmp, EmbeddedKafka(Path(tmp) / "kafka") as broker:
        for n in (0, 1):
            reports.append(run(broker.bootstrap_servers, args.records, n, Path(tmp) / f"run-{n}"))
    for r in reports:
        print(f"num.standby.replicas={r.standby_replicas}: {r.moved_tasks} task(s) moved, {r.restored:,} changelog records "
              f"restored, serving all {PARTITIONS} tasks caught up {r.failover_s:.2f} s after the other instance left; "
              f"wrong keys {r.wrong_keys}" + (f"; standby updates applied before {r.standby_updates:,}" if r.standby_replicas else ""))
    without, with_ = reports
    if with_.failover_s > 0:
        print(f"failover with a standby: {without.failover_s / with_.failover_s:.1f}x faster, "
              f"{without.restored - with_.restored:,} fewer records restored")
    return 0 if all(r.wrong_keys == 0 for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
