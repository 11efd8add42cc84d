"""The lake lock (:mod:`pipelines.lake.lock`): one writer per pipeline folder of the lake.

In-process and with real holder processes (``flock`` is per open file, so a second
``LakeLock`` of the same process is a second writer too), then through the ``duet`` console
script as a user runs it: every writing command fails at once naming the holder, a stale lock
is taken over with a warning, and the lock goes away after a normal exit and after an error.
No broker: the lock is taken before the command reaches Kafka. Last, Dagster runs (in process,
``dg.materialize``): a run's writing steps hold the lock until the run ends, so ``duet run``
and ``duet batch`` fail naming the run, and a run fails naming the ``duet`` command holding it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.lake.lock import LOCK_FILE, LakeBusy, LakeLock, LockHolder, command_line, lock_holder
from pipelines_testkit import cli_startup_s

HOLD = """
import sys, time
from pathlib import Path
from pipelines.lake.lock import LakeLock
with LakeLock(Path(sys.argv[1]), "duet run --limit 20000"):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock of ``tmp_path / "lake" / "flights"`` (killed at the end)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "lake" / "flights")], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    """The pid of a process that has ended."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# --------------------------------------------------------------------------- the lock itself
def test_the_lock_names_its_holder_and_goes_away_on_release(tmp_path: Path) -> None:
    folder = tmp_path / "lake" / "flights"
    lock = LakeLock(folder, "duet run --limit 20000")
    me = lock.acquire()
    doc = json.loads((folder / LOCK_FILE).read_text())
    assert doc == {"pid": os.getpid(), "host": me.host, "command": "duet run --limit 20000", "since": me.since}
    assert lock_holder(folder) == me
    lock.release()
    assert not (folder / LOCK_FILE).exists()
    assert not folder.exists()  # the lock made the folder and left nothing in it
    assert lock_holder(folder) is None


def test_a_second_writer_fails_at_once_naming_the_first(tmp_path: Path) -> None:
    folder = tmp_path / "flights"
    with LakeLock(folder, "duet run --limit 20000"):
        start = time.monotonic()
        with pytest.raises(LakeBusy) as err:
            LakeLock(folder, "duet batch").acquire()
        assert time.monotonic() - start < 1
    message = str(err.value)
    assert message.startswith(f"{folder} is in use by `duet run --limit 20000` (pid {os.getpid()} on ")
    assert "since " in message and "wait until it ends, or stop it" in message
    assert "\n" not in message


def test_a_look_at_the_holder_is_no_second_writer(tmp_path: Path) -> None:
    """``lock_holder`` (``duet ui``, the Dagster sensor and schedule every tick) takes a shared
    lock for a moment; a writer that meets it takes the lock once it is gone."""
    import fcntl
    import threading

    folder = tmp_path / "flights"
    folder.mkdir()
    probe = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # what lock_holder holds while it looks
    threading.Timer(0.2, os.close, [probe]).start()
    with LakeLock(folder, "duet run") as lock:
        assert lock.held and lock_holder(folder).command == "duet run"  # type: ignore[union-attr]


def test_a_holder_in_another_process(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    folder = tmp_path / "lake" / "flights"
    with pytest.raises(LakeBusy, match=f"`duet run --limit 20000` \\(pid {holder.pid} on "):
        LakeLock(folder, "duet run").acquire()
    assert lock_holder(folder) is not None and lock_holder(folder).pid == holder.pid  # type: ignore[union-attr]


def test_a_killed_holder_leaves_a_stale_lock_that_is_taken_over(tmp_path: Path,
                                                               holder: subprocess.Popen[str]) -> None:
    """``kill -9`` leaves the file; the kernel dropped the ``flock``: the next writer takes it
    over with one warning naming the dead holder."""
    folder = tmp_path / "lake" / "flights"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (folder / LOCK_FILE).exists() and lock_holder(folder) is None
    warnings: list[str] = []
    with LakeLock(folder, "duet batch", warn=warnings.append) as lock:
        assert lock.held
        assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"taking over the stale lake lock of `duet run --limit 20000` (pid {holder.pid} ")
    assert warnings[0].endswith("that process is gone")
    assert folder.is_dir()  # the holder made it, not us: kept


def test_a_stale_lock_file_naming_a_dead_pid(tmp_path: Path) -> None:
    folder = tmp_path / "flights"
    folder.mkdir()
    stale = LockHolder(pid=dead_pid(), host="elsewhere", command="duet load", since=time.time() - 7200)
    (folder / LOCK_FILE).write_text(stale.to_json())
    warnings: list[str] = []
    with LakeLock(folder, "duet run", warn=warnings.append):
        pass
    assert warnings == [f"taking over the stale lake lock of {stale.describe()} in {folder}: that process is gone"]
    assert "2.0 h ago" in warnings[0]


def test_the_lock_is_released_after_an_exception(tmp_path: Path) -> None:
    folder = tmp_path / "flights"
    with pytest.raises(RuntimeError, match="boom"), LakeLock(folder, "duet batch"):
        raise RuntimeError("boom")
    assert not (folder / LOCK_FILE).exists()
    with LakeLock(folder, "duet batch"):  # free again, no stale warning
        pass


def test_the_command_line_reads_as_typed() -> None:
    assert command_line(["/x/.venv/bin/duet", "run", "--limit", "20000"]) == "duet run --limit 20000"
    assert command_line(["/x/pipelines/cli/commands.py", "ui", "--lake", "my lake"]) == "duet ui --lake 'my lake'"


# --------------------------------------------------------------------------- the commands
def duet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": ""}
    env.pop("DUET_PIPELINE", None)
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("command", [["run"], ["load"], ["batch"], ["ui", "--load", "--yes"]])
def test_every_writer_fails_at_once_while_another_holds_the_lake(command: list[str], tmp_path: Path) -> None:
    """The lock comes first: the unreachable broker is never reached, no broker starts."""
    root = tmp_path / "lake"
    startup = cli_startup_s(command[0])
    with LakeLock(root / "flights", "duet run --limit 20000"):
        start = time.monotonic()
        res = duet(*command, "--pipeline", "pipelines.examples.flights:pipeline", "--lake", str(root),
                   "--bootstrap", "127.0.0.1:1")
        seconds = time.monotonic() - start
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"duet {command[0]}: {root / 'flights'} is in use by `duet run --limit 20000` (pid "
                               f"{os.getpid()} on "), lines[0]
    assert "Traceback" not in res.stderr + res.stdout
    assert seconds < 2 * startup + 8, f"duet {command[0]} took {seconds:.1f} s to fail (its --help {startup:.1f} s)"


def test_a_command_takes_a_stale_lock_over_and_releases_it_after_an_error(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    (root / "flights").mkdir(parents=True)
    stale = LockHolder(pid=dead_pid(), host=os.uname().nodename, command="duet run", since=time.time() - 60)
    (root / "flights" / LOCK_FILE).write_text(stale.to_json())
    res = duet("load", "--lake", str(root), "--bootstrap", "127.0.0.1:1", "--limit", "5")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 2, res.stderr
    assert lines[0].startswith(f"duet load: taking over the stale lake lock of `duet run` (pid {stale.pid} "), lines
    assert lines[1].startswith("duet load: cannot reach Kafka at 127.0.0.1:1"), lines
    assert not (root / "flights" / LOCK_FILE).exists()  # released after the failure


@pytest.mark.broker
def test_a_command_releases_the_lock_after_a_normal_exit(tmp_path: Path, kafka_bootstrap: str) -> None:
    root = tmp_path / "lake"
    res = duet("load", "--lake", str(root), "--bootstrap", kafka_bootstrap, "--limit", "5")
    assert res.returncode == 0, res.stderr
    assert "flights: 5" in res.stdout
    assert not (root / "flights").exists()  # load writes no table: the folder the lock made is gone too


# --------------------------------------------------------------------------- Dagster runs
def _failure_descriptions(result: object) -> dict[str, str]:
    """``{step key: the failure's description}`` of each failed step of a Dagster run."""
    return {e.step_key: e.step_failure_data.user_failure_data.description  # type: ignore[attr-defined]
            for e in result.get_step_failure_events()}  # type: ignore[attr-defined]


def test_a_dagster_run_fails_naming_the_duet_command_that_holds_the_lake(tmp_path: Path) -> None:
    """Each writing asset and check takes the lock first: the unreachable broker is never
    reached, and the step's failure (what the run page shows) names the holder."""
    import dagster as dg
    from pipelines_testkit import departures_rows, write_batch_view

    from pipelines.dagster import KafkaResource, LakeResource, view_asset_key
    from pipelines.dagster.assets import raw_asset
    from pipelines.dagster.checks import gx_check
    from pipelines.examples.flights import pipeline as flights

    root = tmp_path / "lake"
    write_batch_view(root / "flights", "departures_hourly", departures_rows())
    raw, check = raw_asset(flights, "airlines"), gx_check(flights, "departures_hourly")
    with LakeLock(root / "flights", "duet run --limit 20000"):
        result = dg.materialize(
            [dg.AssetSpec(dg.AssetKey(["flights", "topic_airlines"])), raw,
             dg.AssetSpec(view_asset_key(flights, "departures_hourly")), check],
            selection=dg.AssetSelection.assets(raw) | dg.AssetSelection.checks(check),
            resources={"kafka": KafkaResource(bootstrap_servers="127.0.0.1:1"), "lake": LakeResource(path=str(root))},
            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
        assert lock_holder(root / "flights").command == "duet run --limit 20000"  # type: ignore[union-attr]
    assert not result.success
    failures = _failure_descriptions(result)
    assert sorted(failures) == ["flights__raw_airlines", "flights__view_departures_hourly_gx_suite"], failures
    for step, why in failures.items():
        assert why.startswith(f"{root / 'flights'} is in use by `duet run --limit 20000` (pid {os.getpid()} on "), \
            (step, why)
        assert why.endswith("wait until it ends, or stop it (one command at a time writes a pipeline's lake)")
    assert not (root / "flights" / "quality").exists()  # the check stored no result


@pytest.mark.broker
def test_duet_fails_naming_the_dagster_run_that_holds_the_lake(tmp_path: Path, kafka_bootstrap: str) -> None:
    """The run's ingest step takes the lock; a downstream asset keeps the run going while
    ``duet run`` and ``duet batch`` try; the lock goes away when the run ends."""
    import threading

    import dagster as dg

    from pipelines.dagster import KafkaResource, LakeResource
    from pipelines.dagster.assets import raw_asset
    from pipelines.examples.flights import pipeline as flights
    from pipelines.produce.load import produce_tables

    produce_tables(flights, kafka_bootstrap, flights.sample_data(0))  # the airlines topic, to ingest
    root, folder = tmp_path / "lake", tmp_path / "lake" / "flights"
    raw, go_on = raw_asset(flights, "airlines"), threading.Event()

    @dg.asset(key=["flights", "after_ingest"], deps=[raw.key])
    def after_ingest() -> None:
        assert go_on.wait(120), "the test never let the run go on"

    results: list[dg.ExecuteInProcessResult] = []
    run = threading.Thread(target=lambda: results.append(dg.materialize(
        [dg.AssetSpec(dg.AssetKey(["flights", "topic_airlines"])), raw, after_ingest],
        resources={"kafka": KafkaResource(bootstrap_servers=kafka_bootstrap), "lake": LakeResource(path=str(root))},
        instance=dg.DagsterInstance.ephemeral())))
    run.start()
    try:
        deadline = time.monotonic() + 120
        while (holder := lock_holder(folder)) is None and run.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert holder is not None, "the Dagster run never took the lake lock"
        assert holder.pid == os.getpid() and holder.command.startswith("dagster run "), holder
        for command in ("run", "batch"):
            startup = cli_startup_s(command)
            start = time.monotonic()
            res = duet(command, "--pipeline", "pipelines.examples.flights:pipeline", "--lake", str(root),
                       "--bootstrap", "127.0.0.1:1")
            seconds = time.monotonic() - start
            assert res.returncode == 2, (res.stdout, res.stderr)
            assert res.stderr.startswith(f"duet {command}: {folder} is in use by `{holder.command}` (pid "
                                         f"{os.getpid()} on "), res.stderr
            assert seconds < 2 * startup + 8, f"duet {command} took {seconds:.1f} s to fail (its --help {startup:.1f} s)"
    finally:
        go_on.set()
        run.join(120)
    (result,) = results
    assert result.success
    assert holder.command == f"dagster run {result.run_id}"  # an asset job: no job name
    assert (folder / "raw" / "airlines" / "_delta_log").is_dir()  # the run wrote its lake
    assert lock_holder(folder) is None and not (folder / LOCK_FILE).exists()  # released at the run's end
