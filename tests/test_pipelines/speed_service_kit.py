"""A tiny pipeline for the speed service's tests, its records, the service run in a child
process (``serve_speed`` as the CLI calls it, stopped by a signal), and a wait for a service's
``/health``.

A plain module, not ``conftest``: the test module and the child process import it by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from pipelines.declaration.pipeline import Partitioning, Pipeline, Source, View

HERE = Path(__file__).resolve().parent
#: 2026-03-02T00:00Z, the records' first timestamp
START_MS = 1772409600000
PAGES = 5
USERS = 10

#: run in the child process: argv = bootstrap, prefix, name, state dir, slow ms
CHILD = """
import sys
sys.path.insert(0, {here!r})
from pathlib import Path
from speed_service_kit import tiny_pipeline
from pipelines.speed.server import serve_speed

bootstrap, prefix, name, state, slow_ms = sys.argv[1:6]
result = serve_speed(tiny_pipeline(prefix, name, float(slow_ms)), bootstrap, "127.0.0.1", 0, state_dir=Path(state),
                     on_ready=lambda svc: print("READY", svc.url, flush=True))
print(result.line(), flush=True)
"""


def tiny_pipeline(prefix: str, name: str, slow_ms: float = 0.0) -> Pipeline:
    """Clicks ``<prefix>-clicks`` (2 partitions, key: user, value ``{"page": ...}``) counted per
    user (``<prefix>-per_user``, a KTable) and per page in tumbling minutes
    (``<prefix>-per_page``, 1 h grace: more than the clicks' spread, so that only a click
    produced late on purpose is dropped; through a repartition topic). Each click sleeps
    ``slow_ms`` first, so that a burst leaves lag; at most 50 records buffered per partition."""
    from speed_layer import Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder, TimeWindows

    clicks, per_user, per_page = f"{prefix}-clicks", f"{prefix}-per_user", f"{prefix}-per_page"

    def slow(v: Any) -> Any:
        if slow_ms:
            time.sleep(slow_ms / 1000)
        return v

    def build() -> Any:
        b = StreamsBuilder()
        text, js = Serdes.String(), Serdes.JSON()
        s = b.stream(clicks, Consumed(key_serde=text, value_serde=js)).map_values(slow)
        s.group_by_key().count(Materialized.as_(per_user)).to_stream().to(per_user, Produced(key_serde=text, value_serde=js))
        (s.group_by(lambda user, v: v["page"], Grouped.as_("by-page"))
         .windowed_by(TimeWindows.of_size_and_grace(timedelta(minutes=1), timedelta(hours=1)))
         .count(Materialized.as_(per_page))
         .to_stream().to(per_page, Produced(key_serde=Serdes.WindowedJSON(text), value_serde=js)))
        return b.build()

    return Pipeline(
        name=name,
        topology=build,
        config={"buffered.records.per.partition": 50, "commit.interval.ms": 500, "session.timeout.ms": 6000},
        sources=[Source(topic=clicks, partitions=2)],
        views=[View(store=per_user), View(store=per_page)],
        partitions=Partitioning(start=date(2026, 3, 2)),
    )


def produce_clicks(bootstrap: str, prefix: str, first: int, n: int, *, at_ms: int | None = None) -> None:
    """Clicks ``first .. first+n-1``: user ``u<i % 10>``, page ``p<i % 5>``, timestamp
    ``START_MS + i`` s (``at_ms`` for all of them instead); waits for the acks."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    for i in range(first, first + n):
        ts = at_ms if at_ms is not None else START_MS + i * 1000
        p.produce(f"{prefix}-clicks", key=f"u{i % USERS}".encode(), value=json.dumps({"page": f"p{i % PAGES}"}).encode(),
                  timestamp=ts)
    assert p.flush(30) == 0
    p.close()


def start_child(bootstrap: str, prefix: str, name: str, state: Path, slow_ms: float,
                timeout_s: float = 90) -> tuple[subprocess.Popen[str], str]:
    """``serve_speed`` in a child process (stderr in ``<state>/../speed-service.log``);
    returns it and its URL once it serves.

    Raises:
        AssertionError: it exited or did not serve within ``timeout_s``.
    """
    import selectors

    log = (state.parent / "speed-service.log").open("w")  # a file: a full pipe would block the child
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(here=str(HERE)), bootstrap, prefix, name, str(state),
                             str(slow_ms)], stdout=subprocess.PIPE, stderr=log, text=True)
    log.close()
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            if line.startswith("READY "):
                return proc, line.split()[1]
            if not line and proc.poll() is not None:
                break
    proc.kill()
    proc.wait(30)
    err = (state.parent / "speed-service.log").read_text()
    raise AssertionError(f"the speed service did not start (exit {proc.returncode}): {err[-3000:]}")


def wait_healthy(proc: subprocess.Popen[str], url: str, timeout_s: float = 120) -> dict[str, Any]:
    """Poll ``GET <url>/health`` of the speed service run by ``proc`` until it answers 200
    (RUNNING or REBALANCING); its JSON.

    Raises:
        AssertionError: ``proc`` exited, or no 200 within ``timeout_s`` seconds.
    """
    import httpx

    deadline = time.monotonic() + timeout_s
    health = None
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            health = httpx.get(f"{url}/health", timeout=2)
            if health.status_code == 200:
                return dict(health.json())
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url}/health: {health} (the service's exit status: {proc.poll()})")
