"""Helpers shared by the pipelines tests: a tiny batch view in the contract layout.

A plain module, not ``conftest``: test modules import it by name, and another folder's
``conftest`` module could shadow that name."""

from __future__ import annotations

import json
import re
from pathlib import Path


#: 2013-01-01T10:00Z, an hour with departures
HOUR0 = 1357034400000
HOUR_MS = 3_600_000


def departures_rows(mean_delay: float = 12.5) -> list[dict[str, object]]:
    """Two windows of ``departures_hourly`` in the contract layout (``views/<store>``)."""
    rows = []
    for i, origin in enumerate(("EWR", "JFK")):
        start = HOUR0 + i * HOUR_MS
        value = {"count": 3, "cancelled": 1, "dep_delay_sum": 25, "dep_delay_n": 2, "mean_dep_delay": mean_delay}
        rows.append({"key": origin, "window_start": start, "window_end": start + HOUR_MS,
                     "value": json.dumps(value), "timestamp": start + 60_000})
    return rows


def write_batch_view(lake: Path, store: str, rows: list[dict[str, object]]) -> Path:
    """Write ``rows`` as the Delta table ``<lake>/views/<store>`` (delta-rs)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    schema = pa.schema([("key", pa.string()), ("window_start", pa.int64()), ("window_end", pa.int64()),
                        ("value", pa.string()), ("timestamp", pa.int64())])
    path = lake / "views" / store
    path.parent.mkdir(parents=True, exist_ok=True)
    write_deltalake(str(path), pa.Table.from_pylist(rows, schema=schema), mode="overwrite")
    return path




def flight_on(day: str, hour: int = 10, minute: int = 15, record_timestamp: int | None = None) -> object:
    """The first sample flight moved to ``day`` (``YYYY-MM-DD``) at ``hour:minute`` UTC, as a
    :class:`pipelines.declaration.pipeline.SourceRecord`: its event time (the flights' timestamp extractor
    reads ``time_hour`` + ``minute``) is on ``day``; its Kafka record timestamp is the same
    unless ``record_timestamp`` (epoch ms) says otherwise."""
    from datetime import datetime, timezone

    from pipelines.examples.flights import pipeline as flights
    from pipelines.declaration.pipeline import SourceRecord

    _, first = flights.sample_data(1).events[0]
    year, month, dom = (int(x) for x in day.split("-"))
    value = {**first.value, "year": year, "month": month, "day": dom, "hour": hour, "minute": minute,
             "time_hour": f"{day}T{hour:02d}:00:00Z"}
    event_ms = int(datetime(year, month, dom, hour, minute, tzinfo=timezone.utc).timestamp() * 1000)
    stamp = event_ms if record_timestamp is None else record_timestamp
    return SourceRecord(key=first.key, value=value, timestamp=stamp)


def produce(bootstrap: str, topic: str, records: list[object]) -> int:
    """Produce ``records`` (:class:`pipelines.declaration.pipeline.SourceRecord`) to ``topic``; the count."""
    from confluent_kafka import Producer

    from pipelines.produce.load import produce_records

    producer = Producer({"bootstrap.servers": bootstrap})
    n = produce_records(producer, topic, records, len(records))
    producer.close()  # now, not after the broker stops
    return n


#: a log line on a command's stderr: Python's logging as the CLI formats it
#: (``2026-01-01 12:00:00,000 WARNING name: ...``), Spark's log4j (``12:00:00 WARN Class: ...``),
#: a JVM notice (``WARNING: ...``) or SLF4J's own report (``SLF4J: ...``, ``SLF4J(W): ...``: no
#: binding, several bindings; e.g. the AWS SDK bundle's, docs/object-storage.md "Spark")
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d [\d:,]+ (WARNING|INFO) |\d\d:\d\d:\d\d (WARN|INFO) |WARNING: |SLF4J(\(\w\))?: )")


#: the one WARNING of a record sent to the dead-letter topic (``speed_layer.task``'s
#: exception handlers, ``speed_layer.collector``'s production handler)
_DEAD_LETTER = re.compile(r" WARNING speed_layer\.(task|collector): .*(sent to \S+ after .* error|goes to the dead-letter topic)")


def log_lines(stderr: str, dead_lettered: int = 0) -> list[str]:
    """The WARNING and INFO lines of ``stderr`` (see :data:`_LOG_LINE`) but the
    ``dead_lettered`` records' one WARNING each: none on the happy path of ``duet run``
    (issue 44). A count of dead-letter WARNINGs other than ``dead_lettered`` is a line of
    the answer too."""
    lines = [line for line in stderr.splitlines() if _LOG_LINE.match(line)]
    dead = [line for line in lines if _DEAD_LETTER.search(line)]
    out = [line for line in lines if not _DEAD_LETTER.search(line)]
    if len(dead) != dead_lettered:
        out.append(f"{len(dead)} dead-letter WARNING lines for {dead_lettered} dead-lettered records")
    return out


def wait_for_dagster_ui(proc: "subprocess.Popen[bytes]", url: str, log: Path, timeout_s: float = 300) -> None:
    """Wait until the Dagster webserver of ``duet ui`` (``proc``) answers ``url/server_info``;
    fails the test with the end of ``log`` if it exits, kills it after ``timeout_s``."""
    import time

    import httpx
    import pytest

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"duet ui exited with {proc.returncode}:\n{log.read_text()[-5000:]}")
        try:
            if httpx.get(f"{url}/server_info", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the Dagster UI did not answer within {timeout_s:.0f} s")
        time.sleep(2)


def cli_startup_s(command: str) -> float:
    """Wall seconds of ``duet <command> --help`` now: the interpreter's start and the CLI's
    imports at the machine's current load, the baseline of a "fails at once" bound (a fixed
    bound failed beside busy processes: ``duet load`` took 8.2 s to refuse a broker at load 20)."""
    import subprocess
    import sys
    import time

    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "pipelines.cli", command, "--help"], capture_output=True, check=True,
                   timeout=120)
    return time.monotonic() - start
