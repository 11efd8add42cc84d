"""``duet run`` with the lake on an object store against the local disk, in one run (issue 43,
item 4; docs/object-storage.md, "Measured").

Starts one local SeaweedFS (``pipelines.lake.objectstore``) and one Kafka broker (the
embedded one, shared by every round through ``--bootstrap``), then runs ``duet run --json``
on the flights ``--rounds`` times each way, interleaved (local, s3, local, s3...), each a
fresh process with a fresh lake. Prints per round the wall time, the batch phase's time
(``batch_seconds`` of the summary), the CPU seconds of the ``duet run`` process tree (its
Spark JVM included; sampled from ``/proc``), the store's own CPU during the run (the
broker's is in neither) and the agreement;
then the medians and the ratios s3 / local (goal: <= 1.3x), with the load average. Targets
are printed, never asserted.

    .venv/bin/python bench/bench_objectstore.py --limit 20000 --rounds 2
    .venv/bin/python bench/bench_objectstore.py            # the full year
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _duet_runs import duet_run, proc_table, ticks  # noqa: E402 - bench/ is on sys.path as a script


def _duet_run(lake: str, limit: int | None, env: dict[str, str], cwd: Path, store_pid: int | None) -> dict[str, Any]:
    store_cpu = ticks(store_pid)
    r = duet_run(["--lake", lake] + (["--limit", str(limit)] if limit else []), env, cwd)
    summary = r["summary"]
    return {"wall": r["wall"], "batch": float(summary["batch_seconds"]), "cpu": r["cpu"],
            "store_cpu": ticks(store_pid) - store_cpu, "agreement": min(summary["agreement"].values()),
            "checks": all(summary["checks"].values())}


def _weed_pid(store: Any) -> int | None:
    """The pid of the store's ``weed`` process (a child of this one), None when not found."""
    me = os.getpid()
    for pid, (ppid, _) in proc_table().items():
        if ppid == me:
            try:
                if Path(f"/proc/{pid}/exe").resolve().name == "weed":
                    return pid
            except OSError:
                continue
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="flights loaded (default: the full year)")
    parser.add_argument("--rounds", type=int, default=2, help="runs each way, interleaved")
    parser.add_argument("--bootstrap", default=None, help="a Kafka cluster (default: an embedded broker)")
    opts = parser.parse_args()

    from _broker import bench_broker  # bench/ is on sys.path when run as a script

    from pipelines.lake.objectstore import object_store

    results: dict[str, list[dict[str, Any]]] = {"local": [], "s3": []}
    with tempfile.TemporaryDirectory(prefix="duet-bench-s3-") as tmp, object_store() as store, \
            bench_broker(opts.bootstrap) as (bootstrap, _):
        env = {**os.environ, **store.env(), "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
               "GX_ANALYTICS_ENABLED": "False", "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop("DUET_LAKE", None)
        store_pid = _weed_pid(store)
        for i in range(opts.rounds):
            for kind in ("local", "s3"):
                lake = (str(Path(tmp) / f"lake-{i}") if kind == "local"
                        else f"s3://{store.bucket}/bench-{uuid.uuid4().hex[:8]}")
                r = _duet_run(lake, opts.limit, env, Path(tmp), store_pid)
                results[kind].append(r)
                print(f"round {i + 1} {kind:5}: wall {r['wall']:6.1f} s, batch {r['batch']:6.1f} s, "
                      f"cpu {r['cpu']:6.1f} s (+ store {r['store_cpu']:4.1f} s), agreement {r['agreement']:.4f}, checks {'passed' if r['checks'] else 'FAILED'}"
                      f"  (load {os.getloadavg()[0]:.2f})", flush=True)
    for v in results.values():
        for r in v:
            r["cpu+store"] = r["cpu"] + r["store_cpu"]
    metrics = ("wall", "batch", "cpu", "cpu+store")
    med = {k: {m: statistics.median(r[m] for r in v) for m in metrics} for k, v in results.items()}
    flights = f"{opts.limit:,} flights" if opts.limit else "the full year"
    print(f"\nduet run on {flights}, median of {opts.rounds} (load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for m in metrics:
        print(f"  {m:9}: local {med['local'][m]:6.1f} s, s3 {med['s3'][m]:6.1f} s, "
              f"s3 / local {med['s3'][m] / med['local'][m]:.2f}x (goal <= 1.3x)")


if __name__ == "__main__":
    main()
