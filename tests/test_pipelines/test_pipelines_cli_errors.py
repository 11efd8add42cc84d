"""Every mistake a new user makes gets one clear line on stderr and exit status 2, never a
traceback: the ``duet`` console script run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from pipelines_testkit import HOUR0, HOUR_MS, cli_startup_s

WIDE_CARRIERS = [f"carrier-{i:02d}" for i in range(20)]  # about 300 characters of JSON


@pytest.fixture(scope="module")
def served_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lake root whose flights folder has one published view, ``departures_hourly`` (keys EWR,
    JFK and LGA, whose value is wider than a terminal)."""
    from serving.views import ViewSpec, publish

    root = tmp_path_factory.mktemp("cli") / "lake"
    lake = root / "flights"
    spec = ViewSpec.tumbling("departures_hourly", HOUR_MS, grace_ms=2 * HOUR_MS)
    batch = pd.DataFrame({"key": ["EWR", "JFK", "LGA"], "window_start": [HOUR0] * 3,
                          "window_end": [HOUR0 + HOUR_MS] * 3,
                          "value": ['{"count": 3}', '{"count": 4}', json.dumps({"carriers": WIDE_CARRIERS})],
                          "timestamp": [HOUR0 + 1] * 3})
    publish(lake, [spec], {spec.name: batch}, {}, HOUR0 + 4 * HOUR_MS)
    return root


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def duet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env_free = {"KAFKA_BOOTSTRAP_SERVERS": ""}

    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env_free}, check=False)


def assert_one_line(res: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_a_lake_that_does_not_exist_yet(tmp_path: Path) -> None:
    for command in ("query", "serve"):
        res = duet(command, *(["departures_hourly"] if command == "query" else []), "--lake", str(tmp_path / "no"))
        assert_one_line(res, f"duet {command}: no lake at {tmp_path / 'no' / 'flights'}", "run `duet run`")


def test_a_lake_without_published_views(tmp_path: Path) -> None:
    (tmp_path / "flights").mkdir()
    assert_one_line(duet("query", "departures_hourly", "--lake", str(tmp_path)), "has no published views yet")


@pytest.mark.parametrize(
    ("ref", "text"),
    [
        ("no_such_module:pipeline", "no module 'no_such_module'"),
        ("pipelines.examples.flights:nope", "has no attribute 'nope'; its pipelines: pipeline"),
        ("pipelines.examples.flights.topology:build_topology", "not a pipelines.Pipeline"),
        ("not a ref", "expected module:attribute"),
    ],
)
def test_a_bad_pipeline_reference(ref: str, text: str, tmp_path: Path) -> None:
    for command in ("run", "query"):
        assert_one_line(duet(command, "--pipeline", ref, "--lake", str(tmp_path)), f"duet {command}: ", text)


def test_a_wrong_declaration_is_one_line_naming_the_field(tmp_path: Path) -> None:
    """A declaration whose view names a store the topology lacks fails at load time."""
    (tmp_path / "badpipe.py").write_text(
        "from datetime import date\n"
        "from pipelines import Partitioning, Pipeline, Source, View\n"
        "from pipelines.examples.flights.topology import build_topology\n"
        "pipeline = Pipeline(name='bad', topology=build_topology,\n"
        "    sources=[Source(topic=t) for t in ('flights', 'planes', 'airports', 'airlines')],\n"
        "    views=[View(store='departures_daily')], partitions=Partitioning(start=date(2013, 1, 1)))\n"
    )

    res = subprocess.run([sys.executable, "-m", "pipelines.cli", "query", "--pipeline", "badpipe:pipeline",
                          "--lake", str(tmp_path)], capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert_one_line(res, "pipeline 'bad': views[0].store: 'departures_daily' is not a store written by an "
                    "aggregation; stores: departures_hourly, plane_duty_sessions")


def test_an_unknown_view(served_lake: Path) -> None:
    assert_one_line(duet("query", "departure_hourly", "EWR", "--lake", str(served_lake)),
                    "unknown view 'departure_hourly'; known views: departures_hourly")


def test_an_unknown_key(served_lake: Path) -> None:
    assert_one_line(duet("query", "departures_hourly", "XYZ", "--lake", str(served_lake)),
                    "unknown key 'XYZ' in view 'departures_hourly'")


def test_a_bad_time_bound(served_lake: Path) -> None:
    assert_one_line(duet("query", "departures_hourly", "EWR", "--from", "yesterday", "--lake", str(served_lake)),
                    "invalid '--from' value 'yesterday'", "ISO-8601")


def test_a_good_query_prints_the_rows(served_lake: Path) -> None:
    res = duet("query", "departures_hourly", "JFK", "--json", "--lake", str(served_lake))
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["key"], r["value"], r["source"]) for r in rows] == [("JFK", {"count": 4}, "batch")]


