"""Ctrl-C in ``duet run``, as a user presses it: the console script in its own process group
on a project made by ``duet init`` (13,000 readings; the session's broker), SIGINT to the
whole group (what a terminal sends) once the command's output says the phase has started.

Each phase must end the same way: exit status 130, one line naming the phase and what is
kept, no traceback and no word of py4j, the lake lock released, and nothing left running
(Spark's JVM included: the process group is empty).

The serving side is interrupted in the ``summary`` phase, after publish, checks and
agreement: the project's pipeline is the scaffold's with a ``highlights`` that takes its
time (the other serving phases last a fraction of a second on this data).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipelines.lake.lock import LOCK_FILE, LakeLock

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.timeout(900)]

SLOW_MODULE = """
import time

from {package} import pipeline as _scaffolded


def _slow_highlights(lake):
    time.sleep(600)  # the test presses Ctrl-C meanwhile


pipeline = _scaffolded.model_copy(update={{"highlights": _slow_highlights}})
"""


@dataclass
class Project:
    root: Path
    name: str
    env: dict[str, str]

    @property
    def lake(self) -> Path:
        return self.root / "lake" / self.name


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str) -> Project:
    root = tmp_path_factory.mktemp("interrupts") / "sigint"
    made = subprocess.run([sys.executable, "-m", "pipelines.cli", "init", str(root)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    (root / "slow_pipeline.py").write_text(SLOW_MODULE.format(package="sigint_pipeline"))
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "GX_ANALYTICS_ENABLED": "False",
           "PYSPARK_PYTHON": sys.executable, "DUET_PIPELINE": "slow_pipeline:pipeline", "PYTHONPATH": str(root)}
    env.pop("DUET_LAKE", None)
    return Project(root=root, name="sigint", env=env)


@dataclass
class Interrupted:
    returncode: int
    lines: list[str] = field(default_factory=list)
    seconds_to_exit: float = 0.0
    group_gone: bool = False

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def run_and_interrupt(project: Project, phase: str, delay_s: float = 0.0, args: tuple[str, ...] = (),
                      timeout_s: float = 600, command: str = "run") -> Interrupted:
    """``duet COMMAND ARGS`` in its own process group; SIGINT to the group ``delay_s`` after the
    line ``duet COMMAND: <phase>...`` (piped output: the command announces each phase on a
    line)."""
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", command, *args], cwd=project.root,
                            env=project.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=ctrl_c_as_in_a_terminal)
    result = Interrupted(returncode=0)
    started = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            result.lines.append(line.rstrip("\n"))
            if line.strip() == f"duet {command}: {phase}...":
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout_s
        while not started.wait(0.5):
            if proc.poll() is not None:  # ended (failed) before the phase: no need to wait
                reader.join(10)
                pytest.fail(f"duet {command} exited {proc.returncode} before the {phase} phase:\n"
                            + "\n".join(result.lines[-40:]))
            if time.monotonic() > deadline:
                pytest.fail(f"the {phase} phase did not start in {timeout_s} s:\n" + "\n".join(result.lines[-40:]))
        time.sleep(delay_s)
        assert proc.poll() is None, f"duet {command} ended before Ctrl-C:\n{result.output[-3000:]}"
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        result.returncode = proc.wait(timeout=120)
        result.seconds_to_exit = time.monotonic() - t0
        reader.join(10)
        result.group_gone = _group_gone(proc.pid, timeout_s=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return result


def ctrl_c_as_in_a_terminal() -> None:
    """In the child: SIGINT's default action, whatever this test process inherited (a shell
    starts a background job, ``make test &``, with SIGINT ignored, and so its children)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group_gone(pgid: int, timeout_s: float) -> bool:
    """No process is left in the group (the command's children: Spark's JVM and its workers)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def assert_interrupted(res: Interrupted, project: Project, phase: str, *kept: str, command: str = "run") -> None:
    assert res.returncode == 130, res.output[-3000:]
    said = [ln for ln in res.lines if "interrupted" in ln]
    assert len(said) == 1, res.output[-3000:]
    assert said[0].startswith(f"duet {command}: interrupted during the {phase} phase: "), said[0]
    for text in kept:
        assert text in said[0], said[0]
    assert "Traceback" not in res.output, res.output[-5000:]
    assert "py4j" not in res.output.lower(), res.output[-5000:]
    assert not (project.lake / LOCK_FILE).exists()
    with LakeLock(project.lake, "test"):  # free, and not stale
        pass
    assert res.group_gone, "processes of duet run are still running"
    print(f"{phase}: exited {res.seconds_to_exit:.1f} s after Ctrl-C")


@pytest.mark.parametrize(
    ("phase", "delay_s", "args", "kept"),
    [
        ("load", 0.0, (), ["the topics on ", "the previous run's tables were deleted"]),
        ("speed", 0.0, (), ["the topics on ", "the previous run's tables were deleted"]),
        # inside Spark's jobs (a call into the JVM), not only waiting for the session; the
        # later phases on the first 2,000 readings (Spark's own costs stay). A live replay:
        # on a backlog the batch layer runs during the speed phase, on a background thread
        ("batch", 5.0, ("--limit", "2000", "--replay"),
         ["the topics on ", "the raw tables are kept, the batch views are incomplete"]),
        ("summary", 0.0, ("--limit", "2000"), ["the topics on ", "every table is kept"]),
    ],
)
def test_ctrl_c_in_each_phase_of_duet_run(project: Project, phase: str, delay_s: float, args: tuple[str, ...],
                                          kept: list[str]) -> None:
    res = run_and_interrupt(project, phase, delay_s, args)
    assert_interrupted(res, project, phase, *kept, str(project.lake), "run `duet run` again to rebuild")
    if phase in ("batch", "summary"):
        assert (project.lake / "raw").is_dir()
    if phase == "summary":
        assert (project.lake / "serving" / "_views.json").is_file()


def test_ctrl_c_in_duet_batch_inside_spark(project: Project) -> None:
    """``duet batch`` makes its SparkContext in the main thread, where pyspark puts its own
    SIGINT handler (it calls into the JVM from inside the interrupted call: py4j's traceback).
    Its topics first: ``duet load``."""
    loaded = subprocess.run([sys.executable, "-m", "pipelines.cli", "load", "--limit", "2000"], cwd=project.root,
                            env=project.env, capture_output=True, text=True, timeout=300, check=False)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    res = run_and_interrupt(project, "batch", 5.0, command="batch")
    assert_interrupted(res, project, "batch", f"in {project.lake}: the raw tables are kept", "run `duet batch` again",
                       command="batch")
