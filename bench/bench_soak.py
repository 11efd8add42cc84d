"""The soak (issue 41, item 7): ``duet up`` on the flights at a fixed rate for a while, with
the Dagster recomputes its new-data sensor starts (back to back: each run ingests what
arrived since the last), sampled every few seconds:

* RSS of the speed service (the ``duet up`` process) and of serving (its child), from
  ``/proc/<pid>/status``;
* freshness: how far the speed stream time that serving answers with (``GET /health``)
  trails the feed, in seconds of the feed (events behind / rate);
* at the end, once the feed has ended and a recompute has archived all of it: speed ==
  batch on every closed window (:func:`pipelines.job.serving_steps.compare_layers`, the
  batch views of the lake against the view topics, excluding the windows the speed service
  reports it dropped late records of, ``GET /speed/late``).

``python bench/bench_soak.py --seconds 1800 --rate 1000`` (the 30-minute version); the
3-minute version is ``tests/test_pipelines/test_soak.py``. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx


@dataclass
class SoakResult:
    """What a soak measured. RSS in MiB, freshness in s, ``agreement`` per view (1.0: speed
    == batch on every compared window), ``compared`` windows per view."""

    seconds: float
    rate: float
    events: int
    rss_speed_mib: list[float] = field(default_factory=list)
    rss_serving_mib: list[float] = field(default_factory=list)
    freshness_s: list[float] = field(default_factory=list)
    #: rows serving's live tables hold (every view; ``GET /health``), sampled with the RSS: the
    #: speed layer's rows after the batch watermark, what serving's memory grows with
    live_rows: list[int] = field(default_factory=list)
    #: the live rows once the last batch version (the feed's end) is served and its prune
    #: delay has passed: only the windows still open at that watermark
    live_rows_final: int | None = None
    recomputes: int = 0
    batch_watermark_ms: int | None = None
    agreement: dict[str, float] = field(default_factory=dict)
    compared: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)
    stopped_s: float | None = None

    @staticmethod
    def _q(values: list[float], q: float) -> float | None:
        if not values:
            return None
        if len(values) == 1:
            return values[0]
        return statistics.quantiles(values, n=100, method="inclusive")[min(98, max(0, round(q * 100) - 1))]

    def freshness(self, q: float) -> float | None:
        """The ``q`` quantile of the freshness samples (s)."""
        return self._q(self.freshness_s, q)

    @staticmethod
    def growth(rss: list[float]) -> float | None:
        """The median RSS of the last third of the samples over that of the middle third
        (the first third is the warm-up)."""
        third = len(rss) // 3
        if third < 2:
            return None
        return statistics.median(rss[-third:]) / statistics.median(rss[third:2 * third])

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 1), "rate": self.rate, "events": self.events,
            "rss_speed_mib": {"first": self.rss_speed_mib[:1], "max": max(self.rss_speed_mib, default=None),
                              "last": self.rss_speed_mib[-1:], "growth": self.growth(self.rss_speed_mib)},
            "rss_serving_mib": {"first": self.rss_serving_mib[:1], "max": max(self.rss_serving_mib, default=None),
                                "last": self.rss_serving_mib[-1:], "growth": self.growth(self.rss_serving_mib)},
            "live_rows": {"first": self.live_rows[:1], "max": max(self.live_rows, default=None),
                          "last": self.live_rows[-1:], "final": self.live_rows_final},
            "freshness_s": {"p50": self.freshness(0.5), "p99": self.freshness(0.99),
                            "max": max(self.freshness_s, default=None), "samples": len(self.freshness_s)},
            "recomputes": self.recomputes, "batch_watermark_ms": self.batch_watermark_ms,
            "agreement": self.agreement, "compared": self.compared, "excluded": self.excluded,
            "stopped_s": self.stopped_s,
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _children(parent: int) -> dict[int, list[bytes]]:
    """``{pid: command line}`` of the live children of ``parent`` (read from /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            out[int(entry.name)] = cmd
    return out


def _serving_pid(parent: int) -> int | None:
    """The serving child of ``duet up`` (``parent``)."""
    return next((pid for pid, cmd in _children(parent).items() if b"serve" in cmd), None)


def _get(url: str) -> Any:
    try:
        res = httpx.get(url, timeout=10)
        return res.json() if res.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def run_soak(seconds: float, rate: float, workdir: Path, *, log: Any = None, final_wait_s: float = 600,
             up_args: tuple[str, ...] = ()) -> SoakResult:
    """Run ``duet up`` on the flights fed at ``rate`` events/s for ``seconds`` (the feed is
    cut to ``rate * seconds`` events; beyond a year, copies of the year: ``--years``), sample it, wait for a recompute to archive all of it,
    compare speed and batch, stop it with SIGINT. ``workdir``: its lake and DAGSTER_HOME;
    ``final_wait_s``: how long the last recompute (the feed's end) may take after the feed;
    ``up_args``: more ``duet up`` options (e.g. ``("--recompute-nice", "0")``).

    Raises:
        AssertionError: ``duet up`` failed, or a phase did not happen in time.
    """
    from pipelines.examples.flights import pipeline
    from pipelines.job.serving_steps import compare_layers, read_batch_views, read_speed_views
    from pipelines.speed.service import LateRecord

    events = int(rate * seconds)
    # a feed longer than the sample (a year of flights: 336,776) replays copies of it, each a
    # year later (duet up --years), each cut to the same share of the events
    years = -(-events // pipeline.sample_data().event_count())
    per_year = -(-events // years)
    events = per_year * years
    stamps = [rec.timestamp for _topic, rec in pipeline.sample_data(per_year, years).events]
    running_max: list[int] = []
    for ts in stamps:
        running_max.append(max(ts, running_max[-1]) if running_max else ts)
    port, ui_port, speed_port = _free_port(), _free_port(), _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "400", "DAGSTER_HOME": str(workdir / "dagster"),
           "DUET_PIPELINE": "", "KAFKA_BOOTSTRAP_SERVERS": ""}
    out = open(workdir / "duet-up.out", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "up", "--lake", str(workdir / "lake"),
                             "--rate", str(rate), "--limit", str(per_year), "--years", str(years), "--port", str(port),
                             "--speed-port", str(speed_port), "--ui-port", str(ui_port), *up_args],
                            cwd=workdir, env=env, text=True, stdout=out, stderr=subprocess.STDOUT)
    base, speed = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{speed_port}"
    result = SoakResult(seconds=seconds, rate=rate, events=events)

    def text() -> str:
        return (workdir / "duet-up.out").read_text()[-4000:]

    def say(message: str) -> None:
        if log is not None:
            log(message)

    try:
        deadline = time.monotonic() + 300
        while "Ctrl-C stops all" not in text():
            assert proc.poll() is None and time.monotonic() < deadline, text()
            time.sleep(0.2)
        started = time.monotonic()
        servers = text().split("live on Kafka ", 1)[1].split(" ", 1)[0]
        serving_pid = None
        watermarks: set[int] = set()
        while (elapsed := time.monotonic() - started) < seconds:
            assert proc.poll() is None, text()
            serving_pid = serving_pid or _serving_pid(proc.pid)
            health = _get(f"{base}/health")
            if health is not None:
                stream = (health["speed"].get("departures_hourly") or {}).get("stream_time_ms")
                if stream is not None:
                    fed = min(len(stamps), int(rate * elapsed))
                    seen = bisect.bisect_right(running_max, stream)
                    result.freshness_s.append(max(0, fed - seen) / rate)
                if health.get("batch_watermark_ms") is not None:
                    watermarks.add(health["batch_watermark_ms"])
                result.live_rows.append(sum(v.get("rows") or 0 for v in health["speed"].values()))
            for pid, into in ((proc.pid, result.rss_speed_mib), (serving_pid, result.rss_serving_mib)):
                rss = _rss_mib(pid) if pid else None
                if rss is not None:
                    into.append(round(rss, 1))
            say(f"{elapsed:.0f} s: rss speed {result.rss_speed_mib[-1:]} serving {result.rss_serving_mib[-1:]}, "
                f"freshness {result.freshness_s[-1:]} s, live rows {result.live_rows[-1:]}, watermarks {len(watermarks)}")
            time.sleep(5)
        last = max(stamps)
        deadline = time.monotonic() + final_wait_s  # the feed's end archived and recomputed
        while True:
            health = _get(f"{base}/health") or {}
            if health.get("batch_watermark_ms") is not None:
                watermarks.add(health["batch_watermark_ms"])
            if health.get("batch_watermark_ms") == last:
                break
            assert proc.poll() is None and time.monotonic() < deadline, (health.get("batch_watermark_ms"), last, text())
            time.sleep(2)
        result.recomputes = len(watermarks)
        result.batch_watermark_ms = last
        late = _get(f"{speed}/speed/late")
        assert late is not None, text()
        folder = workdir / "lake" / pipeline.name
        reports, excluded = compare_layers(
            pipeline, read_batch_views(pipeline, folder), read_speed_views(pipeline, servers), last,
            [LateRecord(s, k, int(t)) for s, k, t in late["records"]],
            late_windows={s: {(k, int(w)) for k, w in wins} for s, wins in late["windows"].items()})
        result.agreement = {v: r.ratio for v, r in reports.items()}
        result.compared = {v: r.compared for v, r in reports.items()}
        result.excluded = excluded
        from serving.views.live import PRUNE_DELAY_S

        prune_by = time.monotonic() + PRUNE_DELAY_S + 30  # the rows the last watermark closes leave
        while True:
            health = _get(f"{base}/health") or {}
            rows = sum(v.get("rows") or 0 for v in (health.get("speed") or {}).values())
            if health and (rows < 0.25 * max(result.live_rows, default=0) or time.monotonic() >= prune_by):
                result.live_rows_final = rows
                break
            assert proc.poll() is None, text()
            time.sleep(2)
        proc.send_signal(signal.SIGINT)
        asked = time.monotonic()
        proc.wait(120)
        result.stopped_s = round(time.monotonic() - asked, 1)
    finally:
        if proc.poll() is None:  # a failed soak: duet up's children (own sessions) die with it
            children = list(_children(proc.pid))  # serving and dagster dev, each leading a group
            proc.kill()
            proc.wait()
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        out.close()
    assert proc.returncode == 0, text()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1800.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--final-wait", type=float, default=600.0,
                        help="seconds the recompute of the feed's end may take after the feed (a 30-minute "
                             "feed at 1,000/s is 1.8 M flights of history for the last recompute)")
    parser.add_argument("--recompute-nice", type=int, default=None, help="duet up's --recompute-nice (default: its own)")
    parser.add_argument("--commit-interval", type=int, default=None,
                        help="duet up's --commit-interval, ms (default: its own, 200)")
    args = parser.parse_args()
    up_args: list[str] = []
    for flag, value in (("--recompute-nice", args.recompute_nice), ("--commit-interval", args.commit_interval)):
        if value is not None:  # else duet up's own default
            up_args += [flag, str(value)]
    with tempfile.TemporaryDirectory(prefix="duet-soak-") as work:
        result = run_soak(args.seconds, args.rate, Path(work),
                          log=lambda m: print(m, file=sys.stderr, flush=True), final_wait_s=args.final_wait,
                          up_args=tuple(up_args))
    print(json.dumps(result.summary(), default=str))


if __name__ == "__main__":
    main()