def test_the_query_table_cuts_nothing_at_80_columns(served_lake: Path) -> None:
    """A piped stdout is 80 columns wide: the ISO times are whole, the wide value folds."""
    from serving.api.times import ms_to_iso

    res = duet("query", "departures_hourly", "LGA", "--lake", str(served_lake))
    assert res.returncode == 0, res.stderr
    assert max(len(line) for line in res.stdout.splitlines()) <= 80, res.stdout
    assert ms_to_iso(HOUR0) in res.stdout and ms_to_iso(HOUR0 + HOUR_MS) in res.stdout, res.stdout
    assert "…" not in res.stdout, res.stdout
    cells = "".join(line.split("│")[3].strip() for line in res.stdout.splitlines() if line.count("│") == 5)
    assert json.dumps({"carriers": WIDE_CARRIERS}, separators=(",", ":")) in cells.replace(" ", ""), res.stdout


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["run", "--limit", "abc"], "Invalid value for '--limit'"),
        (["run", "--limit", "0"], "Invalid value for '--limit'"),
        (["serve", "--port", "70000"], "Invalid value for '--port'"),
        (["speed", "--timeout", "soon"], "Invalid value for '--timeout'"),
        (["batch", "--master", "spark:/x"], "spark.master"),
        (["lod"], "No such command 'lod'"),
    ],
)
def test_a_bad_flag_value(args: list[str], text: str) -> None:
    res = duet(*args)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert text in res.stderr, res.stderr


def test_an_unreachable_broker(tmp_path: Path) -> None:
    """A refused connection fails at once (it took the metadata timeout, ~9 s, more than the
    command's start before): within 1.5x the command's ``--help`` time at this load plus 4 s."""
    for command in ("load", "speed", "run"):
        startup = cli_startup_s(command)
        start = time.monotonic()
        lake = [] if command == "load" else ["--lake", str(tmp_path)]
        res = duet(command, "--bootstrap", "127.0.0.1:1", "--limit", "5", *lake)
        assert_one_line(res, f"duet {command}: cannot reach Kafka at 127.0.0.1:1", "unset both")
        took = time.monotonic() - start
        assert took < 1.5 * startup + 4, f"duet {command} took {took:.1f} s (its --help {startup:.1f} s)"


def test_a_port_in_use(served_lake: Path, busy_port: int) -> None:
    assert_one_line(duet("serve", "--lake", str(served_lake), "--port", str(busy_port)),
                    f"port {busy_port} on 127.0.0.1 is already in use", "--port")
    assert_one_line(duet("ui", "--port", str(busy_port)), f"duet ui: port {busy_port} on 127.0.0.1 is already in use")


def test_a_live_stores_folder_that_cannot_be_written(served_lake: Path, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert_one_line(duet("serve", "--lake", str(served_lake), "--port", str(port), "--bootstrap", "127.0.0.1:1",
                         "--live-dir", str(tmp_path / "a-file" / "live")),
                    "duet serve: ", f"the live stores' folder {tmp_path / 'a-file' / 'live'}", "--live-dir")
