"""The CPU priority of the Spark JVM that ``duet run`` starts beside the speed layer (Linux).

``duet run`` starts the JVM at nice ``main_job.SPARK_NICE`` (19) while the speed layer runs,
so that the batch layer takes only the CPU the stream thread leaves idle. Once the speed
phase ends that priority must go: beside two busy processes of normal priority a JVM at
nice 19 gets about 1.5 % of the CPU (CFS weights 15 against 2 x 1024), and the batch phase of
the shop took 519 s instead of 23-48 s (issue 42). A nice value can only be lowered again
with the privilege to do so (root, ``CAP_SYS_NICE``, or ``RLIMIT_NICE`` allowing it), so:

* :func:`can_restore_priority`: whether this process may bring the JVM back to its own nice
  value; ``duet run`` starts the JVM niced during the speed phase only then, and calls
  :func:`restore_priority` on its own process when the phase ends (its threads, the one
  still starting the JVM among them, and every process it started: not through the
  SparkSession, which a JVM at nice 19 beside busy processes may never finish creating);
* otherwise ``duet run`` starts the JVM after the speed phase at the normal priority (the
  batch layer no longer overlaps the speed layer, but never starves).

Measurements: ``docs/batch-priority.md``.
"""
from __future__ import annotations

import os
import resource
import sys

__all__ = ["can_restore_priority", "restore_priority"]


def can_restore_priority() -> bool:
    """Whether this process may set a child's nice value back down to its own (Linux only):
    as root, or when ``RLIMIT_NICE`` allows that value (its ceiling is ``20 - limit``)."""
    if not sys.platform.startswith("linux"):
        return False
    if os.geteuid() == 0:
        return True
    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return soft == resource.RLIM_INFINITY or 20 - soft <= os.getpriority(os.PRIO_PROCESS, 0)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from ``/proc``)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:  # the process ended meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def restore_priority(pid: int, nice: int) -> int:
    """Set the nice value of every thread of process ``pid`` and of its descendants (the
    JVM's threads, Spark's Python workers) to ``nice``; returns the number of threads set.
    Threads and processes that end meanwhile are skipped.

    Raises:
        PermissionError: lowering the nice value is not permitted (see
            :func:`can_restore_priority`).
    """
    todo, done = [pid], 0
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
                done += 1
            except ProcessLookupError:
                continue
        todo.extend(_children(p))
    return done
