"""Freshness of the live merge: the time from a flight's produce to its window's new value in
an answer of the serving API (``GET /views/departures_hourly/keys/{origin}``, the batch
snapshot merged with the view topics, docs/live-serving.md), against reading the speed
service's interactive query directly (``GET /speed/stores/departures_hourly/keys/{origin}``),
probed in the same run, on the same records; then the latency of a one-day query with the
live merge against the same query on a serving process without it.

Three processes beside the broker, as deployed: the flights pipeline's speed service
(``SpeedService``, this script re-run with ``--speed-service``), ``duet serve --bootstrap``
(live) and ``duet serve`` (the published snapshot alone, the query baseline); this process
produces and probes.

1. The tables, then ``--history`` flights as fast as possible; once the speed layer has
   them, their views are published as the batch snapshot at W = the last one's timestamp.
2. Per rate in ``--rates`` (flights/s, steady: a batch every 10 ms), ``--seconds`` of the
   following flights in their order (event time compressed, as the replay does). Every
   ``--probe-ms`` a flight just produced is a probe: with the number of flights produced so
   far in its (origin, hour) as target, both endpoints are polled (alternating which first)
   until its window's ``count`` reaches the target (timeout 10 s).
3. ``--queries`` requests for one day (half batch, half speed) of a key, alternating the live
   and the snapshot-only server, while flights keep arriving at the first rate.

The view topics are written at the speed layer's cache flushes, once per
``commit.interval.ms`` (``--commit-interval-ms``; duet's default is 10 s): the freshness of
the merge cannot be better. Percentiles are printed; no target is asserted.

    .venv/bin/python bench/bench_freshness.py --rates 1000,5000 --seconds 20
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _broker import bench_broker  # noqa: E402

VIEW = "departures_hourly"
HOUR = 3_600_000
PIPELINE = "pipelines.examples.flights:pipeline"
PROBE_TIMEOUT_S = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, ok: Any, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> Any:
    """Poll ``url`` until ``ok(response)`` is true; its response."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            res = httpx.get(url, timeout=5)
            if ok(res):
                return res
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready in {timeout_s} s")
        time.sleep(0.1)


def speed_service(bootstrap: str, port: int, commit_interval_ms: int) -> None:
    """``--speed-service``: the flights speed service until SIGTERM."""
    from pipelines.examples.flights import pipeline
    from pipelines.speed.server import SpeedService

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with SpeedService(pipeline, bootstrap, port=port,
                      extra={"commit.interval.ms": commit_interval_ms, "poll.ms": 10}):
        print("ready", flush=True)
        stop.wait()


class Feeder:
    """Produces flights in order at ``rate`` per second; counts them per (origin, hour) and
    offers a probe every ``probe_ms``."""

    def __init__(self, bootstrap: str, events: list[tuple[str, Any]]) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                                  "linger.ms": 2, "queue.buffering.max.messages": 1_000_000})
        self.events = events
        self.next = 0
        self.counts: dict[tuple[str, int], int] = {}
        self.probe: tuple[float, str, int, int] | None = None
        self.probe_ready = threading.Condition()

    def _send(self, topic: str, rec: Any) -> tuple[str, int]:
        from pipelines.produce.load import encode_value

        origin, ws = rec.value["origin"], rec.timestamp - rec.timestamp % HOUR
        self.counts[(origin, ws)] = self.counts.get((origin, ws), 0) + 1
        while True:
            try:
                self.producer.produce(topic, key=None if rec.key is None else rec.key.encode(),
                                      value=encode_value(rec.value), timestamp=rec.timestamp)
                return origin, ws
            except BufferError:
                self.producer.poll(0.05)

    def burst(self, n: int) -> int:
        """Produce the next ``n`` flights as fast as possible; the last one's timestamp."""
        for _ in range(n):
            topic, rec = self.events[self.next]
            self.next += 1
            self._send(topic, rec)
        self.producer.flush(120)
        return int(self.events[self.next - 1][1].timestamp)

    def steady(self, rate: int, seconds: float, probe_ms: int, stop: threading.Event | None = None) -> float:
        """Produce at ``rate``/s for ``seconds`` (or until ``stop``); the rate achieved."""
        tick, t0 = 0.01, time.perf_counter()
        sent, last_probe = 0, 0.0
        while time.perf_counter() - t0 < seconds and not (stop is not None and stop.is_set()):
            due = int((time.perf_counter() - t0) * rate) - sent
            for _ in range(max(0, due)):
                if self.next >= len(self.events):
                    raise RuntimeError("out of flights: lower --rates/--seconds")
                topic, rec = self.events[self.next]
                self.next += 1
                origin, ws = self._send(topic, rec)
                sent += 1
                now = time.perf_counter()
                if now - last_probe >= probe_ms / 1000:
                    last_probe = now
                    with self.probe_ready:
                        self.probe = (now, origin, ws, self.counts[(origin, ws)])
                        self.probe_ready.notify_all()
            self.producer.poll(0)
            time.sleep(max(0.0, tick - (time.perf_counter() - t0) % tick))
        self.producer.flush(60)
        return sent / (time.perf_counter() - t0)


