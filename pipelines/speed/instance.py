"""One process of the speed layer's application under ``duet run --instances N`` / ``duet
speed --instances N``: the child side of :mod:`pipelines.speed.instances`, which spawns it
as ``python -m pipelines.speed.instance``.

It builds the pipeline's topology on its own ``KafkaStreams`` (its own state folder, the
run's ``application.id``, its sub-topologies in the streams config's
``instance.subtopologies``), and speaks to its supervisor in JSON lines on stdout
(``event``: ``ready``, ``started``, ``running``, ``progress``, ``caught_up``, ``final`` with
its metrics, late records and windows and CPU seconds, or ``error``), every
:data:`REPORT_EVERY_S` s. On stdin it reads ``start`` (join the group now) and ``stop``; EOF
(the supervisor is gone) and SIGTERM stop it too. Everything else it prints, its logs
included, goes to stderr: the supervisor's ``instance.log``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pipelines.speed.service import SpeedLayerFailed

__all__ = ["main", "REPORT_EVERY_S", "CLOSE_TIMEOUT_S"]

#: seconds between two progress reports of an instance
REPORT_EVERY_S = 0.5
#: seconds an instance's ``KafkaStreams.close`` may take (then it exits all the same)
CLOSE_TIMEOUT_S = 45.0


def main(argv: list[str]) -> int:
    """One instance (``python -m pipelines.speed.instance ...``): run the streams, report on
    stdout (JSON lines), stop on ``stop`` or EOF on stdin, or SIGTERM. Returns the exit
    code: 0, 1 when the speed layer failed, 2 when ``--pipeline`` is not pipeline ``--name``."""
    ap = argparse.ArgumentParser(prog="python -m pipelines.speed.instance")
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--application-id", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--extra", default="{}")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    out = os.fdopen(os.dup(1), "w", buffering=1)  # the reports; anything else printed goes to the log
    os.dup2(2, 1)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    lock = threading.Lock()

    def report(**msg: Any) -> None:
        with lock:
            out.write(json.dumps(msg, default=str) + "\n")

    def note(text: str) -> None:  # a line of the instance's log
        print(f"{time.strftime('%H:%M:%S')} duet speed instance {os.getpid()}: {text}", file=sys.stderr, flush=True)

    go, stop = threading.Event(), threading.Event()

    def read_commands() -> None:
        for line in sys.stdin:
            if line.strip() == "start":
                go.set()
            elif line.strip() == "stop":
                break
        stop.set()  # "stop", or EOF: the supervisor is gone
        go.set()

    threading.Thread(target=read_commands, name="duet-instance-commands", daemon=True).start()

    def on_term(*_: Any) -> None:
        stop.set()
        go.set()

    signal.signal(signal.SIGTERM, on_term)

    from pipelines.declaration.resolve import load_pipeline
    from pipelines.speed.service import runtime_late_records, runtime_late_windows, streams_config, wait_caught_up
    from speed_layer import KafkaStreams

    pipeline = load_pipeline(a.pipeline)
    if pipeline.name != a.name:
        report(event="error", message=f"{a.pipeline} is pipeline {pipeline.name!r}, not {a.name!r}")
        return 2
    conf = streams_config(pipeline, a.bootstrap, a.application_id, Path(a.state_dir), json.loads(a.extra))
    streams = KafkaStreams(pipeline.build_topology(), conf)

    def processed() -> int:
        try:
            return int(streams.metrics().get("process-total", 0))
        except Exception:  # noqa: BLE001 - informative only
            return 0

    report(event="ready", pid=os.getpid(), processed=0)
    note(f"ready ({a.application_id}, state {a.state_dir})")
    go.wait()  # every instance is ready: they join the group together (see InstanceGroup.start)
    if stop.is_set():
        return 0
    code = 0
    try:
        streams.start()
        report(event="started", processed=0)
        caught_up = running = False
        while not stop.is_set():
            if not running and streams.state == "RUNNING":  # its tasks assigned and restored
                running = True
                note("running")
                report(event="running", processed=processed())
            if not caught_up:
                caught_up = wait_caught_up(streams, REPORT_EVERY_S)
                report(event="caught_up" if caught_up else "progress", processed=processed())
                if caught_up:
                    note("caught up")
            else:
                stop.wait(REPORT_EVERY_S)
                if streams.state in ("PENDING_ERROR", "ERROR", "NOT_RUNNING") and not stop.is_set():
                    errors = list(getattr(streams, "errors", []) or [])
                    raise SpeedLayerFailed(f"the speed layer stopped (state {streams.state}): "
                                           f"{errors[0] if errors else None!r}")
                report(event="progress", processed=processed())
        note(f"stopping (state {streams.state})")
        metrics = dict(streams.metrics())
        late = [(r.store, r.key, r.timestamp) for r in runtime_late_records(streams)]
        windows = {store: sorted(wins) for store, wins in runtime_late_windows(streams).items()}
        # the results before the close: what was caught up on is committed and its outputs
        # flushed already, and the close of the last instances may wait for a rebalance
        # (the first ones leaving the group move their tasks to them)
        report(event="final", processed=int(metrics.get("process-total", 0)), metrics=metrics, late=late,
               late_windows=windows, expired_join=streams.expired_join_ranges(), cpu_s=time.process_time())
    except SpeedLayerFailed as exc:
        report(event="error", message=str(exc))
        code = 1
    finally:
        t0 = time.monotonic()
        closed = streams.close(CLOSE_TIMEOUT_S)
        note(f"closed in {time.monotonic() - t0:.1f} s" + ("" if closed else " (threads still running)"))
    out.close()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
