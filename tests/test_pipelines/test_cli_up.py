"""``duet up`` as a user runs it (issue 41, item 5): the flights live on the embedded broker,
fed at a small rate, with serving, the speed service and Dagster (schedule and sensor on). A
new flight's window is in the merged answer of ``GET /views/departures_hourly/keys/<origin>``
within 1 s of its produce (source speed); SIGINT ends everything within seconds, in one line,
leaving no process behind."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.timeout(600)]

#: the new flight's scheduled hour: later than anything the slow replay reaches in the test
_NEW_HOUR = "2013-12-30T10:00:00Z"
_NEW_HOUR_MS = 1388397600000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _nice(pid: int) -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:  # gone
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class _Output:
    """The child's merged stdout/stderr, read on a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, proc: subprocess.Popen[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while needle not in self.text():
            assert proc.poll() is None, self.text()[-4000:]
            assert time.monotonic() < deadline, self.text()[-4000:]
            time.sleep(0.2)


def _new_flight(pipeline: object) -> tuple[str, str, dict[str, object]]:
    """A sample flight moved to :data:`_NEW_HOUR`: (topic, key, value)."""
    topic, record = next(iter(pipeline.sample_data(1).events))  # type: ignore[attr-defined]
    value = {**record.value, "time_hour": _NEW_HOUR, "minute": 5, "month": 12, "day": 30, "hour": 5}
    return topic, record.key, value


def _window(base: str, origin: str) -> dict[str, object] | None:
    res = httpx.get(f"{base}/views/departures_hourly/keys/{origin}", params={"from": str(_NEW_HOUR_MS)}, timeout=5)
    if res.status_code != 200:
        return None
    rows = [r for r in res.json()["rows"] if r["window_start"] == _NEW_HOUR_MS]
    return rows[0] if rows else None


def test_duet_up_serves_a_new_flight_within_a_second_and_stops_on_sigint(tmp_path: Path) -> None:
    from pipelines.examples.flights import pipeline
    from pipelines.produce.load import encode_value, source_producer

    port, ui_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "400", "DAGSTER_HOME": str(tmp_path / "dagster"),
           "DUET_PIPELINE": "", "KAFKA_BOOTSTRAP_SERVERS": "", "DUET_SERVING_LIVE_DIR": str(tmp_path / "live")}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "up", "--lake", str(tmp_path / "lake"),
                             "--rate", "5", "--years", "2", "--port", str(port), "--speed-port", "0",
                             "--ui-port", str(ui_port), "--commit-interval", "150"],
                            cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = _Output(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        out.wait_for("Ctrl-C stops all", proc, 300)
        servers = out.text().split("live on Kafka ", 1)[1].split(" ", 1)[0]
        deadline = time.monotonic() + 120  # serving reads the view topic and the replay's first flights
        while True:
            try:
                health = httpx.get(f"{base}/health", timeout=5).json()
                if (health["speed"].get("departures_hourly") or {}).get("rows"):
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, out.text()[-4000:]
            time.sleep(0.2)
        deadline = time.monotonic() + 240  # the Dagster webserver loads the code location
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{ui_port}/server_info", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, out.text()[-4000:]
            time.sleep(0.5)

        # --commit-interval reaches the speed service (its /health says it)
        speed_url = out.text().split("speed service at ", 1)[1].split(",", 1)[0]
        assert httpx.get(f"{speed_url}/health", timeout=10).json()["commit_interval_ms"] == 150

        # serving's live table: RocksDB stores in a folder of its own below $DUET_SERVING_LIVE_DIR
        (claimed,) = (tmp_path / "live").iterdir()
        assert any(p.name.endswith("-departures_hourly") for p in claimed.iterdir())

        # --years 2 is recorded before Dagster loads: its partitions (and the new-data sensor) cover both years
        from pipelines.lake.loaded import loaded_copies

        assert loaded_copies(pipeline.lake(tmp_path / "lake")) == 2

        topic, key, value = _new_flight(pipeline)
        origin = str(value["origin"])
        assert _window(base, origin) is None
        with source_producer(servers) as producer:
            producer.produce(topic, key=key.encode(), value=encode_value(value), timestamp=_NEW_HOUR_MS + 300_000)
            assert producer.flush(30) == 0
        produced = time.monotonic()
        while (row := _window(base, origin)) is None:
            assert time.monotonic() - produced < 10, out.text()[-4000:]
            time.sleep(0.02)
        took = time.monotonic() - produced
        print(f"new flight in the merged answer after {took * 1000:.0f} ms")
        assert row["source"] == "speed" and row["value"]["count"] == 1, row
        assert took <= 1.0, f"{took:.2f} s"

        family = _descendants(proc.pid)
        assert len(family) >= 2  # serving and dagster dev at least
        # Dagster and its runs at nice RECOMPUTE_NICE (a recompute yields the CPU to the live
        # path), serving and the speed service at the caller's
        from pipelines.cli.up import RECOMPUTE_NICE

        own = os.getpriority(os.PRIO_PROCESS, proc.pid)
        cmdlines = {p: _cmdline(p) for p in family}
        dagster = [p for p, c in cmdlines.items() if "dagster" in c]
        serving = [p for p, c in cmdlines.items() if "pipelines.cli serve" in c]
        assert dagster and serving, cmdlines
        assert {_nice(p) for p in dagster} - {None} == {min(own + RECOMPUTE_NICE, 19)}, cmdlines
        assert {_nice(p) for p in serving} - {None} == {own}
        proc.send_signal(signal.SIGINT)
        asked = time.monotonic()
        proc.wait(60)
        stopped = time.monotonic() - asked
    finally:
        if proc.poll() is None:  # a failed test: duet up and whatever it started, killed
            left_over = _descendants(proc.pid)
            proc.kill()
            proc.wait()
            for pid in left_over:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (left := [p for p in family if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    print(f"duet up stopped {stopped:.1f} s after SIGINT")
    text = out.text()
    assert not left, left
    assert proc.returncode == 0, text[-4000:]
    assert stopped < 30, f"{stopped:.1f} s"
    assert "Traceback" not in text, text[-4000:]
    ends = [line for line in text.splitlines() if line.startswith("duet up: stopped (SIGINT)")]
    assert len(ends) == 1 and "serving and Dagster stopped" in ends[0], text[-4000:]
    assert list((tmp_path / "live").iterdir()) == []  # serving's shutdown removed its stores' folder


@pytest.mark.parametrize(("value", "says"), [("5", "greater than or equal to 10"), ("60001", "less than or equal to 60000"),
                                             ("soon", "should be a valid integer")])
def test_a_commit_interval_out_of_range_fails_before_anything_starts(value: str, says: str) -> None:
    """``--commit-interval`` (ms) takes 10..60,000: another value exits 2 naming the option and
    its range, before a broker, serving or Dagster starts."""
    from typer.testing import CliRunner

    from pipelines.cli import app

    res = CliRunner().invoke(app, ["up", "--commit-interval", value], terminal_width=200)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.replace("│", " ").split())
    assert "Invalid value for '--commit-interval'" in text and says in text, res.output
