"""How fast serving's live table (``serving.views.live.LiveViews``) reads a view topic from
the beginning (what a serving process does at start, docs/live-serving.md), against
``read_view_topic`` (the publish's reader of the same topic), interleaved round by round, and
the rows it keeps: those open at the batch watermark.

Produces ``--records`` records (default 1,000,000) shaped like a windowed view topic (105
keys, hourly windows over ``--hours`` hours, 4 partitions) into one broker; the watermark is
set ``--open-hours`` before the last window. Prints wall and CPU seconds per side and round,
and the ratio of median wall seconds. No target is asserted.

    .venv/bin/python bench/bench_live_views.py --records 1000000 --rounds 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _broker import bench_broker  # noqa: E402

TOPIC = "bench-live-views"
T0 = 1_356_998_400_000
HOUR = 3_600_000
KEYS = 105


def _produce(bootstrap: str, records: int, hours: int) -> None:
    from confluent_kafka import Producer

    from speed_layer.admin import TopicSpec, client_config, ensure_topics

    ensure_topics(bootstrap, [TopicSpec(TOPIC, 4, {"retention.ms": "-1"})])
    producer = Producer(client_config(bootstrap, {"linger.ms": 50, "queue.buffering.max.messages": 1_000_000}))
    for i in range(records):
        start = T0 + (i * hours // records) * HOUR  # windows in time order, as a speed layer writes them
        raw = f'{{"key":"K{i % KEYS:03d}","window_start":{start},"window_end":{start + HOUR}}}'.encode()
        while True:
            try:
                producer.produce(TOPIC, key=raw, value=b'{"count":%d}' % i, timestamp=start + HOUR - 1)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--hours", type=int, default=8_760)
    ap.add_argument("--open-hours", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bootstrap", default=None, help="an external broker (default: an embedded one)")
    args = ap.parse_args()

    from serving.views.live import LiveViews
    from serving.views.model import ViewSpec
    from serving.views.speed import read_view_topic

    spec = ViewSpec.tumbling(TOPIC, HOUR)
    watermark = T0 + (args.hours - args.open_hours) * HOUR
    walls: dict[str, list[float]] = {"LiveViews": [], "read_view_topic": []}
    with bench_broker(args.bootstrap) as (bootstrap, _):
        _produce(bootstrap, args.records, args.hours)
        for rnd in range(1, args.rounds + 1):
            for side in walls:
                wall, cpu = time.perf_counter(), time.process_time()
                if side == "LiveViews":
                    with LiveViews(bootstrap, lambda: {TOPIC: (spec, watermark)}) as live:
                        assert live.wait_caught_up(600, [TOPIC]), "not caught up in 600 s"
                        kept = live.state(TOPIC).rows
                else:
                    kept = len(read_view_topic(bootstrap, TOPIC, True, timeout_s=600))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                walls[side].append(wall)
                print(f"round {rnd} {side:16s} {wall:6.2f} s wall {cpu:6.2f} s CPU, {kept:,} rows kept", flush=True)
    live_s, read_s = (statistics.median(walls[s]) for s in ("LiveViews", "read_view_topic"))
    print(f"{args.records:,} records: LiveViews {live_s:.2f} s, read_view_topic {read_s:.2f} s "
          f"(median wall), ratio {live_s / read_s:.2f}x")


if __name__ == "__main__":
    main()
