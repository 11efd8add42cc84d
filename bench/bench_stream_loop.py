"""Where a stream thread's CPU goes with a broker (issue 45): the anchors' duet workloads
(``../shared/bench-anchors/duet_proc.build``: stateless filter + project, window = 1 h
tumbling count per origin with final results) on the anchors' broker and input topic, run
until ``--records`` records were processed, then closed.

Prints the CPU microseconds per record of each OS thread of the process (``/proc/self/task``:
the stream thread, librdkafka's threads, the main thread), the process CPU per record, and,
with ``--profile``, cProfile's calls per record and inclusive CPU per record
(``time.thread_time`` clock) of the stream thread's stages (consume, ``InputBuffers.add``,
the executor, ``StreamTask.process``, the collector's ``send`` and ``produce``, delivery
reports, commits). cProfile's own cost inflates functions that make many calls; the
unprofiled run's thread CPU is the figure to compare, the profile says how it splits.
Sampling instead: run without ``--profile`` under ``py-spy record --threads --format raw``
(py-spy from PyPI, not a dependency of the project), then ``--spy-stages FILE --us X``
splits the stream thread's samples into the same stages, in us per record given the
thread's X us per record of the sampled run (a C function's time is its caller's line's).

    ANCHOR_SCRATCH=... .venv/bin/python bench/bench_stream_loop.py --mode stateless --records 336776
    ANCHOR_SCRATCH=... .venv/bin/python bench/bench_stream_loop.py --mode window --records 336776 --profile
    py-spy record --threads --format raw -r 200 --nonblocking -o s.raw -- .venv/bin/python bench/bench_stream_loop.py
    .venv/bin/python bench/bench_stream_loop.py --spy-stages s.raw --us 9.5

Needs the anchors' broker (``broker.py``) and input (``preload.py``); the bootstrap address
comes from ``$ANCHOR_BOOTSTRAP`` or ``$ANCHOR_SCRATCH/bootstrap.txt``. The machine may be
shared: quote the load average printed with the figures.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ANCHORS = Path(__file__).resolve().parent.parent.parent / "shared" / "bench-anchors"
CLK = os.sysconf("SC_CLK_TCK")

#: the stream thread's stages: (label, the cProfile functions whose inclusive time they are)
STAGES = [
    ("consume (poll / consume, Message objects)", [("~", "<method 'consume' of 'cimpl.Consumer' objects>"),
                                                  ("~", "<method 'poll' of 'cimpl.Consumer' objects>")]),
    ("InputBuffers.add (accessors, raw records)", [("input_buffers.py", "add")]),
    ("pause / resume, refill", [("input_buffers.py", "pause_resume"), ("input_buffers.py", "refill")]),
    ("readiness checks in the loop", [("stream_thread.py", "<genexpr>")]),
    ("executor (all, task work included)", [("task_executor.py", "process")]),
    ("StreamTask.process (deserialize, processors, sinks)", [("task.py", "process")]),
    ("collector send (Python)", [("record_collector.py", "send")]),
    ("producer.produce (C)", [("~", "<method 'produce' of 'cimpl.Producer' objects>")]),
    ("delivery reports (producer.poll)", [("~", "<method 'poll' of 'cimpl.Producer' objects>")]),
    ("commits (maybe_commit)", [("task_committer.py", "maybe_commit")]),
    ("settle", [("task_committer.py", "settle")]),
    ("punctuate", [("task_executor.py", "punctuate")]),
]


def gc_timer() -> dict[Any, float]:
    """Wall seconds spent in the garbage collector per generation (``gc.callbacks``), and
    the number of collections (``n0``...), filled as collections run."""
    import gc

    acc: dict[Any, float] = {0: 0.0, 1: 0.0, 2: 0.0, "n0": 0, "n1": 0, "n2": 0}
    started: list[float] = []

    def cb(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            g = info["generation"]
            acc[g] += time.perf_counter() - started.pop()
            acc[f"n{g}"] += 1

    gc.callbacks.append(cb)
    return acc


def thread_cpu() -> dict[int, tuple[str, float]]:
    """``{tid: (name, user + sys CPU s)}`` of this process' threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                raw = fh.read()
            name = raw[raw.index("(") + 1:raw.rindex(")")]
            f = raw.rsplit(")", 1)[1].split()
            out[int(tid)] = (name, (int(f[11]) + int(f[12])) / CLK)
        except (OSError, ValueError):
            continue
    return out


def stage_table(stats: pstats.Stats, n: int) -> list[tuple[str, float, float]]:
    """``(stage, calls per record, inclusive us per record)`` from cProfile's stats."""
    rows = []
    by_key = stats.stats  # type: ignore[attr-defined]
    for label, keys in STAGES:
        calls = 0
        cum = 0.0
        for (file, _line, func), (_cc, nc, _tt, ct, _callers) in by_key.items():
            for kfile, kfunc in keys:
                if func == kfunc and (file == kfile or file.endswith("/" + kfile)):
                    calls += nc
                    cum += ct
        rows.append((label, calls / n, cum * 1e6 / n))
    return rows


