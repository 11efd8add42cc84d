"""One application scaled 1 -> 3 -> 2 instances under load (exactly_once_v2, one standby
replica), each instance serving interactive queries at its ``application.server``: the
tasks split without overlap, every task gets a standby on another instance, every instance
answers every key the same (asking the owner when the key is elsewhere), and the counts are
exact after the scale-down.

As Kafka Streams' ``KafkaStreams#queryMetadataForKey`` / ``metadataForAllStreamsClients`` and
its interactive-query RPC examples."""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import timedelta
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from speed_layer import Consumed, KafkaStreams, Materialized, Serdes, StreamsBuilder, TimeWindows
from speed_layer.admin import TopicSpec, ensure_topics

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]

PARTITIONS = 6
KEYS = [f"user-{i}" for i in range(60)]
HOUR = 3_600_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Instance:
    """A KafkaStreams instance with its interactive-query endpoint (uvicorn in a thread)."""

    def __init__(self, topology: Any, app_id: str, bootstrap: str, state_dir: Path, **extra: Any) -> None:
        import uvicorn
        from fastapi import FastAPI

        from serving.api.interactive import interactive_router

        self.port = _free_port()
        self.server = f"127.0.0.1:{self.port}"
        self.streams = KafkaStreams(topology, {"application.id": app_id, "bootstrap.servers": bootstrap,
                                               "state.dir": str(state_dir), "application.server": self.server,
                                               "commit.interval.ms": 100, "session.timeout.ms": 6000, **extra})
        app = FastAPI()
        app.include_router(interactive_router(self.streams))
        self.uvicorn = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)

    def start(self) -> None:
        self.streams.start()
        self.thread.start()

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.streams.close()
        self.thread.join(timeout=10)

    def get(self, store: str, key: str) -> dict[str, Any]:
        res = httpx.get(f"http://{self.server}/speed/stores/{store}/keys/{key}", timeout=30)
        assert res.status_code == 200, (self.server, key, res.status_code, res.text)
        return dict(res.json())


@pytest.fixture
def topology_and_input(kafka_bootstrap: str, unique_name: str) -> tuple[Any, str]:
    topic = f"{unique_name}-clicks"
    ensure_topics(kafka_bootstrap, [TopicSpec(topic, PARTITIONS, {"retention.ms": "-1"})])
    b = StreamsBuilder()
    clicks = b.stream(topic, Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON()))
    grouped = clicks.group_by_key()
    grouped.count(Materialized.as_("clicks"))
    # retention 1 day: by default a window store keeps size + grace only (Kafka's default)
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(HOUR)).count(
        Materialized.as_("clicks_hourly").with_retention(timedelta(days=1)))
    return b.build(), topic


def _produce(bootstrap: str, topic: str, rounds: int, first_round: int = 0, pause_s: float = 0.0) -> Counter[str]:
    # murmur2, as the Java producer and Kafka Streams (librdkafka defaults to CRC32)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    counts: Counter[str] = Counter()
    for r in range(first_round, first_round + rounds):
        for i, key in enumerate(KEYS):
            if (i + r) % 3:
                producer.produce(topic, key=key.encode(), value=json.dumps({"r": r}).encode(),
                                 timestamp=1_356_998_400_000 + r * 60_000)  # a minute per round, in order
                counts[key] += 1
        producer.poll(0)
        time.sleep(pause_s)
    assert producer.flush(30) == 0
    return counts


