"""The flights main job's speed phase as a backlog: flights/s, late drops and CPU per flight.

Loads the flights (``--flights N``, default the full year of 336,776) into one broker, then
runs the speed phase of ``duet run`` (``pipelines.job.steps.run_speed``: the flights topology,
three repartition hops, four windowed views) on what the topics hold, each run in a fresh
process with a fresh ``application.id``. With ``--baseline-tree DIR`` (a checkout of an
older commit) the same phase of DIR runs too, interleaved round by round, and the ratio of
median flights/s is printed. Targets are printed, never asserted (issue 9: at least 5,000
flights/s on the full year, with no more late drops than the baseline).

Per run: wall seconds from start to caught up, flights/s, records dropped as late, the
stream thread's CPU seconds, and the broker's CPU seconds (the embedded broker only): on a
two-core machine their sum per flight bounds what one process can reach.

    .venv/bin/python bench/bench_flights_speed.py --flights 50000 --rounds 2
    git worktree add /tmp/before <commit>
    .venv/bin/python bench/bench_flights_speed.py --baseline-tree /tmp/before --rounds 2

``--python`` / ``--baseline-python``: the interpreter of each side (default: this one), e.g.
an older venv built on another CPython (the setup the baseline commit made) against
``make setup``'s venv.

``--years N``: N years of flights (``duet load --years N``). ``--instances 1,2``: the same tree with the speed layer as 1, then 2 processes of one
application (``run_speed(instances=N)``, :mod:`pipelines.speed.instances`), interleaved round
by round; the ratio of median flights/s of the last to the first is printed. The stream-thread
CPU is then the supervisor's (0 with more than one instance).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGET_FLIGHTS_PER_S = 5_000


def _worker(bootstrap: str, instances: int = 1) -> None:
    """Run the speed phase once in this process; print one JSON line."""
    from pipelines.examples.flights import pipeline
    from pipelines.job.steps import run_speed
    from speed_layer.runtime import stream_thread

    thread_cpu: list[float] = []
    run = stream_thread.StreamThread.run

    def timed_run(self: Any) -> None:
        t0 = time.thread_time()
        try:
            run(self)
        finally:
            thread_cpu.append(time.thread_time() - t0)

    stream_thread.StreamThread.run = timed_run  # type: ignore[method-assign]
    cpu0 = time.process_time()
    stats = run_speed(pipeline, bootstrap, instances=instances)
    print(json.dumps({
        "instances": stats.metrics.get("instances", []),
        "application_id": stats.application_id,
        "seconds": stats.seconds,
        "records_in": stats.records_in,
        "late": stats.dropped_late,
        "process_cpu_s": time.process_time() - cpu0,
        "thread_cpu_s": sum(thread_cpu),
    }))


def _proc_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a process (Linux ``/proc``), None if unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(tree: str, python: str, bootstrap: str, broker_pid: int | None, instances: int = 1) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    b0 = _proc_cpu_s(broker_pid)
    proc = subprocess.run([python, os.path.abspath(__file__), "--worker", "--bootstrap", bootstrap,
                           "--instances", str(instances)],
                          capture_output=True, text=True, env=env, cwd=os.path.abspath(tree), timeout=7200)
    b1 = _proc_cpu_s(broker_pid)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"speed phase of {tree} failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(lines[-1])
    out["broker_cpu_s"] = None if b0 is None or b1 is None else b1 - b0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flights", type=int, default=None, help="first N flights (default: the full year)")
    ap.add_argument("--years", type=int, default=1, help="years of flights (duet load --years N; --flights: per year)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline-tree", default=None, help="checkout of an older commit, run interleaved as 'before'")
    ap.add_argument("--python", default=sys.executable, help="interpreter of 'after' (default: this one)")
    ap.add_argument("--baseline-python", default=None, help="interpreter of 'before' (default: --python)")
    ap.add_argument("--bootstrap", default=None, help="an external broker (default: an embedded one)")
    ap.add_argument("--instances", default="1", help="speed-layer processes, e.g. 2, or 1,2 to compare (one tree)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(a.bootstrap, int(a.instances))
        return
    counts = [int(n) for n in a.instances.split(",")]

    from _broker import bench_broker
    from pipelines.examples.flights import pipeline
    from pipelines.job.steps import load_data, reset_pipeline

    with bench_broker(a.bootstrap) as (bootstrap, broker_pid):
        reset_pipeline(pipeline, bootstrap, Path(os.environ.get("TMPDIR", "/tmp")) / "bench-flights-speed-lake")
        loaded = load_data(pipeline, bootstrap, a.flights, scale=a.years)
        n_flights = loaded["flights"]
        print(f"loaded {loaded}; load average {os.getloadavg()[0]:.1f}", flush=True)
        trees = {"after": (".", a.python, counts[0])}
        if len(counts) > 1:
            trees = {f"{n} inst": (".", a.python, n) for n in counts}
        elif a.baseline_tree or a.baseline_python:
            trees["before"] = (a.baseline_tree or ".", a.baseline_python or a.python, counts[0])
        for name, (tree, python, n) in trees.items():
            print(f"{name}: {os.path.abspath(tree)} on {python}, {n} instance(s)", flush=True)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for rnd in range(a.rounds):
            for name, (tree, python, n) in trees.items():
                r = _run(tree, python, bootstrap, broker_pid, n)
                r["flights_per_s"] = n_flights / r["seconds"]
                results[name].append(r)
                broker_cpu = "" if r["broker_cpu_s"] is None else f", broker CPU {r['broker_cpu_s']:.1f} s"
                if r.get("instances"):
                    broker_cpu += "; per instance: " + ", ".join(
                        f"{i['processed']:,} records in {i['cpu_s']:.1f} s CPU" for i in r["instances"])
                print(f"round {rnd + 1} {name:6s}: {r['seconds']:7.1f} s, {r['flights_per_s']:7,.0f} flights/s, "
                      f"{r['late']:,} late, stream-thread CPU {r['thread_cpu_s']:.1f} s{broker_cpu} "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)

    print(f"\n{n_flights:,} flights as a backlog, median of {a.rounds} round(s):")
    med: dict[str, float] = {}
    for name, rs in results.items():
        med[name] = statistics.median(r["flights_per_s"] for r in rs)
        cpu = statistics.median(r["thread_cpu_s"] for r in rs) / n_flights * 1e3
        broker_cpus = [r["broker_cpu_s"] for r in rs if r["broker_cpu_s"] is not None]
        broker = f", broker {statistics.median(broker_cpus) / n_flights * 1e3:.3f} ms" if broker_cpus else ""
        late = sorted({r["late"] for r in rs})
        print(f"  {name:6s}: {med[name]:7,.0f} flights/s; late drops {late}; CPU per flight: stream thread "
              f"{cpu:.3f} ms{broker}")
    if "before" in med:
        print(f"  after/before flights/s: {med['after'] / med['before']:.2f}x")
    if len(counts) > 1:
        first, last = f"{counts[0]} inst", f"{counts[-1]} inst"
        print(f"  {last}/{first} flights/s: {med[last] / med[first]:.2f}x")
        return
    verdict = "met" if med["after"] >= TARGET_FLIGHTS_PER_S else "not met"
    print(f"  target >= {TARGET_FLIGHTS_PER_S:,} flights/s on the full year: {verdict} ({med['after']:,.0f})")


if __name__ == "__main__":
    main()
