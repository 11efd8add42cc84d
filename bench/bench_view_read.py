"""Reading topics to their end outside the streams runtime: the serving layer's view reader
(``serving.views.speed.read_view_topic``, which ``duet run``'s publish phase waits for) and
the ingest (``batch_layer.ingest.kafka_to_delta.ingest_topic``), with the consumer settings
of ``speed_layer.admin.reader_config`` against librdkafka's defaults (``client_config``
alone: the next fetch of a partition is held back ``fetch.queue.backoff.ms`` = 1000 ms
whenever the local queue holds more than ``queued.min.messages``), interleaved round by round.

Produces ``--records`` records (default 2,000,000) shaped like a windowed view topic (keys
``{"key", "window_start", "window_end"}``, 105 keys, 4 partitions) into one broker, then
prints, per round and side, wall and CPU seconds, and the ratio of median wall seconds.
No target is asserted.

    .venv/bin/python bench/bench_view_read.py --records 2000000 --rounds 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _broker import bench_broker  # noqa: E402

TOPIC = "bench-view-read"


def _produce(bootstrap: str, records: int) -> None:
    from confluent_kafka import Producer

    from speed_layer.admin import TopicSpec, client_config, ensure_topics

    ensure_topics(bootstrap, [TopicSpec(TOPIC, 4, {"retention.ms": "-1"})])
    producer = Producer(client_config(bootstrap, {"linger.ms": 50, "queue.buffering.max.messages": 1_000_000}))
    keys = [f"D{i:03d}" for i in range(105)]
    for i in range(records):
        key = keys[i % len(keys)]
        start = 1_356_998_400_000 + ((i // 3) % 7200) * 3_600_000
        raw = f'{{"key":"{key}","window_start":{start},"window_end":{start + 86_400_000}}}'.encode()
        while True:
            try:
                producer.produce(TOPIC, str(i % 5000).encode(), raw, i % 4, timestamp=start)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def _timed(call: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bootstrap", default=None, help="an external broker (default: an embedded one)")
    args = ap.parse_args()

    import speed_layer.admin as admin
    from batch_layer.ingest.kafka_to_delta import ingest_topic
    from serving.views.speed import read_view_topic

    configs = {"reader_config": admin.reader_config, "defaults": admin.client_config}
    with bench_broker(args.bootstrap) as (bootstrap, _):
        _produce(bootstrap, args.records)
        walls: dict[tuple[str, str], list[float]] = {}
        for rnd in range(1, args.rounds + 1):
            for side, config in configs.items():
                admin.reader_config = config  # type: ignore[assignment]  # what the readers import
                try:
                    with tempfile.TemporaryDirectory() as lake:
                        runs = {"view read": _timed(lambda: read_view_topic(bootstrap, TOPIC, True, timeout_s=600)),
                                "ingest": _timed(lambda: ingest_topic(None, bootstrap, TOPIC, lake))}
                finally:
                    admin.reader_config = configs["reader_config"]  # type: ignore[assignment]
                for what, (wall, cpu) in runs.items():
                    walls.setdefault((what, side), []).append(wall)
                    print(f"round {rnd} {what:9s} {side:13s} {wall:6.2f} s wall, {cpu:6.2f} s CPU", flush=True)
    print(f"\n{args.records:,} records, median of {args.rounds} round(s):")
    for what in ("view read", "ingest"):
        new, old = statistics.median(walls[(what, "reader_config")]), statistics.median(walls[(what, "defaults")])
        print(f"  {what:9s}: {new:6.2f} s with reader_config, {old:6.2f} s with the defaults: {old / new:.2f}x")


if __name__ == "__main__":
    main()
