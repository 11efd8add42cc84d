"""The cost of a window store's segment drops over a long stream time: a put and a get per
key and minute, 20 keys, 60 s segments (Kafka's smallest, that of any retention up to two
minutes), for ``--minutes`` of stream time (default 30,000: 30,000 drops). Prints the
microseconds per put and get in each sixth of the run and the ratio of the last to the
first: about 1 when a drop costs nothing later (a ratio that grows with the drops is what
RocksDB range deletes gave, 18 us to 700-1,000 us). RocksDB and in memory; no target is
asserted.

    .venv/bin/python bench/bench_store_retention.py --minutes 30000
"""
from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speed_layer.state.segments import InMemorySegmentedBytesStore, RocksDBSegmentedBytesStore, SegmentedBytesStore  # noqa: E402

_Q = struct.Struct(">q")
MINUTE = 60_000


def run(store: SegmentedBytesStore, minutes: int, keys: int = 20) -> list[float]:
    """Microseconds per put and get in each sixth of ``minutes``."""
    names = [f"k{i}".encode() for i in range(keys)]
    sixth = max(minutes // 6, 1)
    out: list[float] = []
    t0, n = time.perf_counter(), 0
    for minute in range(minutes):
        t = minute * MINUTE
        for k in names:
            store.put(k + _Q.pack(t), b"v" * 20)
            store.get(k + _Q.pack(t - MINUTE))
            n += 1
        if (minute + 1) % sixth == 0:
            out.append((time.perf_counter() - t0) / n * 1e6)
            t0, n = time.perf_counter(), 0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=int, default=30_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, SegmentedBytesStore] = {
            "rocksdb": RocksDBSegmentedBytesStore("w", Path(tmp), 2 * MINUTE, MINUTE, 8),
            "memory": InMemorySegmentedBytesStore("w", 2 * MINUTE, MINUTE, 8),
        }
        for name, store in stores.items():
            costs = run(store, a.minutes)
            print(f"{name:8s} {store.segments_dropped:,} drops; us per put and get by sixth: "
                  + ", ".join(f"{c:.1f}" for c in costs) + f"; last / first {costs[-1] / costs[0]:.2f}x", flush=True)
            store.close()


if __name__ == "__main__":
    main()
