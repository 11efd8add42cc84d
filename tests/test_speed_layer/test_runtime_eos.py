"""exactly_once_v2: transactional outputs, no duplicated aggregates across a failure and a
restart.

Counts per bucket are forwarded on every update (no cache), so a read_committed reader of
the output sees, per key, exactly ``1, 2, ..., final``: any replayed (duplicated) update
would repeat a value.
"""
from __future__ import annotations

import json
import threading
from collections import defaultdict
from typing import Any

import pytest

from speed_layer import Consumed, Materialized, Produced, Repartitioned, Serdes, StreamsBuilder, Topology

pytestmark = pytest.mark.broker

BUCKETS = 5


def build(t: dict[str, str], fail_once_at: int | None = None, failed: threading.Event | None = None) -> Topology:
    b = StreamsBuilder()
    text, js = Serdes.String(), Serdes.JSON()

    def check(v: Any) -> Any:
        if fail_once_at is not None and failed is not None and v["n"] == fail_once_at and not failed.is_set():
            failed.set()
            raise RuntimeError("crash in the middle of a transaction")
        return v

    # the crash happens after the repartition, in the counting sub-topology, so that count
    # updates of the aborted transaction were already sent
    (b.stream(t["events"], Consumed(key_serde=text, value_serde=js))
     .select_key(lambda k, v: f"b{v['n'] % BUCKETS}")
     .repartition(Repartitioned.as_("by-bucket"))
     .map_values(check)
     .group_by_key()
     .count(Materialized.as_("counts").with_caching_disabled())
     .to_stream().to(t["counts"], Produced(key_serde=text, value_serde=js)))
    return b.build()


def updates(kit: Any, topic: str, read_committed: bool = True) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for m in kit.read(topic, read_committed=read_committed):
        out[m.key().decode()].append(json.loads(m.value()))
    return dict(out)


def test_exactly_once_v2_outputs_are_committed_once(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(events=2, counts=2)
    n0, n1 = 1000, 2000
    cfg = kit.config("app", **{"processing.guarantee": "exactly_once_v2"})
    failed = threading.Event()
    streams = kit.streams(build(t, fail_once_at=1500, failed=failed), cfg)
    streams.set_uncaught_exception_handler(lambda exc: "REPLACE_THREAD")
    streams.start()
    kit.produce(t["events"], [(f"u{i % 11}", {"n": i}, 1000 + i) for i in range(n0)])
    assert streams.wait_until_caught_up(60), streams.errors
    assert dict(streams.store("counts").all()) == {f"b{b}": n0 // BUCKETS for b in range(BUCKETS)}

    # 1. a crash mid-transaction: aborted, the thread is replaced, state wiped and restored
    kit.produce(t["events"], [(f"u{i % 11}", {"n": i}, 1000 + i) for i in range(n0, n1)])
    assert streams.wait_until_caught_up(90), streams.errors
    kit.wait_state(streams, "RUNNING")
    assert failed.is_set() and len(streams.errors) == 1
    assert streams.metrics()["restore-total"] > 0
    per_key = n1 // BUCKETS
    got = updates(kit, t["counts"])
    assert got == {f"b{b}": list(range(1, per_key + 1)) for b in range(BUCKETS)}
    # a read_uncommitted reader also sees the aborted updates (what EOS hides)
    assert sum(map(len, updates(kit, t["counts"], read_committed=False).values())) >= n1
    assert dict(streams.store("counts").all()) == {f"b{b}": per_key for b in range(BUCKETS)}
    assert streams.close(30)

    # 2. a clean restart with more input continues the counts: nothing lost or doubled
    n2 = 500
    kit.produce(t["events"], [(f"u{i % 11}", {"n": i}, 1000 + i) for i in range(n1, n1 + n2)])
    again = kit.run(build(t), cfg)
    assert again.metrics()["restore-total"] == 0  # the clean close wrote checkpoints
    per_key2 = (n1 + n2) // BUCKETS
    assert updates(kit, t["counts"]) == {f"b{b}": list(range(1, per_key2 + 1)) for b in range(BUCKETS)}
    assert dict(again.store("counts").all()) == {f"b{b}": per_key2 for b in range(BUCKETS)}
    # under EOS the checkpoint is absent while processing (Kafka: written on close only)
    from pathlib import Path

    from speed_layer.runtime.restore import read_checkpoint

    app_dir = Path(cfg["state.dir"]) / cfg["application.id"]
    assert all(read_checkpoint(d) is None for d in app_dir.iterdir() if d.is_dir() and d.name[0].isdigit())