def _merged_count(body: dict[str, Any], ws: int) -> int:
    return max((r["value"]["count"] for r in body.get("rows", []) if r["window_start"] == ws), default=-1)


def _iq_count(body: dict[str, Any], ws: int) -> int:
    return max((w["value"]["count"] for w in body.get("windows", []) if w["start"] == ws), default=-1)


def probe(feeder: Feeder, serving: str, speed: str, stop: threading.Event,
          out: dict[str, list[float]]) -> None:
    """Take each new probe when free; poll both endpoints until its window reaches the target."""
    ends = {"merged (serving API)": (f"{serving}/views/{VIEW}/keys/", _merged_count),
            "interactive query (speed service)": (f"{speed}/speed/stores/{VIEW}/keys/", _iq_count)}
    timeouts = {name: 0 for name in ends}
    with httpx.Client(timeout=5) as client:
        flip = False
        while not stop.is_set():
            with feeder.probe_ready:
                feeder.probe = None
                if not feeder.probe_ready.wait_for(lambda: feeder.probe is not None or stop.is_set(), 1):
                    continue
                if feeder.probe is None:
                    break
                t0, origin, ws, target = feeder.probe
            pending = dict(ends)
            flip = not flip
            while pending and time.perf_counter() - t0 < PROBE_TIMEOUT_S:
                for name in sorted(pending, reverse=flip):
                    url, count = pending[name]
                    res = client.get(url + origin, params={"from": ws, "to": ws})
                    if res.status_code == 200 and count(res.json(), ws) >= target:
                        out.setdefault(name, []).append(time.perf_counter() - t0)
                        del pending[name]
                time.sleep(0.002)
            for name in pending:
                timeouts[name] += 1
    for name, n in timeouts.items():
        if n:
            out.setdefault(f"{name} timeouts", []).append(float(n))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _line(name: str, secs: list[float]) -> str:
    ms = [1000 * s for s in secs]
    return (f"  {name:36s} n={len(ms):5d}  p50 {_pct(ms, 0.5):7.1f} ms  p99 {_pct(ms, 0.99):7.1f} ms  "
            f"max {max(ms):7.1f} ms  mean {statistics.fmean(ms):7.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="1000,5000", help="flights/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=20.0, help="per rate")
    ap.add_argument("--history", type=int, default=20_000, help="flights before the batch snapshot")
    ap.add_argument("--probe-ms", type=int, default=100)
    ap.add_argument("--queries", type=int, default=400, help="one-day queries per server")
    ap.add_argument("--commit-interval-ms", type=int, default=200, help="the speed service's commit interval")
    ap.add_argument("--bootstrap", default=None, help="an external broker (default: an embedded one)")
    ap.add_argument("--speed-service", metavar="BOOTSTRAP", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.speed_service:
        speed_service(args.speed_service, args.port, args.commit_interval_ms)
        return

    from pipelines.examples.flights import pipeline
    from pipelines.examples.flights.topology import REQUIRED_FIELDS
    from pipelines.produce.load import produce_tables
    from pipelines.job.serving_steps import read_speed_views
    from pipelines.produce.topics import ensure_pipeline_topics
    from serving.views.publish import publish

    rates = [int(r) for r in args.rates.split(",")]
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    duet = str(Path(sys.executable).with_name("duet"))
    procs: list[subprocess.Popen[bytes]] = []
    with bench_broker(args.bootstrap) as (bootstrap, _), tempfile.TemporaryDirectory() as tmp:
        try:
            sample = pipeline.sample_data()
            ensure_pipeline_topics(pipeline, bootstrap)
            produce_tables(pipeline, bootstrap, sample)
            events = [(t, r) for t, r in sample.events
                      if t == "flights" and isinstance(r.value, dict) and all(r.value.get(f) is not None
                                                                              for f in REQUIRED_FIELDS)]
            speed_port = _free_port()
            procs.append(subprocess.Popen([sys.executable, __file__, "--speed-service", bootstrap, "--port",
                                           str(speed_port), "--commit-interval-ms", str(args.commit_interval_ms)],
                                          env=env, stdout=subprocess.PIPE))
            assert procs[0].stdout is not None and procs[0].stdout.readline().strip() == b"ready"
            speed = f"http://127.0.0.1:{speed_port}"
            feeder = Feeder(bootstrap, events)
            watermark = feeder.burst(args.history)
            origin, ws = max(feeder.counts, key=lambda k: k[1])
            _wait_http(f"{speed}/speed/stores/{VIEW}/keys/{origin}?from={ws}&to={ws}",
                       lambda r: r.status_code == 200 and _iq_count(r.json(), ws) >= feeder.counts[(origin, ws)],
                       600, procs[0])
            time.sleep(2 * args.commit_interval_ms / 1000)  # the last flush on the view topics
            frames = read_speed_views(pipeline, bootstrap)
            publish(pipeline.lake(Path(tmp)), pipeline.view_specs.values(), frames, {}, watermark)
            print(f"history: {args.history:,} flights, snapshot published at W = {watermark}", flush=True)

            ports = {"live": _free_port(), "snapshot": _free_port()}
            for name, port in ports.items():
                live = ["--bootstrap", bootstrap] if name == "live" else []
                procs.append(subprocess.Popen([duet, "serve", "--pipeline", PIPELINE, "--lake", tmp, "--port",
                                               str(port), *live], env=env, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL))
            serving = f"http://127.0.0.1:{ports['live']}"
            _wait_http(f"{serving}/views/{VIEW}/keys/{origin}", lambda r: r.status_code == 200 and r.json()["live"],
                       120, procs[1])
            _wait_http(f"http://127.0.0.1:{ports['snapshot']}/health", lambda r: r.status_code == 200, 120, procs[2])

            for rate in rates:
                out: dict[str, list[float]] = {}
                stop = threading.Event()
                prober = threading.Thread(target=probe, args=(feeder, serving, speed, stop, out))
                prober.start()
                achieved = feeder.steady(rate, args.seconds, args.probe_ms)
                time.sleep(1)
                stop.set()
                with feeder.probe_ready:
                    feeder.probe_ready.notify_all()
                prober.join()
                print(f"freshness at {rate:,} flights/s ({achieved:,.0f} achieved, {args.seconds:.0f} s, "
                      f"commit.interval.ms {args.commit_interval_ms}):", flush=True)
                for name, secs in out.items():
                    if name.endswith("timeouts"):
                        print(f"  {name}: {int(sum(secs))} probes not answered in {PROBE_TIMEOUT_S:.0f} s")
                    else:
                        print(_line(name, secs), flush=True)

            # one day, half before W (batch) and half after (speed), while flights arrive
            day_from, day_to = watermark - 12 * HOUR, watermark + 12 * HOUR - 1
            stop = threading.Event()
            feeding = threading.Thread(target=feeder.steady, args=(rates[0], 3600, 10_000, stop))
            feeding.start()
            lat: dict[str, list[float]] = {name: [] for name in ports}
            rows: dict[str, int] = {}
            with httpx.Client(timeout=5) as client:
                for i in range(2 * args.queries):
                    name = list(ports)[i % 2]
                    t0 = time.perf_counter()
                    res = client.get(f"http://127.0.0.1:{ports[name]}/views/{VIEW}/keys/{origin}",
                                     params={"from": day_from, "to": day_to})
                    lat[name].append(time.perf_counter() - t0)
                    res.raise_for_status()
                    rows[name] = len(res.json()["rows"])
            stop.set()
            feeding.join()
            print(f"one-day query of {origin} ({rows}) rows, {args.queries} each, while {rates[0]:,} flights/s arrive:")
            for name, secs in lat.items():
                print(_line(f"{name} server", secs))
            print(f"  p99 ratio live / snapshot: {_pct(lat['live'], 0.99) / _pct(lat['snapshot'], 0.99):.2f}x")
            feeder.producer.flush(30)
            del feeder  # its librdkafka threads end before the broker does
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(60)


if __name__ == "__main__":
    main()
