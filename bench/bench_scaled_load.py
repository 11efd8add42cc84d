"""The flights at scale (``duet load --years N``): records/s generated and produced, and the
peak memory of each, measured in the same run.

Each measure runs in a fresh process (its peak RSS is its own):

* ``year list``: the sample of one year as the plain ``duet load`` builds it (a list of
  336,776 records): the memory a list of N years would take N times;
* ``generate N``: the events of N years read from ``Pipeline.sample_data(scale=N)`` (the
  lazy copies), each value encoded as ``duet load`` encodes it, nothing produced;
* ``produce N``: ``pipelines.produce.load.load(scale=N)`` into a broker (an embedded one unless
  ``--bootstrap``), topics prefixed so that nothing else is touched, deleted after.

    .venv/bin/python bench/bench_scaled_load.py --years 2
    .venv/bin/python bench/bench_scaled_load.py --years 10 --skip-produce
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker(mode: str, years: int, bootstrap: str | None) -> dict[str, float]:
    from pipelines.examples.flights import pipeline
    from pipelines.produce.load import encode_value

    base = _peak_mb()
    t0 = time.monotonic()
    if mode == "list":
        sample = pipeline.sample_data()
        n = len(list(sample.events))
    elif mode == "generate":
        n = 0
        for _, rec in pipeline.sample_data(scale=years).events:
            encode_value(rec.value)
            n += 1
    else:
        from pipelines.produce.load import load
        from speed_layer.admin import delete_topics

        assert bootstrap is not None
        prefix = f"bench-scale-{uuid.uuid4().hex[:6]}-"
        try:
            counts = load(pipeline, bootstrap, prefix=prefix, scale=years)
        finally:
            delete_topics(bootstrap, [prefix + t for t in pipeline.archived_topics])
        n = counts["flights"]
    seconds = time.monotonic() - t0
    return {"records": n, "seconds": seconds, "per_s": n / seconds, "peak_mb": _peak_mb(), "import_mb": base}


def _measure(mode: str, years: int, bootstrap: str | None) -> dict[str, float]:
    args = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--years", str(years)]
    if bootstrap:
        args += ["--bootstrap", bootstrap]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=7200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--years", type=int, default=2)
    ap.add_argument("--bootstrap", default=None, help="an external broker (default: an embedded one)")
    ap.add_argument("--skip-produce", action="store_true", help="measure the generation only")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(_worker(a.worker, a.years, a.bootstrap)))
        return

    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared)", flush=True)
    rows = [("year list (1 year)", _measure("list", 1, None)),
            (f"generate {a.years} years", _measure("generate", a.years, None))]
    if not a.skip_produce:
        from _broker import bench_broker

        with bench_broker(a.bootstrap) as (bootstrap, _):
            rows.append((f"produce {a.years} years", _measure("produce", a.years, bootstrap)))
    for name, r in rows:
        print(f"{name:22s}: {r['records']:>10,.0f} flights in {r['seconds']:6.1f} s = {r['per_s']:>9,.0f} /s; "
              f"peak RSS {r['peak_mb']:,.0f} MB (after imports {r['import_mb']:,.0f} MB)", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