def raw_run(inp: str, out: str, records: int, bootstrap: str, conf: dict[str, Any]) -> None:
    """The anchors' raw loop (``raw_proc.py``: consume(1000) -> orjson -> filter/project ->
    produce, poll(0) per batch) on the first ``records`` records, in a thread; prints as
    :func:`main` does. ``conf``: ``consumer.`` / ``producer.`` keys added to its clients'
    configs (e.g. duet's, to see what they cost librdkafka's threads)."""
    import orjson
    from confluent_kafka import Consumer, Producer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hotloop-raw-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  **{k[9:]: v for k, v in conf.items() if k.startswith("consumer.")}})
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2",
                  **{k[9:]: v for k, v in conf.items() if k.startswith("producer.")}})
    c.subscribe([inp])
    times: dict[str, float] = {}

    def loop() -> None:
        cpu0 = time.thread_time()
        produce, loads, dumps = p.produce, orjson.loads, orjson.dumps
        n = 0
        while n < records:
            msgs = c.consume(num_messages=1000, timeout=1.0)
            if msgs and "first" not in times:
                times["first"] = time.time()
            for m in msgs:
                if m.error():
                    continue  # end of partition (enable.partition.eof)
                v = loads(m.value())
                if v["distance"] > 500:
                    produce(out, key=m.key(), value=dumps({"carrier": v["carrier"], "flight": v["flight"],
                                                           "dest": v["dest"], "distance": v["distance"]}))
            n += sum(1 for m in msgs if not m.error())
            p.poll(0)
        times["n"] = n
        times["stop"] = time.time()
        times["cpu"] = time.thread_time() - cpu0
        p.flush(60)

    before = thread_cpu()
    t = threading.Thread(target=loop, name="raw-loop")
    t.start()
    t.join()
    after = thread_cpu()
    names: dict[int, str] = {}
    after.pop(t.native_id, None)  # (reported from its own clock)
    c.close()
    n = int(times["n"])
    load = os.getloadavg()
    print(f"raw: {n} records in {times['stop'] - times['first']:.1f} s ({n / (times['stop'] - times['first']):,.0f}/s), "
          f"load average {load[0]:.1f} {load[1]:.1f}")
    report_threads(before, after, names, n, {"raw loop": times["cpu"]})


def report_threads(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], names: dict[int, str],
                   n: int, extra: dict[str, float] | None = None) -> None:
    """Print the CPU us per record of each thread between ``before`` and ``after`` (and of
    ``extra``: ``{name: CPU s}`` of threads that ended before ``after``)."""
    print("CPU us/record by thread, until the last record was processed (close excluded):")
    total = 0.0
    for name, cpu in (extra or {}).items():
        total += cpu
        print(f"  {name:<24} {cpu * 1e6 / n:7.2f}")
    for tid, (name, cpu) in sorted(after.items(), key=lambda kv: -(kv[1][1] - before.get(kv[0], ("", 0.0))[1])):
        d = cpu - before.get(tid, ("", 0.0))[1]
        total += d
        if d * 1e6 / n >= 0.05:
            print(f"  {names.get(tid, name):<24} {d * 1e6 / n:7.2f}")
    print(f"  {'process':<24} {total * 1e6 / n:7.2f}")


def spy_stage(frames: list[str], produce_line: str) -> str:
    """The stage of one py-spy stack of the stream thread (``Class.function (file:line)``
    frames, outermost first)."""
    names = [f.split(" (")[0] for f in frames]
    lname = names[-1] if names else ""
    if {"TaskCommitter.maybe_commit", "TaskCommitter.commit", "StreamThread._close_tasks"} & set(names):
        return "commits (cache flushes and their sends)"
    if "KafkaRecordCollector.poll" in names:
        return "delivery reports (producer.poll)"
    if "KafkaRecordCollector.send" in names:
        if lname == "KafkaRecordCollector.send" and frames[-1].endswith(produce_line):
            return "producer.produce (C)"
        return "collector send (Python)"
    if any(n.startswith("sink_sender") for n in names):
        return "sink: serialize (JSON out)"
    runs = [i for i, n in enumerate(names) if n in ("StreamTask.process", "StreamTask._process_raw")]
    if runs:
        rest = names[runs[-1] + 1:]
        if not rest:
            return "task: StreamTask.process itself"
        if rest[0] in ("_json_loads", "Serdes.String.<locals>.<lambda>"):
            return "task: deserialize (key, JSON in)"
        return "task: processors, stores"
    if "TaskExecutor.process" in names:
        return "executor: runs, heap, readiness"
    if "InputBuffers.add" in names:
        return "InputBuffers.add (accessors, raw records)"
    if "InputBuffers.pause_resume" in names:
        return "held records into buffers, pause / resume"
    if lname == "StreamThread._run_once":
        return "consume / poll (C: Message objects)"
    if "StreamThread._run_once" in names:
        return "loop: other"
    return "other (start, close)"