class Load(threading.Thread):
    """Produces rounds of records until stopped (the load while instances come and go)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.counts: Counter[str] = Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        r = 100
        while not self.stopping.is_set():
            self.counts += _produce(self.bootstrap, self.topic, rounds=5, first_round=r, pause_s=0.05)
            r += 5

    def stop(self) -> Counter[str]:
        self.stopping.set()
        self.join(60)
        return self.counts


def _wait_stable(instances: list[Instance], timeout_s: float = 120, standbys: bool = False) -> None:
    """Until every instance is RUNNING and the group's assignment names all of them and
    every task (and, with ``standbys``, every task has a standby on another instance)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(i.streams.state == "RUNNING" for i in instances):
            metadata = instances[0].streams.streams_metadata()
            hosts = {str(m.host_info) for m in metadata if m.topic_partitions}
            # cooperative rebalancing moves a task in two rounds: it is unowned in between
            if hosts == {i.server for i in instances} and sum(len(m.topic_partitions) for m in metadata) == PARTITIONS:
                placed = [t for i in instances for t in i.streams.standby_tasks()]
                if not standbys or sorted(placed) == [f"0_{p}" for p in range(PARTITIONS)]:
                    if all(i.streams.wait_until_caught_up(timeout_s=60) for i in instances):
                        return
        time.sleep(0.5)
    pytest.fail("the instances did not settle: " + repr([(i.server, i.streams.state, i.streams.local_thread_metadata(),
                                                           i.streams.standby_tasks()) for i in instances]))


def _answers(instances: list[Instance], counts: Counter[str]) -> dict[str, set[str]]:
    """Ask every instance for every key; return the hosts that answered each key."""
    answered: dict[str, set[str]] = {}
    for key in KEYS:
        answers = [inst.get("clicks", key) for inst in instances]
        assert {a["value"] for a in answers} == {counts.get(key)}, (key, answers)
        assert len({a["host"] for a in answers}) == 1  # the owner answered, whoever was asked
        hourly = [inst.get("clicks_hourly", key)["windows"] for inst in instances]
        assert all(h == hourly[0] for h in hourly) and sum(w["value"] for w in hourly[0]) == counts.get(key, 0)
        answered[key] = {a["host"] for a in answers}
    return answered


def test_scale_1_3_2_under_load(topology_and_input: tuple[Any, str], kafka_bootstrap: str,
                                unique_name: str, tmp_path: Path) -> None:
    topology, topic = topology_and_input
    counts = _produce(kafka_bootstrap, topic, rounds=6)
    extra = {"processing.guarantee": "exactly_once_v2", "num.standby.replicas": 1}
    instances = [Instance(topology, f"{unique_name}-app", kafka_bootstrap, tmp_path / f"state-{i}", **extra) for i in range(3)]
    load = Load(kafka_bootstrap, topic)
    try:
        instances[0].start()
        _wait_stable(instances[:1])
        load.start()
        for inst in instances[1:]:  # 1 -> 3 under load
            inst.start()
        _wait_stable(instances, standbys=True)
        metadata = instances[1].streams.streams_metadata()
        assert {str(m.host_info) for m in metadata} == {i.server for i in instances}
        owned = [m.topic_partitions for m in metadata]
        assert sum(len(p) for p in owned) == PARTITIONS and all(owned)  # split, none twice
        assert all({"clicks", "clicks_hourly"} <= m.state_store_names for m in metadata)
        for inst in instances:  # a standby never sits with its active task
            assert not set(inst.streams.standby_tasks()) & {x for th in inst.streams.local_thread_metadata() for x in th["active_tasks"]}
        for key in KEYS[:10]:
            md = instances[0].streams.query_metadata_for_key("clicks", key)
            assert md.available and len(md.standby_hosts) == 1 and md.active_host not in md.standby_hosts
        # 3 -> 2 under load: the two left take over the third's tasks
        instances.pop().stop()
        _wait_stable(instances, standbys=True)
        counts += load.stop()
        for inst in instances:
            assert inst.streams.wait_until_caught_up(timeout_s=60)
        answered = _answers(instances, counts)  # exact: every record counted once
        owners = Counter(next(iter(h)) for h in answered.values())
        assert set(owners) == {i.server for i in instances}  # the keys are spread over both
        # a key's owner as query_metadata_for_key says, on every instance
        for key in KEYS[:10]:
            hosts = {str(i.streams.query_metadata_for_key("clicks", key).active_host) for i in instances}
            assert hosts == answered[key]
    finally:
        load.stopping.set()
        for inst in instances:
            inst.stop()
