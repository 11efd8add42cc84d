"""The Spark JVM of ``duet run`` starts at a low CPU priority (``main_job.SPARK_NICE``) so that
the batch layer, running beside the speed layer on a backlog, leaves the stream thread its
core; the process itself keeps its priority (Linux: a nice value is a thread's, and a child
inherits its starting thread's)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from pipelines.job.main_job import SPARK_NICE, _started_at_low_priority

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
