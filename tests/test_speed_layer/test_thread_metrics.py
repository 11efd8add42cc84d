"""``KafkaStreams.metrics()["threads"]``: per stream thread, Kafka's stream-thread-metrics
(process-total, commit-total, commit-latency-avg/max in ms); ``KafkaStreams.records_lag()``:
the main consumers' records-lag per partition (consumer-fetch-manager-metrics: end offset -
position), on the session broker."""
from __future__ import annotations

import math
import time
from typing import Any

import pytest

from speed_layer import Consumed, Serdes, StreamsBuilder

pytestmark = pytest.mark.broker

N = 3000


def _slow_topology(source: str, sink: str) -> Any:
    def slow(v: Any) -> Any:
        time.sleep(0.001)  # 1 ms a record: the records a poll did not return yet wait
        return v

    b = StreamsBuilder()
    b.stream(source, Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON())).map_values(slow).to(sink)
    return b.build()


def _lags(streams: Any) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for lags in streams.records_lag().values():
        out.update(lags)
    return out


def test_thread_metrics_and_records_lag(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(input=2, output=2)
    # a poll returns at most 500 records and a partition holding more than 5 in its task
    # buffer is paused: the rest is lag (not yet returned by the consumer) until processed
    streams = kit.run(_slow_topology(t["input"], t["output"]), kit.config("app", **{"buffered.records.per.partition": 5}))
    (name, thread), = streams.metrics()["threads"].items()
    assert thread["thread-state"] == "RUNNING" and thread["client-id"].endswith("-StreamThread-1-consumer")
    assert _lags(streams) in ({}, {(t["input"], 0): 0, (t["input"], 1): 0})  # nothing fetched yet, or caught up

    kit.produce(t["input"], [(f"k{i}", {"i": i}, 1_000 + i) for i in range(N)])
    seen = 0
    deadline = time.monotonic() + 30
    while seen == 0 and time.monotonic() < deadline:
        seen = sum(_lags(streams).values())
        time.sleep(0.05)
    assert seen > 0, f"records-lag never rose above 0 while {N} records waited"
    assert streams.wait_until_caught_up(60)
    lags = _lags(streams)
    assert set(lags) == {(t["input"], 0), (t["input"], 1)} and set(lags.values()) == {0}

    m = streams.metrics()
    thread = m["threads"][name]
    assert thread["process-total"] == m["process-total"] == N
    assert sum(c.get("process", 0) for c in thread["tasks"].values()) == N
    assert thread["commit-total"] >= 1 and thread["poll-total"] >= 1
    avg, mx = thread["commit-latency-avg"], thread["commit-latency-max"]
    assert not math.isnan(avg) and 0 < avg <= mx < 60_000, (avg, mx)  # ms
    streams.close(30)
    assert _lags(streams) == {}
