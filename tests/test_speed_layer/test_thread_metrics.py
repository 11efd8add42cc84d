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


def test_store_property_metrics_reach_metrics_and_prometheus(runtime_kit: Any) -> None:
    """KIP-607's RocksDB property metrics of each task's stores: in
    ``metrics()["threads"][t]["stores"]`` (read by the thread every 5 s) and as Prometheus
    gauges labelled by thread, task and store."""
    from prometheus_client import CollectorRegistry, generate_latest

    from speed_layer import Materialized, TimeWindows
    from speed_layer.runtime.prometheus import KafkaStreamsCollector

    kit = runtime_kit
    t = kit.topics(input=2, output=2)
    b = StreamsBuilder()
    (b.stream(t["input"], Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON()))
     .group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(60_000)).count(Materialized.as_("counts"))
     .to_stream().map(lambda k, v: (k.key, v)).to(t["output"]))
    streams = kit.run(b.build(), kit.config("stores"))
    kit.produce(t["input"], [(f"k{i % 50}", {"i": i}, 1_000 + i * 1_000) for i in range(500)])
    assert streams.wait_until_caught_up(60)
    deadline = time.monotonic() + 20
    stores: dict[str, Any] = {}
    while time.monotonic() < deadline:
        (thread,) = streams.metrics()["threads"].values()
        stores = thread["stores"]
        if sum(s.get("counts", {}).get("estimate-num-keys", 0) for s in stores.values()) > 0:
            break
        time.sleep(0.5)
    assert set(stores) == {"0_0", "1_0"} or set(stores) == {"0_0", "0_1"}, stores
    counts = [s["counts"] for s in stores.values()]
    assert sum(c["estimate-num-keys"] for c in counts) > 0
    assert set(counts[0]) == {"estimate-num-keys", "size-all-mem-tables", "total-sst-files-size", "estimate-live-data-size"}
    assert sum(c["size-all-mem-tables"] for c in counts) > 0  # bytes of the memtables holding the windows

    registry = CollectorRegistry()
    registry.register(KafkaStreamsCollector(streams))
    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if line.startswith("kafka_streams_stream_state_estimate_num_keys{")]
    assert any('rocksdb_state_id="counts"' in line and not line.endswith(" 0.0") for line in lines), lines
    assert "kafka_streams_stream_state_size_all_mem_tables{" in text
    streams.close(30)
