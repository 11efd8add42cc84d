"""The speed layer as N processes of one application (``--instances N``,
:mod:`pipelines.speed.instances`): the supervisor's pieces in process, then ``duet speed
--instances 2 --follow`` as a user runs it on a ``duet init`` project against the session's
broker: Ctrl-C in ``duet run``'s speed phase stops every instance (one line, exit 130), and
an instance of ``duet speed --follow`` killed with SIGKILL fails the command naming it and its
exit code, the other stopped. The main job on two instances agreeing
with the batch layer is ``test_scaled_run``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.examples.flights import pipeline as flights
from pipelines.declaration.pipeline import PipelineError
from pipelines.speed.instances import merge_results, pipeline_reference


# --------------------------------------------------------------------------- in process
def test_a_pipeline_is_found_by_reference() -> None:
    assert pipeline_reference(flights) == "pipelines.examples.flights:pipeline"
    made_here = flights.model_copy(update={"description": "not held by any module"})
    with pytest.raises(PipelineError, match="pipeline 'flights': --instances starts processes that import it"):
        pipeline_reference(made_here)


def test_results_are_summed_and_united() -> None:
    a = {"processed": 10, "cpu_s": 1.5, "late": [["v", "k1", 5]], "late_windows": {"v": [["k1", 0]]},
         "metrics": {"process-total": 10, "dropped-records-late-total": 1, "tasks": {"0_0": {"process": 10}},
                     "threads": {"T-1": {"process-total": 10}}}}
    b = {"processed": 7, "cpu_s": 2.0, "late": [["v", "k2", 6], ["v", "k1", 5]], "late_windows": {"v": [["k2", 0]]},
         "metrics": {"process-total": 7, "dropped-records-late-total": 2, "tasks": {"0_0": {"process": 3},
                                                                                   "0_1": {"process": 4}},
                     "threads": {"T-1": {"process-total": 7}}}}
    metrics, late, windows = merge_results([a, b])
    assert metrics["process-total"] == 17 and metrics["dropped-records-late-total"] == 3
    assert metrics["tasks"] == {"0_0": {"process": 13}, "0_1": {"process": 4}}
    assert set(metrics["threads"]) == {"instance-1/T-1", "instance-2/T-1"}
    assert metrics["instances"] == [{"processed": 10, "cpu_s": 1.5}, {"processed": 7, "cpu_s": 2.0}]
    assert [(r.key, r.timestamp) for r in late] == [("k1", 5), ("k2", 6)]
    assert windows == {"v": {("k1", 0), ("k2", 0)}}


def test_stop_returns_once_each_instance_has_exited_and_reported(tmp_path: Path) -> None:
    """The supervisor reads an exited instance's last reports and goes on: it used to wait
    for an end of pipe its own reader had already taken, 5 s per instance."""
    import json

    from pipelines.speed.placement import place_subtopologies
    from pipelines.speed.instances import InstanceGroup, _Instance, _read_lines

    group = InstanceGroup(flights, "127.0.0.1:1", "app", tmp_path, place_subtopologies(flights.build_topology(), 2))
    final = {"event": "final", "processed": 3, "metrics": {}, "late": [], "late_windows": {}, "cpu_s": 0.1}
    for i in range(2):
        proc = subprocess.Popen([sys.executable, "-c", f"import sys; sys.stdin.read(); print({json.dumps(json.dumps(final))})"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        inst = _Instance(i, proc, tmp_path, tmp_path / "instance.log")
        threading.Thread(target=_read_lines, args=(proc.stdout, inst.lines), daemon=True).start()
        group.instances.append(inst)
    t0 = time.monotonic()
    group.stop(grace_s=60)
    assert time.monotonic() - t0 < 4.0  # each drain used to wait its 5 s out
    assert [i.final for i in group.instances] == [final, final] and all(i.ended for i in group.instances)
    assert [r["processed"] for r in group.results()] == [3, 3]


@pytest.mark.parametrize(("args", "message"), [
    (["run", "--replay", "--instances", "2"], "--replay paces one instance of the speed layer; --instances 2"),
    (["speed", "--follow", "--server", "127.0.0.1:0", "--instances", "2"],
     "--server serves the stores of one process, not 2"),
    (["run", "--instances", "0"], "Invalid value for '--instances'"),
])
def test_instances_mistakes_are_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, [*args, "--bootstrap", "127.0.0.1:1", "--lake", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Kafka" not in res.output, res.output


# --------------------------------------------------------------------------- duet speed --instances 2
@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str) -> tuple[Path, dict[str, str]]:
    """A ``duet init`` project and the commands' environment: the session's broker, and a
    ``$DUET_STATE_DIR`` of the test's own, so that the state folders an interrupted run or a
    failed instance keeps (their ``instance.log`` is named in the error) are found there."""
    from batch_layer.spark import default_delta_jars_dir

    root = tmp_path_factory.mktemp("instances") / "twocores"
    made = subprocess.run([sys.executable, "-m", "pipelines.cli", "init", str(root)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "PYTHONUNBUFFERED": "1", "COLUMNS": "200",
           "DUET_STATE_DIR": str(root.parent / "state"), "DUET_DELTA_JARS": str(default_delta_jars_dir())}
    env.pop("DUET_PIPELINE", None)
    return root, env


def _children(pid: int) -> list[int]:
    """The speed-layer instances ``pid`` started (``python -m pipelines.speed.instance``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"-m pipelines.speed.instance " in cmd:
            out.append(int(entry.name))
    return sorted(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone too
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False


FOLLOW = ("speed", "--instances", "2", "--follow", "--fresh")


def _start_two(root: Path, env: dict[str, str], args: tuple[str, ...] = FOLLOW,
               running: bool = True) -> tuple[subprocess.Popen[str], list[str], list[int]]:
    """``duet ARGS`` in its own process group, once both instances exist (and with ``running``
    run: their logs say so)."""
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args],
                            cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        children = _children(proc.pid)
        logs = [_log_of(c) for c in children]
        if len(children) == 2 and all(log and (not running or "running" in log.read_text()) for log in logs):
            return proc, lines, children
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("two running instances expected:\n" + "\n".join(lines[-30:]))


def _log_of(pid: int) -> Path | None:
    """The log file an instance writes its stderr to."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/2")
    except OSError:
        return None
    return Path(target) if target.endswith("instance.log") else None


def _signal_and_wait(proc: subprocess.Popen[str], lines: list[str], send: Callable[[], None], exit_code: int) -> None:
    """``send()`` (a signal to the command or one of its instances), then assert that the
    command exits with ``exit_code`` within 60 s; its process group is killed if it outlives
    that; then half a second for its last lines to reach ``lines``."""
    try:
        send()
        assert proc.wait(timeout=60) == exit_code, "\n".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(0.5)


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.timeout(300)
def test_ctrl_c_in_the_speed_phase_of_a_run_stops_every_instance(project: tuple[Path, dict[str, str]],
                                                                 tmp_path: Path) -> None:
    """Ctrl-C as soon as both instances exist (still starting): one line naming the speed
    phase, exit 130, no instance left."""
    proc, lines, children = _start_two(*project, args=("run", "--instances", "2", "--lake", str(tmp_path)),
                                       running=False)
    _signal_and_wait(proc, lines, lambda: os.killpg(proc.pid, signal.SIGINT), exit_code=130)
    said = [ln for ln in lines if "interrupted" in ln]
    assert len(said) == 1 and said[0].startswith("duet run: interrupted during the speed phase"), "\n".join(lines)
    assert not any("Traceback" in ln for ln in lines), "\n".join(lines)
    assert not [c for c in children if _alive(c)], "an instance outlived the command"


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_a_killed_instance_fails_the_command(project: tuple[Path, dict[str, str]]) -> None:
    proc, lines, children = _start_two(*project)
    victim, other = children[1], children[0]
    _signal_and_wait(proc, lines, lambda: os.kill(victim, signal.SIGKILL), exit_code=2)
    failed = [ln for ln in lines if "duet speed failed" in ln]
    assert len(failed) == 1, "\n".join(lines)
    assert f"(pid {victim}) died with exit code -9 (SIGKILL)" in failed[0] and "of 2" in failed[0], failed[0]
    assert f"its log {project[1]['DUET_STATE_DIR']}/duet-twocores-run-" in failed[0], failed[0]
    assert not _alive(other), "the other instance outlived the command"
