"""One answer under load (issue 42, "Done when"): ``duet run`` beside busy processes gives
the quiet run's answer, run after run.

Starts one Kafka broker (shared by every run through ``--bootstrap``), then runs
``duet run --json``, each a fresh process with a fresh lake:

1. the reference: the flights' first ``--limit`` flights, one instance, quiet;
2. ``--runs`` times the shop's month beside ``--busy`` spinning processes
   (``python3 -c 'while True: pass'``, started before each run and killed after it);
3. ``--runs`` times the flights' first ``--limit`` with ``--instances 2``, then with
   ``--instances 3``, beside the same busy processes.

Prints one line per run (exit code, agreement per view, late drops, expired join drops,
unexplained differences, wall time, load average) and, per group, whether every run exited
0 with 100 % on every view, 0 unexplained, and (the flights) the reference's late drops.
Nothing is asserted: ``tests/test_pipelines/test_contention.py`` is the suite's small
version.

    .venv/bin/python bench/bench_one_answer.py                 # 5 runs per group
    .venv/bin/python bench/bench_one_answer.py --runs 2 --groups shop
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _duet_runs import busy_processes, duet_run  # noqa: E402 - bench/ is on sys.path as a script

SHOP = "pipelines.examples.shop:pipeline"


def _run(args: list[str], lake: Path, env: dict[str, str], cwd: Path, busy: int) -> dict[str, Any]:
    with busy_processes(busy):
        r = duet_run([*args, "--lake", str(lake)], env, cwd)
    s = r["summary"]
    return {"exit": r["returncode"], "wall": r["wall"], "agreement": s["agreement"], "late": s["dropped_late"],
            "expired": s.get("expired_join_drops", 0), "unexplained": sum(s.get("unexplained", {}).values())}


def _line(name: str, r: dict[str, Any]) -> str:
    agreement = ", ".join(f"{v} {a:.2%}" for v, a in sorted(r["agreement"].items()))
    return (f"{name:24} exit {r['exit']}, late {r['late']:,}, expired {r['expired']}, unexplained "
            f"{r['unexplained']}, {agreement}, wall {r['wall']:.0f} s (load {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per group")
    parser.add_argument("--limit", type=int, default=20_000, help="flights of the flights runs")
    parser.add_argument("--busy", type=int, default=2, help="spinning processes beside each run")
    parser.add_argument("--groups", default="shop,instances2,instances3",
                        help="comma-separated: shop, instances2, instances3")
    parser.add_argument("--bootstrap", default=None, help="a Kafka cluster (default: an embedded broker)")
    opts = parser.parse_args()

    from _broker import bench_broker

    groups = {"shop": ["--pipeline", SHOP], "instances2": ["--limit", str(opts.limit), "--instances", "2"],
              "instances3": ["--limit", str(opts.limit), "--instances", "3"]}
    chosen = [g.strip() for g in opts.groups.split(",") if g.strip()]
    unknown = [g for g in chosen if g not in groups]
    if unknown:
        parser.error(f"--groups: unknown {unknown}; allowed: {', '.join(groups)}")
    verdicts: list[str] = []
    with tempfile.TemporaryDirectory(prefix="duet-bench-answer-") as tmp, bench_broker(opts.bootstrap) as (bootstrap, _):
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "GX_ANALYTICS_ENABLED": "False",
               "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop("DUET_LAKE", None)
        cwd = Path(tmp)
        reference = None
        if any(g.startswith("instances") for g in chosen):
            reference = _run(["--limit", str(opts.limit)], cwd / "lake-reference", env, cwd, 0)
            print(_line("flights, 1 instance, quiet", reference), flush=True)
        for group in chosen:
            runs = []
            for i in range(opts.runs):
                r = _run(groups[group], cwd / f"lake-{group}-{i}", env, cwd, opts.busy)
                runs.append(r)
                print(_line(f"{group} #{i + 1}, busy x{opts.busy}", r), flush=True)
            good = [r for r in runs if r["exit"] == 0 and r["unexplained"] == 0
                    and all(a == 1.0 for a in r["agreement"].values())
                    and (reference is None or group == "shop" or r["late"] == reference["late"])]
            same = "" if group == "shop" or reference is None else f", late drops = the quiet instance's {reference['late']:,}"
            verdicts.append(f"{group}: {len(good)} of {len(runs)} runs exit 0, 100 % on every view, 0 unexplained{same}")
    print()
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
