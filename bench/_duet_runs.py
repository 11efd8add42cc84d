"""``duet run --json`` as a bench measures it: in a process of its own, with its wall time and
the CPU seconds of its whole process tree (its Spark JVM and speed-layer instances included).

    from _duet_runs import duet_run   # a bench run as a script has bench/ on sys.path

    r = duet_run(["--limit", "20000"], env, cwd)   # {"wall", "cpu", "summary"}
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["TreeCpu", "busy_processes", "duet_run", "proc_table", "ticks"]

_TICK = os.sysconf("SC_CLK_TCK")


def proc_table() -> dict[int, tuple[int, int]]:
    """``{pid: (ppid, utime + stime ticks)}`` of every process (Linux ``/proc``)."""
    out: dict[int, tuple[int, int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    f = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(d)] = (int(f[1]), int(f[11]) + int(f[12]))
    return out


def ticks(pid: int | None) -> float:
    """CPU seconds of process ``pid`` so far (0 without one)."""
    return (proc_table().get(pid, (0, 0))[1] / _TICK) if pid else 0.0


class TreeCpu:
    """CPU seconds of a process and all its descendants, sampled from ``/proc`` every 0.5 s
    while it runs: each process counts with its last sample (its last < 0.5 s is missed)."""

    def __init__(self, root: int) -> None:
        self.root, self.seen = root, {}  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            table = proc_table()
            tree, todo = set(), [self.root]
            while todo:
                pid = todo.pop()
                tree.add(pid)
                todo += [c for c, (pp, _) in table.items() if pp == pid and c not in tree]
            for pid in tree:
                if pid in table:
                    self.seen[pid] = max(self.seen.get(pid, 0), table[pid][1])

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(self.seen.values()) / _TICK


def duet_run(args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run ``duet run --json <args>`` and return ``{"wall": s, "cpu": s, "summary": its JSON}``.

    Raises:
        SystemExit: the run exited with 2 (a phase failed) or printed no JSON summary; a run
            that exits 1 (a check failed, or speed and batch disagree) is returned, its
            summary says why.
    """
    argv = [sys.executable, "-m", "pipelines.cli", "run", "--json", *args]
    started = time.monotonic()
    child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeCpu(child.pid)
    stdout, stderr = child.communicate()
    wall, cpu = time.monotonic() - started, sampler.stop()
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if child.returncode not in (0, 1) or len(lines) != 1:
        raise SystemExit(f"duet run {' '.join(args)} failed ({child.returncode}):\n{stderr[-4000:]}")
    return {"wall": wall, "cpu": cpu, "summary": json.loads(lines[0]), "returncode": child.returncode}


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[None]:
    """``n`` processes spinning on the CPU (``python3 -c 'while True: pass'``) while the block
    runs, killed after it (0: none)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()
