"""The happy path is quiet (issue 44): ``duet run --limit 2000`` on the embedded broker,
started fresh as ``make run`` starts it, prints the progress and the summary and no WARNING
or INFO line on stderr: no retry that succeeded (topics whose metadata propagates, an
idempotent producer waiting for a loading coordinator), no third-party INFO (Great
Expectations' temporary directories), no JVM start notice (``Using incubator modules``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines_testkit import log_lines

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1500)]


def test_duet_run_prints_no_warning_or_info_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "DUET_PIPELINE", "DUET_LAKE")}
    env["PYSPARK_PYTHON"] = sys.executable
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--limit", "2000", "--lake", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=1400, check=False)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "OK: every check passed and speed and batch agree" in proc.stdout, proc.stdout[-3000:]
    assert log_lines(proc.stderr) == [], proc.stderr[-5000:]


def test_the_log_line_check_sees_each_kind_of_line() -> None:
    """The check itself: the CLI's logging, Spark's log4j, a JVM notice and SLF4J's reports are log lines; a
    progress line or an error's one line are not; a dead-lettered record's one WARNING is
    allowed as many times as records were dead-lettered."""
    stderr = ("2026-12-06 04:30:02,370 WARNING speed_layer.timeouts: creating topics [...]\n"
              "2026-12-06 04:32:42,740 INFO great_expectations.data_context.types.base: Created temporary ...\n"
              "WARNING: Using incubator modules: jdk.incubator.vector\n"
              "04:30:02 WARN SparkContext: something\n"
              'SLF4J: Failed to load class "org.slf4j.impl.StaticLoggerBinder".\n'
              "SLF4J(W): Class path contains SLF4J bindings targeting slf4j-api versions 1.7.x or earlier.\n"
              "speed  ━━━━━━━━━━ 2,000 records\n"
              "duet run: the lake is busy\n")
    assert len(log_lines(stderr)) == 6
    dead = ("2026-12-06 04:58:13,599 WARNING speed_layer.task: task 0_1: record readings-1@925 sent to "
            "greenhouse-dlq after deserialization error: SerializationException(...)\n")
    assert log_lines(dead, dead_lettered=1) == []
    assert log_lines(dead) == ["1 dead-letter WARNING lines for 0 dead-lettered records"]
    assert log_lines(dead + stderr, dead_lettered=1) == log_lines(stderr)
