"""``duet speed --follow --server HOST:PORT`` as a user runs it (issue 23 item 3): on a
project made by ``duet init``, against the session's broker, the command serves ``/health``
and Prometheus ``/metrics`` under Kafka Streams' names until SIGINT, then prints one line
and exits 0; ``--server`` without ``--follow`` is a one-line error."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from speed_service_kit import wait_healthy

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _duet(*args: str, cwd: Path, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)  # type: ignore[call-overload]


def test_speed_follow_server_serves_health_and_metrics_until_sigint(kafka_bootstrap: str, tmp_path: Path) -> None:
    project = tmp_path / "sensors"
    made = subprocess.run([sys.executable, "-m", "pipelines.cli", "init", str(project)], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stdout + made.stderr
    port = _free_port()
    proc = _duet("speed", "--follow", "--fresh", "--bootstrap", kafka_bootstrap, "--server", f"127.0.0.1:{port}",
                 cwd=project)
    try:
        assert wait_healthy(proc, f"http://127.0.0.1:{port}")["state"] in ("RUNNING", "REBALANCING")
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        for name in ("kafka_streams_stream_thread_process_total", "kafka_streams_alive_stream_threads"):
            assert name in metrics, name
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert "speed service stopped (SIGINT)" in out and f"127.0.0.1:{port}" in out, out


def test_server_needs_follow(tmp_path: Path) -> None:
    proc = _duet("speed", "--server", "127.0.0.1:0", cwd=tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "--server runs the speed layer as a service: add --follow" in out