def spy_stages(path: str, us: float) -> None:
    """Print the stream thread's samples of the py-spy raw profile ``path`` by stage, in %
    and in us per record given ``us`` (the thread's CPU us per record of that run)."""
    import inspect
    from collections import Counter

    from speed_layer.runtime.record_collector import KafkaRecordCollector

    lines, first = inspect.getsourcelines(KafkaRecordCollector.send)
    produce_line = next(f":{first + i})" for i, text in enumerate(lines)
                        if "produce(topic, value, key, partition, report, None, ts)" in text)
    counts: Counter[str] = Counter()
    with open(path) as fh:
        for line in fh:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            if "StreamThread" in frames[0]:
                counts[spy_stage(frames[1:], produce_line)] += int(n)
    total = sum(counts.values())
    for stage, n in counts.most_common():
        print(f"  {stage:<45} {100 * n / total:5.1f} %  {us * n / total:5.2f} us")
    print(f"  ({total} samples)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["stateless", "window", "window_eos", "raw"], default="stateless",
                    help="raw: the anchors' raw loop (raw_proc.py's, in a thread of this process)")
    ap.add_argument("--records", type=int, default=336_776, help="input records to process (from the topic's start)")
    ap.add_argument("--input", default="flights")
    ap.add_argument("--profile", action="store_true", help="cProfile the stream thread (thread CPU clock)")
    ap.add_argument("--top", type=int, default=0, help="with --profile: print cProfile's top N functions by own time")
    ap.add_argument("--conf", action="append", default=[], help="extra streams config key=value")
    ap.add_argument("--spy-stages", metavar="FILE", help="only split a py-spy raw profile of the stream thread by stage")
    ap.add_argument("--us", type=float, default=1.0, help="with --spy-stages: the thread's CPU us per record of that run")
    args = ap.parse_args(argv)
    if args.spy_stages:
        spy_stages(args.spy_stages, args.us)
        return
    sys.path.insert(0, str(ANCHORS))
    from common import bootstrap  # type: ignore[import-not-found]
    from duet_proc import build, parse_conf  # type: ignore[import-not-found]

    from speed_layer import KafkaStreams
    from speed_layer.runtime import stream_thread as st
    from confluent_kafka.admin import AdminClient, NewTopic

    out = f"hotloop-out-{uuid.uuid4().hex[:8]}"
    app = f"hotloop-{args.mode}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap()})
    for f in admin.create_topics([NewTopic(out, 4, 1)]).values():
        f.result()
    if args.mode == "raw":
        raw_run(args.input, out, args.records, bootstrap(), parse_conf(args.conf))
        return
    prof = cProfile.Profile(time.thread_time) if args.profile else None
    if prof is not None:
        run = st.StreamThread.run

        def profiled(self: Any) -> None:
            prof.enable()
            try:
                run(self)
            finally:
                prof.disable()

        st.StreamThread.run = profiled  # type: ignore[method-assign]
    state = tempfile.mkdtemp(prefix="hotloop-")
    config = {"application.id": app, "bootstrap.servers": bootstrap(), "state.dir": state,
              **({"processing.guarantee": "exactly_once_v2"} if args.mode == "window_eos" else {}),
              **parse_conf(args.conf)}
    streams = KafkaStreams(build(args.mode, args.input, out), config)
    gc_time = gc_timer()
    before = thread_cpu()
    streams.start()
    t_first = None
    while True:
        n = streams.metrics()["process-total"]
        if t_first is None and n > 0:
            t_first = time.time()
        if n >= args.records or streams.state in ("ERROR", "NOT_RUNNING", "PENDING_ERROR"):
            break
        time.sleep(0.01)
    t_stop = time.time()
    after_run = thread_cpu()
    names = {t.native_id: "stream thread" if "StreamThread" in t.name else t.name for t in threading.enumerate()}
    streams.close(60)
    t_done = time.time()
    n = streams.metrics()["process-total"]
    after = thread_cpu()
    load = os.getloadavg()
    print(f"{args.mode}: {n} records in {t_stop - (t_first or t_stop):.1f} s ({n / max(1e-9, t_stop - (t_first or t_stop)):,.0f}/s), "
          f"close {t_done - t_stop:.1f} s, load average {load[0]:.1f} {load[1]:.1f}{', cProfile on' if prof else ''}")
    report_threads(before, after_run, names, n)
    print("  garbage collections (all threads), us/record by generation: "
          + ", ".join(f"gen{g} {gc_time[g] * 1e6 / n:.2f} ({gc_time['n' + str(g)]} runs)" for g in range(3)))
    if prof is not None:
        stats = pstats.Stats(prof)
        print(f"stream thread: {stats.total_calls / n:.2f} function calls per record (cProfile: Python and C functions)")  # type: ignore[attr-defined]
        print("stream thread stages (cProfile, inclusive, thread CPU): calls/record, us/record")
        for label, calls, us in stage_table(stats, n):
            print(f"  {label:<52} {calls:7.3f} {us:7.2f}")
        if args.top:
            stats.sort_stats("tottime").print_stats(args.top)
    for f in admin.delete_topics([out]).values():
        try:
            f.result()
        except Exception:  # noqa: BLE001 - a scratch topic: say so, go on
            print(f"(could not delete {out})")


if __name__ == "__main__":
    main()
