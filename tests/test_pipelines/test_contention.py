"""One answer under load (issue 42): the shop's speed layer on a loaded backlog gives the
same views, the same late drops per store and no expired join record, quiet and beside two
busy processes with its process stopped (SIGSTOP) for 1-3 s at random moments.

Before the fix the stream thread let a task run ahead of one held back by a wait (the
orders' task waiting for its foreign-key responses while the clicks' task ran on), and a
thread waiting on a not yet fetched partition processed anyway after 5 s: the stream-stream
join's other side ran more than its retention ahead and conversions were lost without a
counter (``docs/contracts.md``, "Deterministic backlogs"). Small: the shop's first 20,000
events (about ten days), one instance.

The flights' first 20,000 on 2 and 3 instances (processes) beside two busy processes give
the views and late drops of 2 quiet instances, with no wait ended on the clock (the
backlog's known ends, ``speed_layer/runtime/backlog_ends.py``), and differ from one
instance at most in windows named by late drops.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.broker, pytest.mark.timeout(1500)]

SHOP = "pipelines.examples.shop:pipeline"
EVENTS = 20_000
HELPER = Path(__file__).with_name("contention_speed.py")


def _speed(bootstrap: str, out: Path, stop_bursts: bool, pipeline: str = SHOP, instances: int = 1) -> dict[str, Any]:
    """The helper's result; with ``stop_bursts`` its process is stopped for 1-3 s every
    1-4 s while it runs (with one instance: the others run in processes of their own)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), os.getcwd()) if p)}
    proc = subprocess.Popen([sys.executable, str(HELPER), bootstrap, pipeline, str(out), str(instances)], env=env)
    rng = random.Random(42)
    try:
        while proc.poll() is None:
            time.sleep(rng.uniform(1.0, 4.0))
            if stop_bursts and proc.poll() is None:
                proc.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(1.0, 3.0))
                proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=900) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
    return json.loads(out.read_text())


def test_the_shop_gives_the_same_answer_quiet_and_under_cpu_contention(kafka_bootstrap: str, tmp_path: Path) -> None:
    from pipelines.examples.shop import pipeline as shop
    from pipelines.job.steps import ensure_pipeline_topics, load_data, reset_pipeline

    reset_pipeline(shop, kafka_bootstrap, tmp_path / "lake", inputs=True)
    ensure_pipeline_topics(shop, kafka_bootstrap)
    load_data(shop, kafka_bootstrap, EVENTS)
    quiet = _speed(kafka_bootstrap, tmp_path / "quiet.json", stop_bursts=False)
    assert quiet["expired_join_drops"] == 0 and quiet["dropped_late"] > 0
    assert all(quiet["views"][v] for v in shop.view_names)

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = _speed(kafka_bootstrap, tmp_path / "loaded.json", stop_bursts=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert loaded["expired_join_drops"] == 0
    assert (loaded["dropped_late"], loaded["late_windows"]) == (quiet["dropped_late"], quiet["late_windows"])
    for view in shop.view_names:
        assert loaded["views"][view] == quiet["views"][view], view


FLIGHTS = "pipelines.examples.flights:pipeline"


def _differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, set[tuple[str, int | None]]]:
    """The windows (key, start) where two runs' views differ, per view."""
    out = {}
    for view, rows in a["views"].items():
        diff = {tuple(r) for r in rows} ^ {tuple(r) for r in b["views"][view]}
        out[view] = {(k, start) for k, start, _ in diff}
    return out


def test_the_flights_on_2_and_3_instances_beside_two_busy_processes_give_the_quiet_answer(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    # issue 42: 2 instances on a loaded machine dropped 21,167-47,731 window updates of
    # two small years as late instead of one instance's 122 (74,759 here instead of 474 at
    # load 16-25): max.task.idle.ms on a repartition partition the other instance feeds
    # ended on the clock. With the backlog's known ends (backlog.inputs.complete) no wait
    # ends on the clock, and 2 or 3 instances under load give 2 quiet instances' answer
    from pipelines.examples.flights import pipeline as flights
    from pipelines.job.steps import ensure_pipeline_topics, load_data, reset_pipeline

    reset_pipeline(flights, kafka_bootstrap, tmp_path / "lake", inputs=True)
    ensure_pipeline_topics(flights, kafka_bootstrap)
    load_data(flights, kafka_bootstrap, EVENTS)
    one = _speed(kafka_bootstrap, tmp_path / "one.json", stop_bursts=False, pipeline=FLIGHTS)
    quiet = _speed(kafka_bootstrap, tmp_path / "quiet.json", stop_bursts=False, pipeline=FLIGHTS, instances=2)
    assert quiet["dropped_late"] > 0 and all(quiet["views"][v] for v in flights.view_names)
    assert one["enforced"] == quiet["enforced"] == 0
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = {n: _speed(kafka_bootstrap, tmp_path / f"i{n}.json", stop_bursts=False, pipeline=FLIGHTS,
                            instances=n) for n in (2, 3)}
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    for n, run in loaded.items():
        assert (n, run["enforced"], run["dropped_late"], run["late_windows"]) == (
            n, 0, quiet["dropped_late"], quiet["late_windows"])
        for view in flights.view_names:
            assert run["views"][view] == quiet["views"][view], (n, view)
    # against one instance: the same answer in 2 of 3 runs measured (474 late drops); one
    # gave 473, one window of departures_hourly apart (the one-instance path, not changed
    # here; cause not found), so every window that differs must be named by a late drop
    for view, windows in _differences(one, quiet).items():
        late = {(str(k), s) for k, s in one["late_windows"].get(view, []) + quiet["late_windows"].get(view, [])}
        assert windows <= late, (view, sorted(windows - late)[:5])
