"""Stopping and restarting KafkaStreams: checkpoints, changelog restoration.

Topology: events (2 partitions, key user) re-grouped by a bucket (repartition), summed into
a key-value store (``sums``, cached) and counted in 10 s windows (``wcounts``).
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from speed_layer import Consumed, Materialized, Produced, Serdes, StreamsBuilder, TimeWindows, Topology
from speed_layer.runtime.restore import read_checkpoint
from speed_layer.testing import TopologyTestDriver

pytestmark = pytest.mark.broker

N = 3000


def build(t: dict[str, str]) -> Topology:
    b = StreamsBuilder()
    text, js = Serdes.String(), Serdes.JSON()
    grouped = b.stream(t["events"], Consumed(key_serde=text, value_serde=js)).group_by(lambda k, v: f"b{v['n'] % 7}")
    (grouped.aggregate(lambda: 0, lambda k, v, agg: agg + v["n"], Materialized.as_("sums"))
     .to_stream().to(t["sums"], Produced(key_serde=text, value_serde=js)))
    grouped.windowed_by(TimeWindows.of_size_and_grace(10_000, 3_600_000)).count(Materialized.as_("wcounts"))
    return b.build()


def events(lo: int, hi: int) -> list[tuple[str, Any, int]]:
    return [(f"u{i % 13}", {"n": i}, 100_000 + 37 * i) for i in range(lo, hi)]


def expected(t: dict[str, str], records: list[tuple[str, Any, int]]) -> tuple[dict[str, int], list[Any]]:
    with TopologyTestDriver(build(t)) as d:
        inp = d.create_input_topic(t["events"])
        for k, v, ts in records:
            inp.pipe_input(k, v, ts)
        return dict(d.get_key_value_store("sums").all()), sorted(d.get_window_store("wcounts").all(), key=repr)


def final_values(kit: Any, topic: str) -> dict[str, int]:
    out = {}
    for m in kit.read(topic):
        out[m.key().decode()] = json.loads(m.value())
    return out


def test_graceful_stop_mid_stream_restart_and_restore_from_changelog(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(events=2, sums=2)
    kit.produce(t["events"], events(0, N))
    exp_sums, exp_windows = expected(t, events(0, N))
    cfg = kit.config("app")

    # 1. stop while records are still being processed
    first = kit.streams(build(t), cfg)
    first.start()
    deadline = time.monotonic() + 60
    while first.metrics()["process-total"] < 300:
        assert time.monotonic() < deadline and not first.errors, first.errors
        time.sleep(0.01)
    assert first.close(30)
    processed_first = first.metrics()["process-total"]
    app_dir = Path(cfg["state.dir"]) / cfg["application.id"]
    checkpoints = {d.name: read_checkpoint(d) for d in app_dir.iterdir() if d.is_dir() and d.name[0].isdigit()}
    assert checkpoints and all(c is not None for c in checkpoints.values()), checkpoints
    # the aggregating tasks checkpointed their changelog offsets
    assert any(f"{cfg['application.id']}-sums-changelog" in tp for c in checkpoints.values() for tp, _ in c)

    # 2. restart on the same state: local stores are reused (checkpoints at the changelog end)
    second = kit.run(build(t), cfg)
    assert second.metrics()["restore-total"] == 0
    # graceful close committed everything processed: no record is processed twice (each
    # event is processed once from the input and once from each aggregation's repartition topic)
    assert processed_first + second.metrics()["process-total"] == 3 * N, (processed_first, second.metrics()["process-total"])
    assert dict(second.store("sums").all()) == exp_sums
    assert sorted(second.store("wcounts").all(), key=repr) == exp_windows
    assert final_values(kit, t["sums"]) == exp_sums
    assert second.close(30)

    # 3. restart without local state: every store is restored from its changelog
    shutil.rmtree(app_dir)
    third = kit.run(build(t), cfg)
    m = third.metrics()
    assert m["restore-total"] > 0
    assert m["process-total"] == 0  # all input was committed: only restoration happened
    assert dict(third.store("sums").all()) == exp_sums
    assert sorted(third.store("wcounts").all(), key=repr) == exp_windows
    assert third.store("sums").get("b3") == exp_sums["b3"]
    assert third.close(30)

    # 4. more input after the restore: the restored aggregates continue correctly
    kit.produce(t["events"], events(N, N + 500))
    exp_sums2, exp_windows2 = expected(t, events(0, N + 500))
    fourth = kit.run(build(t), cfg)
    assert dict(fourth.store("sums").all()) == exp_sums2
    assert sorted(fourth.store("wcounts").all(), key=repr) == exp_windows2
    assert final_values(kit, t["sums"]) == exp_sums2


def test_reset_application_reprocesses_from_scratch(runtime_kit: Any) -> None:
    from speed_layer.admin import topic_partitions
    from speed_layer.runtime.kafka_streams import reset_application

    kit = runtime_kit
    t = kit.topics(events=2, sums=2)
    kit.produce(t["events"], events(0, 300))
    exp_sums, _ = expected(t, events(0, 300))
    cfg = kit.config("app")
    app = cfg["application.id"]
    first = kit.run(build(t), cfg)
    assert dict(first.store("sums").all()) == exp_sums
    with pytest.raises(Exception, match="active member"):
        reset_application(kit.bootstrap, app, [t["events"]])
    assert first.close(30)
    deleted = reset_application(kit.bootstrap, app, [t["events"]])
    assert sorted(deleted) == sorted([f"{app}-sums-changelog", f"{app}-sums-repartition", f"{app}-wcounts-changelog", f"{app}-wcounts-repartition"])
    assert topic_partitions(kit.bootstrap, f"{app}-sums-changelog") is None
    first.cleanup()
    assert not any(p.is_dir() and p.name[0].isdigit() for p in (Path(cfg["state.dir"]) / app).iterdir())
    again = kit.run(build(t), cfg)
    m = again.metrics()
    assert m["restore-total"] == 0 and m["process-total"] == 3 * 300  # everything reprocessed
    assert dict(again.store("sums").all()) == exp_sums  # not doubled


def test_consumed_repartition_records_are_purged(runtime_kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from speed_layer.runtime import stream_thread

    monkeypatch.setattr(stream_thread, "REPARTITION_PURGE_INTERVAL_S", 0.2)  # Kafka: repartition.purge.interval.ms
    kit = runtime_kit
    t = kit.topics(events=2, sums=2)
    kit.produce(t["events"], events(0, 200))
    cfg = kit.config("app")
    streams = kit.run(build(t), cfg)
    from confluent_kafka import Consumer, TopicPartition

    topic = f"{cfg['application.id']}-sums-repartition"
    c = Consumer({"bootstrap.servers": kit.bootstrap, "group.id": "probe"})
    try:
        deadline = time.monotonic() + 20
        while True:
            lows = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(2)]
            if all(lo == hi for lo, hi in lows):
                break
            assert time.monotonic() < deadline, lows
            time.sleep(0.2)
        assert sum(hi for _, hi in lows) == 200
    finally:
        c.close()
    assert dict(streams.store("sums").all()) == expected(t, events(0, 200))[0]
