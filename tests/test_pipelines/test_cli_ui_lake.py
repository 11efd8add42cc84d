"""``duet ui`` never destroys a user's results unasked (issue 23): it starts on the lake and
the topics as they are; only ``--load`` deletes them, after a question naming what goes (or
``--yes``), and it refuses to guess when nobody can answer (stdin not a terminal).

The console script as a user runs it: the question in a real pseudo-terminal, the UI itself
started (``dagster dev``), looked at, and stopped with Ctrl-C.
"""

from __future__ import annotations

import hashlib
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = "pipelines.examples.flights:pipeline"


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: its digest and modification time (ns)."""
    return {str(f.relative_to(root)): (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
            for f in sorted(root.rglob("*")) if f.is_file()}


def env_without_cluster(**extra: str) -> dict[str, str]:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "", **extra}
    for var in ("DUET_PIPELINE", "DUET_PIPELINES", "DUET_PROJECT_ROOT", "DUET_LAKE"):
        env.pop(var, None)
    return env


def duet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env_without_cluster(), stdin=subprocess.DEVNULL, check=False, cwd=REPO)


def one_line(res: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_load_without_a_terminal_needs_yes(tiny_lake: Path) -> None:
    """Nothing deleted, no broker started: one line telling the flag."""
    before = snapshot(tiny_lake)
    res = duet("ui", "--pipeline", FLIGHTS, "--lake", str(tiny_lake), "--load")
    assert res.returncode == 2, res.stderr
    line = one_line(res)
    assert line.startswith(f"duet ui: --load deletes the lake tables of flights in {tiny_lake / 'flights'} (views); ")
    assert line.endswith("stdin is not a terminal to ask: pass --yes to confirm"), line
    assert snapshot(tiny_lake) == before


@pytest.mark.parametrize(("flag", "value", "what"), [("--limit", "20000", "limits"), ("--years", "2", "scales")])
def test_limit_or_years_without_load_is_a_mistake(tiny_lake: Path, flag: str, value: str, what: str) -> None:
    """``duet ui --limit 20000`` used to reset the lake and load 20,000 flights: now it says so
    (and so does ``--years 2``, which --load alone loads)."""
    res = duet("ui", "--pipeline", FLIGHTS, "--lake", str(tiny_lake), flag, value)
    assert res.returncode == 2, res.stderr
    assert one_line(res) == (f"duet ui: {flag} {what} the sample data that --load loads: add --load (which deletes "
                             f"the topics and the lake tables first) or drop {flag}")


def test_years_of_a_pipeline_without_copies_is_a_mistake(tiny_lake: Path) -> None:
    res = duet("ui", "--pipeline", "pipelines.examples.shop:pipeline", "--lake", str(tiny_lake), "--load", "--yes",
               "--years", "2")
    assert res.returncode == 2, res.stderr
    assert one_line(res).startswith("duet ui: pipeline 'shop' declares no sample_copy, so its sample data cannot be "
                                    "scaled"), res.stderr


def test_the_question_names_what_goes_and_no_keeps_it(tiny_lake: Path) -> None:
    before = snapshot(tiny_lake)
    out, status = in_a_terminal(["ui", "--pipeline", FLIGHTS, "--lake", str(tiny_lake), "--load"], answer="n")
    assert status == 1, out
    question = " ".join(out.split())  # the terminal wraps it
    assert (f"duet ui --load deletes the lake tables of flights in {tiny_lake / 'flights'} (views). Continue? [y/N]"
            in question), out
    assert "duet ui: cancelled; nothing was deleted" in question, out
    assert snapshot(tiny_lake) == before


def in_a_terminal(args: list[str], answer: str, timeout_s: float = 60) -> tuple[str, int]:
    """Run ``duet ARGS`` in a pseudo-terminal, type ``answer`` at the question; (output, status)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdin, stdout and stderr are the terminal
        os.chdir(REPO)
        os.execve(sys.executable, [sys.executable, "-m", "pipelines.cli", *args], env_without_cluster())
    out, answered, deadline = b"", False, time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1)
            if not ready:
                continue
            try:
                data = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            out += data
            if not answered and b"[y/N]" in out:
                os.write(fd, answer.encode() + b"\n")
                answered = True
    finally:
        os.close(fd)
    if time.monotonic() >= deadline:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return out.decode(errors="replace").replace("\r", ""), os.waitstatus_to_exitcode(status)


# --------------------------------------------------------------------------- the UI itself
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_ui_starts_on_the_lake_and_topics_as_they_are(tiny_lake: Path, kafka_bootstrap: str,
                                                      tmp_path: Path) -> None:
    """Both examples (no --pipeline): flights has tables, kept to the byte; shop has none, and
    ``duet ui`` says in one line how to fill it, then starts all the same. The flights topics
    keep their records."""
    from pipelines.examples.flights import pipeline as flights
    from pipelines.produce.load import produce_tables
    from pipelines.job.steps import input_record_count

    produce_tables(flights, kafka_bootstrap, flights.sample_data(0))  # planes, airports, airlines
    records = input_record_count(kafka_bootstrap, flights.input_topics)
    assert records["airlines"] > 0
    before = snapshot(tiny_lake)

    port = _free_port()
    log = tmp_path / "duet-ui.log"
    env = env_without_cluster(DAGSTER_HOME=str(tmp_path / "dagster_home"), GX_ANALYTICS_ENABLED="False")
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "ui", "--bootstrap", kafka_bootstrap,
                                 "--lake", str(tiny_lake), "--port", str(port)], env=env, cwd=REPO,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, f"duet ui exited with {proc.returncode}:\n{log.read_text()[-5000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"the Dagster UI did not answer:\n{log.read_text()[-5000:]}"
            time.sleep(1)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: stops dagster dev, then exits 0
        status = proc.wait(timeout=60)
    text = " ".join(log.read_text().split())
    assert status == 0, text[-3000:]
    assert f"duet ui: shop: no tables in {tiny_lake / 'shop'} yet (the UI's runs ingest what its topics hold)" in text
    assert "`duet run`" in text and "`duet ui --load`" in text
    assert "flights: no tables" not in text and "resetting" not in text
    assert snapshot(tiny_lake) == before
    assert input_record_count(kafka_bootstrap, flights.input_topics) == records
