"""State restoration from a changelog: its rate, and a clean restart that restores nothing.

    .venv/bin/python -m bench.faults.restore [--records 1000000] [--bootstrap HOST:PORT]

A KTable of ``--records`` distinct keys (``stream.to_table`` materialized as ``kv``, 4
partitions, RocksDB) is built by the speed layer, which writes its changelog. Then:

1. a clean close and a restart on the same state directory: the ``.checkpoint`` files say
   the stores are current, so nothing is restored (Kafka's ``OffsetCheckpoint``);
2. the state directory wiped (a new machine, or a lost disk) and a restart: every record is
   restored from the changelog; the rate is ``records / seconds to caught up``.

Both restarts must answer interactive queries with the values written (sampled keys, and the
entry count). Prints the figures; exits 1 on a wrong answer.
``tests/test_speed_layer/test_restore_figures.py`` runs a small version.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

PARTITIONS = 4


@dataclass
class RestoreReport:
    """Figures of the run (seconds are wall time from ``start()`` to caught up)."""

    records: int
    build_s: float = 0.0
    clean_restart_s: float = 0.0
    clean_restart_restored: int = -1
    wiped_restart_s: float = 0.0
    wiped_restart_restored: int = -1
    wrong_answers: int = 0
    entries: list[int] = field(default_factory=list)

    @property
    def restore_rate(self) -> float:
        return self.wiped_restart_restored / self.wiped_restart_s if self.wiped_restart_s else 0.0

    @property
    def exact(self) -> bool:
        return (self.clean_restart_restored == 0 and self.wiped_restart_restored == self.records
                and not self.wrong_answers and self.entries == [self.records, self.records])


def _produce(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    from speed_layer.admin import TopicSpec, ensure_topics

    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS, {"retention.ms": "-1"})])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500_000})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=f"k{i:08d}".encode(), value=json.dumps({"v": i}).encode(),
                                 timestamp=1_356_998_400_000 + i)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError("records left unsent")


def _run(topology: object, config: dict[str, object], timeout_s: float) -> tuple[object, float, int]:
    """Start, wait until caught up; return ``(streams, seconds, restored records)``."""
    from speed_layer import KafkaStreams

    streams = KafkaStreams(topology, config)
    t0 = time.monotonic()
    streams.start()
    if not streams.wait_until_caught_up(timeout_s=timeout_s):
        streams.close()
        raise RuntimeError(f"not caught up within {timeout_s} s (state {streams.state})")
    return streams, time.monotonic() - t0, int(streams.metrics()["restore-total"])


def _check(streams: object, records: int, report: RestoreReport, rng: random.Random) -> None:
    store = streams.store("kv")  # type: ignore[attr-defined]
    report.entries.append(int(store.approximate_num_entries()))
    for i in rng.sample(range(records), min(records, 200)):
        if store.get(f"k{i:08d}") != {"v": i}:
            report.wrong_answers += 1


def run(bootstrap: str, records: int, state_dir: Path, timeout_s: float = 1800) -> RestoreReport:
    """Build the table, then the clean and the wiped restarts (see the module docstring)."""
    from speed_layer import Consumed, Materialized, Serdes, StreamsBuilder

    rng = random.Random(5)
    name = f"fault-restore-{uuid.uuid4().hex[:8]}"
    _produce(bootstrap, f"{name}-input", records)
    b = StreamsBuilder()
    b.stream(f"{name}-input", Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON())).to_table(
        materialized=Materialized.as_("kv"))
    topology = b.build()
    config = {"application.id": name, "bootstrap.servers": bootstrap, "state.dir": str(state_dir)}
    report = RestoreReport(records=records)
    streams, report.build_s, _ = _run(topology, config, timeout_s)
    streams.close()  # clean: commit and checkpoint
    streams, report.clean_restart_s, report.clean_restart_restored = _run(topology, config, timeout_s)
    _check(streams, records, report, rng)
    streams.close()
    shutil.rmtree(state_dir / name)  # the state is gone; the changelog is not
    streams, report.wiped_restart_s, report.wiped_restart_restored = _run(topology, config, timeout_s)
    _check(streams, records, report, rng)
    streams.close()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", default="")
    args = parser.parse_args()
    from speed_layer.admin import kafka_cluster

    state_dir = Path(tempfile.mkdtemp(prefix="duet-restore-"))
    try:
        with contextlib.nullcontext(args.bootstrap) if args.bootstrap else kafka_cluster() as bootstrap:
            report = run(bootstrap, args.records, state_dir)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    print(f"built a KTable of {report.records:,} keys (changelog of {report.records:,} records) in "
          f"{report.build_s:.1f} s")
    print(f"clean restart: {report.clean_restart_restored:,} records restored, caught up in "
          f"{report.clean_restart_s:.1f} s")
    print(f"state wiped: {report.wiped_restart_restored:,} records restored in {report.wiped_restart_s:.1f} s = "
          f"{report.restore_rate:,.0f} records/s")
    print(f"answers after each restart: entries {report.entries}, wrong sampled values {report.wrong_answers} -> "
          f"{'EXACT' if report.exact else 'DIFFERENT'}")
    return 0 if report.exact else 1


if __name__ == "__main__":
    sys.exit(main())
