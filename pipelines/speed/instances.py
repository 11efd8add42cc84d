"""The speed layer as N processes of one application (``duet run --instances N``, ``duet
speed --instances N``): both cores of a machine, where one Python process is bound to one by
its GIL.

Each instance is a child process running the pipeline's topology on its own ``KafkaStreams``
(its own state folder) under the run's ``application.id``. Each runs whole sub-topologies,
placed by their cost (:mod:`pipelines.speed.placement`, the streams config
``instance.subtopologies``): the consumer group gives it their tasks, and the instances run
the pipeline's stages side by side (docs/instances.md). This process only supervises:

* **Caught up** when every instance says so: each waits as
  ``KafkaStreams.wait_until_caught_up`` does, for its own partitions through its stream
  threads and for the others' through the group's committed offsets against the end offsets
  of the source topics, then of the repartition topics, transitively. So the answer covers
  the whole group, whichever instance owns which task.
* **One display**: the instances report their ``process-total`` twice a second on a pipe;
  the progress shows their sum. Their logs go to a file each (``instance.log`` in the
  instance's state folder, named in an error).
* **Ctrl-C** reaches this process only (each instance runs in a process group of its own):
  the instances are told to stop, given a few seconds, then killed; an instance whose
  supervisor is gone stops by itself (its stdin is closed).
* **A dead instance** (an exit before it was told to stop, or a failed client) fails the
  run: :class:`pipelines.speed.service.SpeedLayerFailed` names it, its exit code and the end
  of its log; the others are stopped.
* **Results**: at the end each instance sends its metrics, the records it dropped as late
  and the windows they missed; the run's :class:`~pipelines.speed.service.SpeedStats` holds
  their sums and unions (what the agreement of speed and batch excludes).

The views the main job compares and serves are read from the view output topics, which
every instance writes: nothing changes for them. Interactive queries (``duet speed --follow
--server``) read the local stores of one instance and forward a key to its owner.

An instance (:mod:`pipelines.speed.instance`, its own process) imports the pipeline by
reference (:func:`pipeline_reference`): a pipeline must be a module attribute (any
declaration ``duet`` resolves is).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pipelines.declaration.pipeline import Pipeline, PipelineError
from pipelines.speed.placement import Placement, load_costs, place_subtopologies
from pipelines.progress import NullReporter, Reporter
from pipelines.speed.instance import REPORT_EVERY_S
from pipelines.speed.service import LateRecord, SpeedLayerFailed, SpeedStats

log = logging.getLogger(__name__)

__all__ = ["pipeline_reference", "run_speed_instances", "InstanceDied"]

#: seconds an instance is given to close after being told to stop (then it is killed)
STOP_GRACE_S = 60.0
#: ... when its state is deleted after the run (a fresh application id: ``duet run``)
FRESH_STOP_GRACE_S = 5.0
#: ... after a Ctrl-C (the run is abandoned: no need to wait for a clean close)
INTERRUPT_GRACE_S = 5.0
_LOG_TAIL_LINES = 12


class InstanceDied(SpeedLayerFailed):
    """An instance exited before it was told to stop, or its client failed."""


def pipeline_reference(pipeline: Pipeline) -> str:
    """``module:attribute`` of an imported module holding ``pipeline`` itself (the shortest
    module name first, an attribute named ``pipeline`` first), which an instance imports.

    Raises:
        PipelineError: no imported module holds it (it was built inside a function).
    """
    found = []
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        try:
            attrs = list(vars(module).items())
        except TypeError:
            continue
        found.extend((attr != "pipeline", len(name), name, attr) for attr, value in attrs if value is pipeline)
    if not found:
        raise PipelineError(f"pipeline {pipeline.name!r}: --instances starts processes that import it, but no "
                            "module holds it: declare it at module level (module:attribute)")
    _, _, module_name, attr = min(found)
    return f"{module_name}:{attr}"


@dataclass
class _Instance:
    """One child process and what it reported."""

    index: int
    proc: subprocess.Popen[bytes]
    state_dir: Path
    log: Path
    processed: int = 0
    ready: bool = False
    running: bool = False
    caught_up: bool = False
    stop_sent: bool = False
    killed: bool = False
    #: its report pipe ended (the reader's end marker was read)
    ended: bool = False
    final: dict[str, Any] | None = None
    error: str | None = None
    lines: queue.Queue[dict[str, Any] | None] = field(default_factory=queue.Queue)

    @property
    def name(self) -> str:
        return f"instance {self.index + 1}"

    def log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(ln.strip() for ln in lines[-_LOG_TAIL_LINES:] if ln.strip())


def _read_lines(out: IO[bytes], into: queue.Queue[dict[str, Any] | None]) -> None:
    for raw in iter(out.readline, b""):
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        if isinstance(msg, dict):
            into.put(msg)
    into.put(None)  # end of the pipe


def _child_env() -> dict[str, str]:
    """The environment of an instance: this one, with the folders the pipeline was imported
    from (the package, a ``duet init`` project) first on ``PYTHONPATH``."""
    from pipelines.declaration.resolve import project_roots

    roots = [str(Path(__file__).resolve().parents[1]), *(str(p) for p in project_roots())]
    previous = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*roots, *([previous] if previous else [])])}


class InstanceGroup:
    """N instances of one application: spawned by :meth:`start`, supervised by :meth:`poll`,
    stopped by :meth:`stop` (see the module docstring)."""

    def __init__(self, pipeline: Pipeline, bootstrap: str, application_id: str, root: Path, placement: Placement,
                 extra: Mapping[str, Any] | None = None, verbose: bool = False) -> None:
        self.pipeline = pipeline
        self.reference = pipeline_reference(pipeline)
        self.bootstrap = bootstrap
        self.application_id = application_id
        self.root = root
        #: the sub-topologies of each instance, one instance per entry
        self.placement = placement
        self.count = len(placement.instances)
        self.extra = dict(extra or {})
        self.verbose = verbose
        self.instances: list[_Instance] = []

    def start(self, timeout_s: float = 300.0) -> None:
        """Spawn the instances (each in a process group of its own: Ctrl-C is this process'),
        wait until each is ready (imported, its topology built), then start them.

        They start by stage depth (:attr:`Placement.depths`): an instance once those running
        the stages upstream of it run, so that it begins on a backlog of their output
        (:mod:`pipelines.speed.placement` says why).

        Raises:
            TimeoutError: an instance was not ready, or an upstream one not running, within
                ``timeout_s``.
            InstanceDied: an instance exited meanwhile.
        """
        env = _child_env()
        for i in range(self.count):
            state_dir = self.root / f"{self.application_id}-i{i + 1}"
            state_dir.mkdir(parents=True, exist_ok=True)
            log = state_dir / "instance.log"
            extra = {**self.extra, "instance.subtopologies": list(self.placement.instances[i])}
            cmd = [sys.executable, "-m", "pipelines.speed.instance", "--pipeline", self.reference,
                   "--name", self.pipeline.name, "--bootstrap", self.bootstrap, "--application-id",
                   self.application_id, "--state-dir", str(state_dir), "--extra", json.dumps(extra)]
            if self.verbose:
                cmd.append("--verbose")
            with open(log, "ab") as err:
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                                        process_group=0)
            inst = _Instance(i, proc, state_dir, log)
            assert proc.stdout is not None
            threading.Thread(target=_read_lines, args=(proc.stdout, inst.lines), name=f"duet-{inst.name}",
                             daemon=True).start()
            self.instances.append(inst)
        deadline = time.monotonic() + timeout_s
        while not all(i.ready for i in self.instances):
            if time.monotonic() > deadline:
                raise TimeoutError(f"speed layer instances not ready after {timeout_s:.0f} s")
            self.wait(0.2)
        depths = self.placement.depths
        for depth in sorted(set(depths)):
            level = [inst for inst, d in zip(self.instances, depths) if d == depth]
            self._send(b"start\n", level)
            if depth == max(depths):
                break
            while not all(inst.running for inst in level):
                if time.monotonic() > deadline:
                    names = ", ".join(inst.name for inst in level if not inst.running)
                    raise TimeoutError(f"speed layer {names} not running after {timeout_s:.0f} s")
                self.wait(0.1)

    def _send(self, command: bytes, instances: list[_Instance]) -> None:
        for inst in instances:
            try:
                assert inst.proc.stdin is not None
                inst.proc.stdin.write(command)
                inst.proc.stdin.flush()
            except (OSError, ValueError) as exc:  # exited: the supervisor's poll() reports it as InstanceDied
                log.debug("instance %d (pid %d) gone before %r reached it: %s", inst.index, inst.proc.pid, command, exc)

    @property
    def processed(self) -> int:
        """Records processed by the instances (their last ``process-total`` summed)."""
        return sum(i.processed for i in self.instances)

    @property
    def caught_up(self) -> bool:
        """Every instance said it is caught up (and none has exited)."""
        return bool(self.instances) and all(i.caught_up for i in self.instances)

    def poll(self) -> None:
        """Read what the instances reported; raise :class:`InstanceDied` for an instance that
        exited unasked or whose client failed (after stopping the others)."""
        for inst in self.instances:
            self._drain(inst)
            rc = inst.proc.poll()
            if inst.error is not None or (rc is not None and not inst.stop_sent):
                self._drain(inst)
                self.stop(grace_s=INTERRUPT_GRACE_S)
                raise InstanceDied(self._death(inst, inst.proc.poll()))

    def _drain(self, inst: _Instance) -> None:
        """Take in what ``inst`` reported so far."""
        while not inst.ended:
            try:
                msg = inst.lines.get_nowait()
            except queue.Empty:
                return
            self._take(inst, msg)

    def _take(self, inst: _Instance, msg: dict[str, Any] | None) -> None:
        """Take in one report of ``inst`` (None: the end of its pipe)."""
        if msg is None:
            inst.ended = True
            return
        event = msg.get("event")
        if "processed" in msg:
            inst.processed = int(msg["processed"])
        if event == "ready":
            inst.ready = True
        elif event == "running":
            inst.running = True
        elif event == "caught_up":
            inst.caught_up = inst.running = True
        elif event == "error":
            inst.error = str(msg.get("message"))
        elif event == "final":
            inst.final = msg

    def _death(self, inst: _Instance, rc: int | None) -> str:
        how = f"died with exit code {rc}" if rc is not None else "failed"
        if rc is not None and rc < 0:
            try:
                how += f" ({signal.Signals(-rc).name})"
            except ValueError:
                pass
        what = f": {inst.error}" if inst.error else ""
        if inst.killed and not inst.error:
            what = ": killed, as it had not closed when told to stop, before it sent its results"
        tail = inst.log_tail()
        return (f"speed layer {inst.name} of {self.count} (pid {inst.proc.pid}) {how}{what}; its log {inst.log}"
                + (f" ends: {tail}" if tail else ""))

    def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for a report of any instance (then :meth:`poll`)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if any(not i.lines.empty() for i in self.instances):
                break
            time.sleep(0.05)
        self.poll()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Tell every instance to stop (it closes its client and sends its results), wait up to
        ``grace_s``, then kill those still running (named as killed in :meth:`results`).
        Idempotent."""
        for inst in self.instances:
            if inst.proc.poll() is None and not inst.stop_sent:
                inst.stop_sent = True
                try:
                    assert inst.proc.stdin is not None
                    inst.proc.stdin.write(b"stop\n")
                    inst.proc.stdin.close()
                except (OSError, ValueError):
                    pass
            inst.stop_sent = True
        deadline = time.monotonic() + grace_s
        for inst in self.instances:
            try:
                inst.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                inst.proc.kill()
                inst.proc.wait()
                inst.killed = True
            self._drain_final(inst)

    def _drain_final(self, inst: _Instance, timeout_s: float = 5.0) -> None:
        """Read the rest of an exited instance's reports (its pipe ends once read)."""
        deadline = time.monotonic() + timeout_s
        while not inst.ended and time.monotonic() < deadline:
            try:
                self._take(inst, inst.lines.get(timeout=0.1))
            except queue.Empty:
                continue

    def results(self) -> list[dict[str, Any]]:
        """The final report of every instance (after :meth:`stop`; an instance killed while
        closing after it sent its report counts).

        Raises:
            InstanceDied: an instance sent none (it was killed, or failed while closing).
        """
        for inst in self.instances:
            if inst.final is None:
                raise InstanceDied(self._death(inst, inst.proc.returncode))
        return [i.final for i in self.instances if i.final is not None]

    def remove_state(self) -> None:
        """Delete the instances' state folders (and logs)."""
        for inst in self.instances:
            shutil.rmtree(inst.state_dir, ignore_errors=True)


def merge_results(results: list[dict[str, Any]]) -> tuple[dict[str, Any], list[LateRecord], dict[str, set[tuple[str, int]]]]:
    """The instances' final reports as one: ``(metrics, late records, late windows)``.
    Numeric metrics are summed; ``tasks`` counters summed per task; ``threads`` keyed
    ``instance-<n>/<thread>``; ``instances``: per instance, the records it processed and its
    process' CPU seconds; late records and windows united."""
    metrics: dict[str, Any] = {"tasks": {}, "threads": {}, "instances": []}
    late: set[LateRecord] = set()
    windows: dict[str, set[tuple[str, int]]] = {}
    for n, res in enumerate(results, 1):
        metrics["instances"].append({"processed": int(res.get("processed", 0)), "cpu_s": float(res.get("cpu_s", 0.0))})
        for name, value in dict(res.get("metrics", {})).items():
            if name == "tasks":
                for task, counters in dict(value).items():
                    mine = metrics["tasks"].setdefault(task, {})
                    for k, v in dict(counters).items():
                        mine[k] = mine.get(k, 0) + v
            elif name == "threads":
                for thread, values in dict(value).items():
                    metrics["threads"][f"instance-{n}/{thread}"] = values
            elif isinstance(value, (int, float)):
                metrics[name] = metrics.get(name, 0) + value
        late.update(LateRecord(str(s), str(k), int(ts)) for s, k, ts in res.get("late", []))
        for store, wins in dict(res.get("late_windows", {})).items():
            windows.setdefault(str(store), set()).update((str(k), int(start)) for k, start in wins)
    return metrics, sorted(late, key=lambda r: (r.store, r.key, r.timestamp)), windows


def run_speed_instances(
    pipeline: Pipeline,
    bootstrap: str,
    instances: int,
    *,
    application_id: str,
    root: Path,
    extra: Mapping[str, Any] | None,
    stats: SpeedStats,
    timeout_s: float,
    follow: bool = False,
    reporter: Reporter | None = None,
    tick: Callable[[Callable[[], int], float], None] | None = None,
    keep_state: bool = False,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run ``instances`` processes of the application until the group has caught up (with
    ``follow``: until Ctrl-C); fill ``stats`` (seconds, late records and windows); return the
    merged metrics (:func:`merge_results`). ``tick(processed, t0)`` reports progress.

    Raises:
        TimeoutError: not caught up within ``timeout_s``.
        InstanceDied: an instance died or its client failed (the others are stopped).
        KeyboardInterrupt: Ctrl-C (the instances are stopped, then killed after
            :data:`INTERRUPT_GRACE_S`).
    """
    rep = reporter or NullReporter()
    topology = pipeline.build_topology()
    placement = place_subtopologies(topology, instances, load_costs(root, pipeline.name, topology))
    stats.instances = len(placement.instances)
    stats.placement = [list(subs) for subs in placement.instances]
    log.info("%s: %s", pipeline.name, placement.describe())
    group = InstanceGroup(pipeline, bootstrap, application_id, root, placement, extra, verbose)
    t0 = time.monotonic()
    ok = False
    try:
        group.start()
        deadline = t0 + timeout_s
        while not group.caught_up:
            if time.monotonic() > deadline:
                raise TimeoutError(f"speed layer ({instances} instances) not caught up after {timeout_s:.0f} s")
            group.wait(REPORT_EVERY_S)
            if tick is not None:
                tick(lambda: group.processed, t0)
        stats.seconds = time.monotonic() - t0
        stats.lag_s = stats.seconds
        fresh_state = not keep_state  # discarded after the run: no need to wait for a clean close
        if follow:
            rep.finish("speed", f"caught up; following with {instances} instances (Ctrl-C stops)")
            try:
                while True:
                    group.wait(1.0)
                    if tick is not None:
                        tick(lambda: group.processed, t0)
            except KeyboardInterrupt:
                pass
        group.stop(grace_s=FRESH_STOP_GRACE_S if fresh_state else STOP_GRACE_S)
        metrics, late, windows = merge_results(group.results())
        stats.late, stats.late_windows = late, windows
        stats.expired_join_ranges = sorted({(str(j), int(lo), int(hi)) for res in group.results()
                                            for j, lo, hi in res.get("expired_join", [])})
        ok = True
        return metrics
    except KeyboardInterrupt:
        group.stop(grace_s=INTERRUPT_GRACE_S)
        raise
    finally:
        if ok or not group.instances:
            if not keep_state:
                group.remove_state()
        else:
            group.stop(grace_s=INTERRUPT_GRACE_S)
