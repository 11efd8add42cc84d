"""The broker paused (SIGSTOP) and killed and restarted on the same data, under load, with
exactly_once_v2; prints the figures.

    .venv/bin/python -m bench.faults.broker_outage [--pause-s 30] [--records 40000]

One speed-layer instance counts records per key (``group_by_key().count()``, 4 partitions,
exactly_once_v2) and writes the counts to an output topic, while a producer sends
``--records`` records in a steady stream. Mid-way the broker is paused for ``--pause-s``
seconds, then, later, SIGKILLed and restarted on the same log dir and ports. The instance is
never restarted. Checked at the end: the instance is still RUNNING, and the last count per
key in the output topic (read_committed) and in the store equal the records produced per
key (none lost, none counted twice). Exits 1 otherwise.
``tests/test_speed_layer/test_broker_outage.py`` runs a small version.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.faults.outputs import last_values

PARTITIONS = 4
KEYS = [f"k{i}" for i in range(50)]


@dataclass
class OutageReport:
    """Figures of the run (seconds of wall time)."""

    records: int
    pause_s: float
    guarantee: str = "exactly_once_v2"
    state_at_end: str = ""
    catch_up_after_pause_s: float = 0.0
    catch_up_after_restart_s: float = 0.0
    wrong_output_keys: int = -1
    wrong_store_keys: int = -1
    errors: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.state_at_end == "RUNNING" and self.wrong_output_keys == 0 and self.wrong_store_keys == 0


def run(broker: object, records: int, pause_s: float, state_dir: Path,
        guarantee: str = "exactly_once_v2") -> OutageReport:
    """See the module docstring; ``broker`` is a started ``EmbeddedKafka``."""
    from confluent_kafka import Producer

    from speed_layer import Consumed, KafkaStreams, Materialized, Produced, Serdes, StreamsBuilder
    from speed_layer.admin import TopicSpec, ensure_topics

    bootstrap = broker.bootstrap_servers  # type: ignore[attr-defined]
    name = f"fault-outage-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [TopicSpec(f"{name}-in", PARTITIONS), TopicSpec(f"{name}-out", PARTITIONS)])
    b = StreamsBuilder()
    (b.stream(f"{name}-in", Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON()))
      .group_by_key().count(Materialized.as_("counts"))
      .to_stream().to(f"{name}-out", Produced(key_serde=Serdes.String(), value_serde=Serdes.JSON())))
    streams = KafkaStreams(b.build(), {"application.id": name, "bootstrap.servers": bootstrap,
                                       "processing.guarantee": guarantee, "commit.interval.ms": 100,
                                       "state.dir": str(state_dir), "session.timeout.ms": 45_000})
    report = OutageReport(records=records, pause_s=pause_s, guarantee=guarantee)
    expected: Counter[str] = Counter()
    produced = threading.Event()

    def produce() -> None:  # a steady stream: records over ~ (3 * pause_s + 20) s
        producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                             "enable.idempotence": True, "message.timeout.ms": 300_000})
        gap = (3 * pause_s + 20) / records
        for i in range(records):
            key = KEYS[i % len(KEYS)]
            producer.produce(f"{name}-in", key=key.encode(), value=b'{"i": %d}' % i)
            expected[key] += 1
            producer.poll(0)
            time.sleep(gap)
        if producer.flush(300) != 0:
            report.errors.append("the producer could not deliver every record")
        produced.set()

    streams.start()
    feeder = threading.Thread(target=produce, daemon=True)
    try:
        feeder.start()
        time.sleep(pause_s / 2 + 5)
        broker.pause()  # type: ignore[attr-defined]
        time.sleep(pause_s)
        broker.resume()  # type: ignore[attr-defined]
        t0 = time.monotonic()
        if not streams.wait_until_caught_up(timeout_s=300):
            report.errors.append(f"not caught up after the pause (state {streams.state})")
        report.catch_up_after_pause_s = time.monotonic() - t0
        broker.kill()  # type: ignore[attr-defined]
        time.sleep(5)
        broker.restart()  # type: ignore[attr-defined]
        t0 = time.monotonic()
        feeder.join(timeout=3 * pause_s + 600)
        if not produced.is_set():
            report.errors.append("the producer did not finish")
        if not streams.wait_until_caught_up(timeout_s=300):
            report.errors.append(f"not caught up after the restart (state {streams.state})")
        report.catch_up_after_restart_s = time.monotonic() - t0
        report.state_at_end = streams.state
        report.errors += [repr(e) for e in streams.errors]
        out = last_values(bootstrap, f"{name}-out")
        report.wrong_output_keys = sum(1 for k in KEYS if out.get(k) != expected[k])
        if streams.state == "RUNNING":
            store = streams.store("counts")
            report.wrong_store_keys = sum(1 for k in KEYS if store.get(k) != expected[k])
    finally:
        streams.close()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pause-s", type=float, default=30.0)
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--guarantee", choices=("exactly_once_v2", "at_least_once"), default="exactly_once_v2")
    args = parser.parse_args()
    from speed_layer.admin import EmbeddedKafka

    with tempfile.TemporaryDirectory(prefix="duet-outage-") as tmp, EmbeddedKafka(Path(tmp) / "kafka") as broker:
        report = run(broker, args.records, args.pause_s, Path(tmp) / "state", args.guarantee)
    print(f"{report.records:,} records, {report.guarantee}; broker paused {report.pause_s:.0f} s: caught up "
          f"{report.catch_up_after_pause_s:.1f} s after resuming; broker SIGKILLed and restarted on its data: caught "
          f"up {report.catch_up_after_restart_s:.1f} s after the restart (production still running)")
    print(f"instance state at the end: {report.state_at_end} (never restarted); keys with a wrong final count: "
          f"output topic {report.wrong_output_keys}, store {report.wrong_store_keys}; errors: {report.errors or 'none'}"
          f" -> {'EXACT' if report.exact else 'DIFFERENT'}")
    return 0 if report.exact else 1


if __name__ == "__main__":
    sys.exit(main())
