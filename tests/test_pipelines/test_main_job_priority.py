"""The Spark JVM of ``duet run`` starts at a low CPU priority (``main_job.SPARK_NICE``) so that
the batch layer, running beside the speed layer on a backlog, leaves the stream thread its
core; the process itself keeps its priority (Linux: a nice value is a thread's, and a child
inherits its starting thread's)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from pipelines.job.main_job import SPARK_NICE, _started_at_low_priority
from pipelines.job.spark_priority import can_restore_priority, restore_priority

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def test_a_process_started_through_it_runs_niced_and_the_caller_does_not() -> None:
    before = os.getpriority(os.PRIO_PROCESS, 0)
    started: list[subprocess.Popen[bytes]] = []
    # as run_main_job does: on a thread of its own (the "spark" background thread)
    worker = threading.Thread(target=lambda: started.append(
        _started_at_low_priority(lambda: subprocess.Popen(["sleep", "30"]))))
    worker.start()
    worker.join(10)
    child = started[0]
    try:
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == min(19, before + SPARK_NICE)
        assert os.getpriority(os.PRIO_PROCESS, 0) == before  # this (main) thread kept its priority
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not can_restore_priority(), reason="lowering a nice value needs root or RLIMIT_NICE")
def test_after_the_speed_phase_the_niced_process_its_threads_and_children_are_back_at_the_callers_priority() -> None:
    # issue 42: left at nice 19 beside two busy processes the batch phase got ~1.5 % of the CPU
    before = os.getpriority(os.PRIO_PROCESS, 0)
    started: list[subprocess.Popen[bytes]] = []
    script = "sleep 30 & sleep 30 & wait"  # a parent with two children, as the JVM and its Python workers
    worker = threading.Thread(target=lambda: started.append(
        _started_at_low_priority(lambda: subprocess.Popen(["sh", "-c", script]))))
    worker.start()
    worker.join(10)
    parent = started[0]
    children: list[int] = []
    try:
        for _ in range(100):  # the shell forks its children
            children = [int(c) for c in open(f"/proc/{parent.pid}/task/{parent.pid}/children").read().split()]
            if len(children) == 2:
                break
            threading.Event().wait(0.05)
        assert len(children) == 2
        niced = min(19, before + SPARK_NICE)
        assert [os.getpriority(os.PRIO_PROCESS, p) for p in [parent.pid, *children]] == [niced] * 3
        assert restore_priority(parent.pid, before) >= 3
        assert [os.getpriority(os.PRIO_PROCESS, p) for p in [parent.pid, *children]] == [before] * 3
    finally:
        for pid in children:
            os.kill(pid, 9)
        parent.kill()
        parent.wait()


@pytest.mark.skipif(not can_restore_priority(), reason="lowering a nice value needs root or RLIMIT_NICE")
def test_a_jvm_still_starting_when_the_speed_phase_ends_starts_at_the_callers_priority() -> None:
    # duet run restores its own process (not through the SparkSession): beside busy processes
    # the niced thread may not have started the JVM yet, and a JVM at nice 19 may never get
    # the CPU to finish creating the session
    before = os.getpriority(os.PRIO_PROCESS, 0)
    go, started = threading.Event(), []

    def spark_thread() -> None:
        go.wait(10)  # still starting when the speed phase ends
        started.append(subprocess.Popen(["sleep", "30"]))

    worker = threading.Thread(target=lambda: _started_at_low_priority(spark_thread))
    worker.start()
    try:
        time.sleep(0.2)
        assert restore_priority(os.getpid(), before) >= 2  # this thread and the niced one at least
        go.set()
        worker.join(10)
        assert os.getpriority(os.PRIO_PROCESS, started[0].pid) == before
    finally:
        go.set()
        for child in started:
            child.kill()
            child.wait()
