"""Flow control of a stream thread's input: ``buffered.records.per.partition`` bounds each
task buffer, the records consumed beyond it wait in the thread (as Java's consumer keeps
what it fetched for a paused partition, KAFKA-7548), and a partition is paused once
``HELD_BYTES_PER_PARTITION`` bytes wait, resumed when they are buffered again.

The topology and data of ``test_runtime_equivalence``, with a 10-record buffer and the held
bound lowered to 64 bytes so that the input partitions are paused and resumed over and over:
the results are still the TopologyTestDriver's.
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from speed_layer import Serdes
from speed_layer.runtime import stream_thread

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_equivalence import build, data, driver_results  # noqa: E402

pytestmark = pytest.mark.broker


def test_paused_and_resumed_partitions_give_the_drivers_results(runtime_kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    kit = runtime_kit
    monkeypatch.setattr(stream_thread, "HELD_BYTES_PER_PARTITION", 64)
    paused: set[tuple[str, int]] = set()
    resumed = 0
    real = stream_thread.StreamThread._pause_resume

    def spy(self: stream_thread.StreamThread) -> None:
        nonlocal resumed
        before = set(self._paused)
        real(self)
        paused.update(self._paused - before)
        resumed += len(before - self._paused)
        limit = self.config.buffered_records_per_partition
        assert all(task.buffered_in(*tp) <= limit for tp, task in self.tp_task.items())

    monkeypatch.setattr(stream_thread.StreamThread, "_pause_resume", spy)
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
