"""Flow control of a stream thread's input: ``buffered.records.per.partition`` bounds each
task buffer, the records consumed beyond it wait in the thread (as Java's consumer keeps
what it fetched for a paused partition, KAFKA-7548), and a partition is paused once
``held_bytes_limit`` bytes wait, resumed when they are buffered again.

The topology and data of ``test_runtime_equivalence``, with a 10-record buffer and the held
bound lowered to 64 bytes (and no thread budget) so that the input partitions are paused and resumed over and over:
the results are still the TopologyTestDriver's. Also: a thread asked to commit by
``wait_until_caught_up`` commits as soon as it has processed everything, not at its next
``commit.interval.ms``.
"""
from __future__ import annotations

import json
import time
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from speed_layer import Serdes
from speed_layer.runtime import input_buffers

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_equivalence import build, data, driver_results  # noqa: E402

pytestmark = pytest.mark.broker


def test_paused_and_resumed_partitions_give_the_drivers_results(runtime_kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    kit = runtime_kit
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_PARTITION", 64)
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_THREAD", 0)
    paused: set[tuple[str, int]] = set()
    resumed = 0
    real = input_buffers.InputBuffers.pause_resume

    def spy(self: input_buffers.InputBuffers, consumer: Any) -> None:
        nonlocal resumed
        before = set(self.paused)
        real(self, consumer)
        paused.update(self.paused - before)
        resumed += len(before - self.paused)
        assert all(task.buffered_in(*tp) <= self.limit for tp, task in self.tp_task.items())

    monkeypatch.setattr(input_buffers.InputBuffers, "pause_resume", spy)
    t = kit.topics(users=2, orders=2, enriched=2, counts=2)
    users, orders = data()
    kit.produce(t["users"], users)
    kit.produce(t["orders"], orders)
    exp_enriched, exp_counts, exp_store = driver_results(build(t), t)

    streams = kit.run(build(t), kit.config("app", **{"buffered.records.per.partition": 10}))
    assert streams.state == "RUNNING"
    got = [(m.key().decode(), json.loads(m.value())) for m in kit.read(t["enriched"])]
    assert Counter(json.dumps(x, sort_keys=True) for x in got) == Counter(json.dumps(x, sort_keys=True) for x in exp_enriched)
    wser = Serdes.WindowedJSON(Serdes.String())
    counts = {wser.deserialize(m.key()): json.loads(m.value()) for m in kit.read(t["counts"])}
    assert counts == exp_counts
    assert sorted(streams.store("region-counts").all(), key=repr) == sorted(exp_store, key=repr)
    assert streams.metrics()["process-total"] == 10 + 240 + 200
    # both orders partitions were paused while records waited, and resumed
    assert {tp for tp in paused if tp[0] == t["orders"]} == {(t["orders"], 0), (t["orders"], 1)}
    assert resumed >= len(paused)
    assert streams.close(30)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_waiting_for_caught_up_commits_without_waiting_for_the_commit_interval(runtime_kit: Any, guarantee: str) -> None:
    """``wait_until_caught_up`` asks the threads to commit once they processed everything,
    so it returns long before a commit interval of 10 minutes; the results are the
    driver's and the committed offsets are at the ends."""
    kit = runtime_kit
    t = kit.topics(users=2, orders=2, enriched=2, counts=2)
    users, orders = data()
    kit.produce(t["users"], users)
    kit.produce(t["orders"], orders)
    exp_enriched, exp_counts, _ = driver_results(build(t), t)
    streams = kit.streams(build(t), kit.config("app", **{"commit.interval.ms": 600_000, "processing.guarantee": guarantee}))
    streams.start()
    t0 = time.monotonic()
    assert streams.wait_until_caught_up(45), f"not caught up: state={streams.state} errors={streams.errors}"
    assert time.monotonic() - t0 < 45
    got = [(m.key().decode(), json.loads(m.value())) for m in kit.read(t["enriched"], read_committed=True)]
    assert Counter(json.dumps(x, sort_keys=True) for x in got) == Counter(json.dumps(x, sort_keys=True) for x in exp_enriched)
    wser = Serdes.WindowedJSON(Serdes.String())
    assert {wser.deserialize(m.key()): json.loads(m.value()) for m in kit.read(t["counts"], read_committed=True)} == exp_counts
    # later input is committed too, at the next wait
    more = [(k, {**v, "amount": 1}, ts + 1) for k, v, ts in orders[:5]]
    kit.produce(t["orders"], more)
    assert streams.wait_until_caught_up(45)
    assert streams.metrics()["process-total"] == 10 + 240 + 200 + 5 + 5
    assert streams.close(30)
