"""Serving's live table in memory (a git ref's ``serving/views/live.py``, default ``main``: Python
dicts) against the RocksDB row store (this checkout), broker-free: rows/s applied, RSS with
``--rows`` live rows, the latency of ``LiveViews.rows(view, key)`` and of a prune.

Each side runs in a fresh process (one after the other, ``--rounds`` times, alternating) and
feeds ``LiveViews._apply`` real ``confluent_kafka.Message`` objects shaped like a windowed view
topic: ``--keys`` keys, hourly windows in time order, a JSON value of ~60 bytes, and a share of
``--updates`` records rewriting a window already held; no watermark moves while it loads (the
batch layer lagging: every row stays live). Then it times ``rows(view, key)`` on random keys,
and a prune at a watermark that closes ``--prune-share`` of the windows. Apply rate: rows /
CPU seconds of ``_apply`` (the records are built outside the timed part). RSS from
/proc/self/status (VmRSS after the load, VmHWM the peak). No target is asserted.

    .venv/bin/python bench/bench_live_store.py --rows 4000000 --keys 1000
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPIC = "bench-live-store"
T0 = 1_356_998_400_000
HOUR = 3_600_000
BATCH = 2_000  # records per _apply call, as LiveViews.CONSUME_BATCH


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def _baseline_module(ref: str) -> Any:
    """``serving/views/live.py`` of ``ref``, imported as a module of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:serving/views/live.py"],
                            check=True, capture_output=True, text=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="bench-live-store-"))
    path = folder / "live_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("live_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["live_baseline"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    shutil.rmtree(folder)
    return module


def _records(rows: int, keys: int, updates: float, seed: int = 7):  # type: ignore[no-untyped-def]
    """Batches of (key, window hour, value) in time order: ``rows`` distinct windows, and
    after each new window with probability ``updates`` a rewrite of a recent one."""
    rnd = random.Random(seed)
    batch: list[tuple[int, int, int]] = []
    for i in range(rows):
        batch.append((i % keys, i // keys, i))
        if rnd.random() < updates:
            j = max(0, i - rnd.randrange(1, 4 * keys))
            batch.append((j % keys, j // keys, i))
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _messages(batch: list[tuple[int, int, int]], offset: int) -> list[Any]:
    from confluent_kafka import Message

    out = []
    for n, (k, h, i) in enumerate(batch):
        start = T0 + h * HOUR
        key = f'{{"key":"K{k:05d}","window_start":{start},"window_end":{start + HOUR}}}'.encode()
        value = b'{"count":%d,"delayed":%d,"avg_delay_min":%d.5,"cancelled":0}' % (i % 997, i % 31, i % 61)
        out.append(Message(topic=TOPIC, partition=0, offset=offset + n, key=key, value=value,
                           timestamp=(1, start + HOUR - 1)))
    return out


def run_side(side: str, args: argparse.Namespace) -> dict[str, Any]:
    from serving.views.model import ViewSpec

    spec = ViewSpec.tumbling(TOPIC, HOUR)
    rss_start = _status_mib("VmRSS")
    state_dir = Path(tempfile.mkdtemp(prefix="bench-live-store-", dir=args.state_dir))
    if side == "memory":
        module = _baseline_module(args.baseline_ref)
        live = module.LiveViews("127.0.0.1:9", lambda: {})
        table = module._ViewTable(spec, applied_ms=None)
    else:
        from serving.views.live import LiveViews

        live = LiveViews("127.0.0.1:9", lambda: {}, state_dir=state_dir)
        table = live._new_table(TOPIC, spec, None)
    live._tables[TOPIC] = table
    records, cpu, wall, offset = 0, 0.0, 0.0, 0
    for batch in _records(args.rows, args.keys, args.updates):
        messages = _messages(batch, offset)
        offset += len(messages)
        c, w = time.process_time(), time.perf_counter()
        live._apply(messages)
        cpu += time.process_time() - c
        wall += time.perf_counter() - w
        records += len(messages)
    gc.collect()
    held = table.store.count_rows() if side == "store" else live.state(TOPIC).rows  # the store's count estimates
    rss_loaded = _status_mib("VmRSS")
    disk = sum(f.stat().st_size for f in state_dir.rglob("*") if f.is_file()) / 2**20

    def lookups() -> tuple[list[float], float]:
        """Latencies (ms, sorted) of ``rows(view, key)`` on random keys, and rows per answer."""
        rnd, times, returned = random.Random(11), [], 0
        for _ in range(args.lookups):
            key = f"K{rnd.randrange(args.keys):05d}"
            t = time.perf_counter()
            returned += len(live.rows(TOPIC, key))
            times.append((time.perf_counter() - t) * 1e3)
        return sorted(times), returned / args.lookups

    before, per_lookup = lookups()

    hours = args.rows // args.keys
    watermark = T0 + int(hours * args.prune_share) * HOUR
    c, w = time.process_time(), time.perf_counter()
    if side == "memory":
        table.applied_ms = watermark
        table.prune()
    else:
        table.store.prune(watermark)
    prune_cpu, prune_wall = time.process_time() - c, time.perf_counter() - w
    kept = table.store.count_rows() if side == "store" else live.state(TOPIC).rows
    after, per_lookup_after = lookups()
    p99 = int(0.99 * (args.lookups - 1))
    result = {
        "side": side, "records": records, "rows": held, "apply_cpu_s": cpu, "apply_wall_s": wall,
        "rows_per_cpu_s": records / cpu, "rss_start_mib": rss_start, "rss_loaded_mib": rss_loaded,
        "rss_peak_mib": _status_mib("VmHWM"), "disk_mib": disk,
        "lookup_p50_ms": statistics.median(before), "lookup_p99_ms": before[p99], "rows_per_lookup": per_lookup,
        "prune_cpu_s": prune_cpu, "prune_wall_s": prune_wall, "rows_after_prune": kept,
        "pruned_lookup_p50_ms": statistics.median(after), "pruned_lookup_p99_ms": after[p99],
        "rows_per_pruned_lookup": per_lookup_after,
    }
    live.close()
    shutil.rmtree(state_dir, ignore_errors=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--updates", type=float, default=0.25, help="share of records rewriting a held window")
    ap.add_argument("--lookups", type=int, default=1_000)
    ap.add_argument("--prune-share", type=float, default=0.9, help="share of the windows a prune closes")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--baseline-ref", default="main", help="git ref of the in-memory live.py")
    ap.add_argument("--state-dir", default=None, help="parent of the store's directory (default $TMPDIR)")
    ap.add_argument("--side", choices=["memory", "store"], help=argparse.SUPPRESS)  # one side, in this process
    args = ap.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args)))
        return
    argv = sys.argv[1:]
    results: dict[str, list[dict[str, Any]]] = {"memory": [], "store": []}
    for rnd in range(1, args.rounds + 1):
        for side in ("memory", "store"):
            load = Path("/proc/loadavg").read_text().split()[:3]
            out = subprocess.run([sys.executable, __file__, *argv, "--side", side], check=True,
                                 capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            results[side].append(r)
            print(f"round {rnd} {side:6s} (load {' '.join(load)}): {r['records']:,} records -> {r['rows']:,} rows, "
                  f"{r['rows_per_cpu_s']:,.0f} records/CPU s ({r['apply_cpu_s']:.1f} s CPU, {r['apply_wall_s']:.1f} s wall); "
                  f"RSS {r['rss_start_mib']:.0f} -> {r['rss_loaded_mib']:.0f} MiB (peak {r['rss_peak_mib']:.0f}), "
                  f"disk {r['disk_mib']:.0f} MiB; rows(view, key) p50 {r['lookup_p50_ms']:.2f} ms "
                  f"p99 {r['lookup_p99_ms']:.2f} ms ({r['rows_per_lookup']:.0f} rows); prune to "
                  f"{r['rows_after_prune']:,} rows {r['prune_cpu_s']:.1f} s CPU {r['prune_wall_s']:.1f} s wall; "
                  f"then rows(view, key) p50 {r['pruned_lookup_p50_ms']:.2f} ms p99 {r['pruned_lookup_p99_ms']:.2f} ms "
                  f"({r['rows_per_pruned_lookup']:.0f} rows)",
                  flush=True)
    _side_by_side(results)


def _side_by_side(results: dict[str, list[dict[str, Any]]]) -> None:
    """The medians of the rounds, in memory beside the store, and their ratio."""
    def med(side: str, f: Any) -> float:
        return statistics.median(f(x) for x in results[side])

    rows = [
        ("records applied per CPU s", lambda x: x["rows_per_cpu_s"], "{:,.0f}"),
        ("apply CPU s", lambda x: x["apply_cpu_s"], "{:.1f}"),
        ("apply wall s", lambda x: x["apply_wall_s"], "{:.1f}"),
        ("RSS growth after the load, MiB", lambda x: x["rss_loaded_mib"] - x["rss_start_mib"], "{:.0f}"),
        ("RSS peak growth, MiB", lambda x: x["rss_peak_mib"] - x["rss_start_mib"], "{:.0f}"),
        ("disk, MiB", lambda x: x["disk_mib"], "{:.0f}"),
        ("rows(view, key) p50 ms", lambda x: x["lookup_p50_ms"], "{:.2f}"),
        ("rows(view, key) p99 ms", lambda x: x["lookup_p99_ms"], "{:.2f}"),
        ("prune CPU s", lambda x: x["prune_cpu_s"], "{:.1f}"),
        ("after the prune, rows(view, key) p50 ms", lambda x: x["pruned_lookup_p50_ms"], "{:.2f}"),
    ]
    print(f"{'median of ' + str(len(results['store'])) + ' round(s)':42s} {'in memory':>12s} {'store':>12s} {'store/memory':>13s}")
    for name, f, fmt in rows:
        m, s = med("memory", f), med("store", f)
        ratio = f"{s / m:.2f}x" if m else "-"
        print(f"{name:42s} {fmt.format(m):>12s} {fmt.format(s):>12s} {ratio:>13s}")


if __name__ == "__main__":
    main()
