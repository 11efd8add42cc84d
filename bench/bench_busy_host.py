"""``duet run`` on a busy machine against a quiet one, in one run (issue 42 item 4;
docs/batch-priority.md, "The full year, quiet and busy").

Starts one Kafka broker (the embedded one, shared by every round through ``--bootstrap``),
then runs ``duet run --json`` on the flights ``--rounds`` times each way, interleaved:
quiet, then beside ``--busy`` processes spinning on the CPU (``python3 -c 'while True:
pass'``, started before the run and killed after it), each run a fresh process with a fresh
lake. Prints per round the wall time, the speed and batch phases' times, the CPU seconds of
the ``duet run`` process tree, the late drops, the unexplained differences and the
agreement; then the medians and the ratio busy / quiet of the wall time (goal: <= 2.5x),
with the load average. Targets are printed, never asserted.

    .venv/bin/python bench/bench_busy_host.py --limit 20000 --rounds 1
    .venv/bin/python bench/bench_busy_host.py            # the full year
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _duet_runs import busy_processes, duet_run  # noqa: E402 - bench/ is on sys.path as a script



def _round(lake: Path, limit: int | None, env: dict[str, str], cwd: Path, busy: int) -> dict[str, Any]:
    """One ``duet run`` beside ``busy`` spinning processes (0: quiet)."""
    with busy_processes(busy):
        r = duet_run(["--lake", str(lake)] + (["--limit", str(limit)] if limit else []), env, cwd)
    s = r["summary"]
    phases = s.get("phase_seconds", {})
    return {"wall": r["wall"], "cpu": r["cpu"], "speed": float(phases.get("speed", s.get("speed_seconds", 0.0))),
            "batch": float(s["batch_seconds"]), "late": int(s["dropped_late"]),
            "unexplained": sum(s.get("unexplained", {}).values()), "agreement": min(s["agreement"].values()),
            "ok": r["returncode"] == 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="flights loaded (default: the full year)")
    parser.add_argument("--rounds", type=int, default=1, help="runs each way, interleaved")
    parser.add_argument("--busy", type=int, default=2, help="spinning processes beside the busy runs")
    parser.add_argument("--bootstrap", default=None, help="a Kafka cluster (default: an embedded broker)")
    opts = parser.parse_args()

    from _broker import bench_broker

    kinds = ("quiet", f"busy x{opts.busy}")
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="duet-bench-busy-") as tmp, bench_broker(opts.bootstrap) as (bootstrap, _):
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "GX_ANALYTICS_ENABLED": "False",
               "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop("DUET_LAKE", None)
        for i in range(opts.rounds):
            for kind, busy in zip(kinds, (0, opts.busy)):
                load = os.getloadavg()[0]
                r = _round(Path(tmp) / f"lake-{kind[:5]}-{i}", opts.limit, env, Path(tmp), busy)
                results[kind].append(r)
                print(f"round {i + 1} {kind:8}: wall {r['wall']:6.1f} s, speed {r['speed']:6.1f} s, "
                      f"batch {r['batch']:6.1f} s, cpu {r['cpu']:6.1f} s, late {r['late']:,}, "
                      f"unexplained {r['unexplained']}, agreement {r['agreement']:.4f}, exit {'0' if r['ok'] else '1'}"
                      f"  (load before {load:.2f})", flush=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "speed", "batch", "cpu")}
           for k, v in results.items()}
    flights = f"{opts.limit:,} flights" if opts.limit else "the full year"
    quiet, busy = med[kinds[0]], med[kinds[1]]
    print(f"\nduet run on {flights}, median of {opts.rounds} (load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for m in ("wall", "speed", "batch", "cpu"):
        goal = " (goal <= 2.5x)" if m == "wall" else ""
        print(f"  {m:5}: quiet {quiet[m]:6.1f} s, {kinds[1]} {busy[m]:6.1f} s, busy / quiet {busy[m] / quiet[m]:.2f}x{goal}")
    lates = {k: sorted({r["late"] for r in v}) for k, v in results.items()}
    print(f"  late drops: {lates}; every run exit 0: {all(r['ok'] for v in results.values() for r in v)}")


if __name__ == "__main__":
    main()
