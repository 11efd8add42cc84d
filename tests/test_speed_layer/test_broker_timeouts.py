"""Kafka's timeout model where the runtime talks to a broker (issue 25).

``PartitionCounts.get`` (the partition count of a topic, looked up on its first send)
retries retriable errors every ``retry.backoff.ms`` until ``task.timeout.ms`` and then
raises ``TaskTimeoutException`` (Kafka's ``AbstractTask#maybeInitTaskTimeoutOrThrow``,
KIP-572: 0 fails at the first error, above 0 at least one retry). ``KafkaStreams.start``
seeds the partition counts of the sink topics named in the topology, so the first send
after a broker restart needs no metadata request; topics named by a topic extractor stay
lazy. The timeout keys are validated under Kafka's names and passed to the clients.

The other broker calls of the runtime follow the same model through one helper
(``speed_layer.runtime.task_timeout.retry_broker_call``): ``KafkaStreams.start``'s metadata
of the topology's topics and its creation of the internal topics (``ensure_topics``), the
global stores' bootstrap (partitions and end offsets: Kafka's
``GlobalStateManagerImpl#retryUntilSuccessOrThrowOnTaskTimeout``), the end offsets of a
changelog to restore (``StoreChangelogReader`` -> ``maybeInitTaskTimeoutOrThrow``) and of a
standby task's changelogs. In ``start()`` the timeout fails ``start()`` naming the call; on a
stream thread (or the standby updater) it goes to the uncaught exception handler.
"""
from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from speed_layer import KafkaStreams, StreamsBuilder, StreamsConfig
from speed_layer.errors import ConfigException, StreamsException, TaskTimeoutException
from speed_layer.admin import TopicSpec, ensure_topics
from speed_layer.runtime.global_state import GlobalStateUpdater
from speed_layer.runtime.record_collector import PartitionCounts
from speed_layer.runtime.restore import ChangelogRestorer, StateDirectory
from speed_layer.runtime.standby import StandbyUpdater
from speed_layer.runtime.task_timeout import TaskTimeout


def _closed_port() -> str:
    """``127.0.0.1:<port>`` where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class _Counting:
    """Forwards ``list_topics`` to ``client``, counting the calls."""

    def __init__(self, client: Any) -> None:
        self.client, self.calls = client, 0

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.client.list_topics(*args, **kwargs)


def _metadata(topic: str, partitions: int = 0, error: KafkaError | None = None) -> Any:
    t = SimpleNamespace(error=error, partitions={p: object() for p in range(partitions)})
    return SimpleNamespace(topics={topic: t})


class _Scripted:
    """A metadata client answering from a script: exceptions are raised, the rest returned."""

    def __init__(self, *answers: Any) -> None:
        self.answers, self.calls = list(answers), 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.calls += 1
        a = self.answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return a


# -------------------------------------------------------------- the user's reproduction
def test_unreachable_broker_raises_the_task_timeout_after_task_timeout_ms() -> None:
    addr = _closed_port()
    client = _Counting(Producer({"bootstrap.servers": addr, "log_level": 0}))
    started = time.monotonic()
    with pytest.raises(TaskTimeoutException, match=r"task\.timeout\.ms") as info:
        PartitionCounts(addr, task_timeout_ms=2000).get("out", client, timeout_s=10)
    elapsed = time.monotonic() - started
    assert 1.9 <= elapsed < 5, elapsed
    assert client.calls >= 2  # at least one retry
    assert isinstance(info.value.__cause__, KafkaException)  # the broker error is the cause, not raised raw


def test_task_timeout_zero_fails_at_the_first_error() -> None:
    addr = _closed_port()
    client = _Counting(Producer({"bootstrap.servers": addr, "log_level": 0}))
    started = time.monotonic()
    with pytest.raises(TaskTimeoutException):
        PartitionCounts(addr, task_timeout_ms=0).get("out", client, timeout_s=1)
    assert time.monotonic() - started < 1.5
    assert client.calls == 1


# -------------------------------------------------------------- retries (scripted metadata)
def test_a_broker_back_within_the_timeout_answers_after_retries() -> None:
    topic = "out"
    client = _Scripted(
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        KafkaException(KafkaError(KafkaError._TIMED_OUT)),
        # a request that waited in librdkafka's queue past its timeout (the process was
        # stopped, issue 42's contention harness): a timeout as the others
        KafkaException(KafkaError(KafkaError._TIMED_OUT_QUEUE)),
        _metadata(topic, error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE)),
        _metadata(topic, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)),  # metadata propagating
        _metadata(topic, partitions=3),
    )
    counts = PartitionCounts("unused", task_timeout_ms=10_000, retry_backoff_ms=10)
    started = time.monotonic()
    assert counts.get(topic, client) == 3
    assert client.calls == 6
    assert time.monotonic() - started < 2  # 5 backoffs of 10 ms
    assert counts.known(topic) == 3 and counts.get(topic, client) == 3 and client.calls == 6  # cached


def test_retries_wait_retry_backoff_ms() -> None:
    client = _Scripted(*[KafkaException(KafkaError(KafkaError._TRANSPORT))] * 3, _metadata("t", partitions=1))
    started = time.monotonic()
    assert PartitionCounts("unused", task_timeout_ms=10_000, retry_backoff_ms=200).get("t", client) == 1
    assert time.monotonic() - started >= 0.55


def test_a_missing_topic_times_out_as_a_task_timeout() -> None:
    client = _Scripted(*[_metadata("t", error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))] * 100)
    with pytest.raises(TaskTimeoutException, match="UNKNOWN_TOPIC_OR_PART"):
        PartitionCounts("unused", task_timeout_ms=300, retry_backoff_ms=50).get("t", client)
    assert 2 <= client.calls < 100


def test_a_non_retriable_error_is_raised_at_once() -> None:
    client = _Scripted(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), _metadata("t", partitions=1))
    with pytest.raises(StreamsException) as info:
        PartitionCounts("unused", task_timeout_ms=10_000).get("t", client)
    assert not isinstance(info.value, TaskTimeoutException)
    assert client.calls == 1


# -------------------------------------------------------------- config keys
def test_timeout_keys_have_kafkas_defaults() -> None:
    cfg = StreamsConfig.of({"bootstrap.servers": "x:1"})
    assert (cfg.task_timeout_ms, cfg.retry_backoff_ms, cfg.max_block_ms, cfg.request_timeout_ms) == (300_000, 100, 60_000, None)
    cfg = StreamsConfig.of({"task.timeout.ms": 0, "retry.backoff.ms": 250, "max.block.ms": 5000, "request.timeout.ms": 20_000})
    assert (cfg.task_timeout_ms, cfg.retry_backoff_ms, cfg.max_block_ms, cfg.request_timeout_ms) == (0, 250, 5000, 20_000)


@pytest.mark.parametrize("key,value", [("task.timeout.ms", -1), ("retry.backoff.ms", -5), ("max.block.ms", "soon"),
                                       ("request.timeout.ms", 0)])
def test_bad_timeout_values_fail_naming_the_key(key: str, value: Any) -> None:
    topology = StreamsBuilder()
    topology.stream("in").to("out")
    with pytest.raises(ConfigException, match=key.replace(".", r"\.")):
        KafkaStreams(topology.build(), {"bootstrap.servers": "x:1", key: value})


def test_timeouts_reach_the_clients_and_the_partition_counts() -> None:
    b = StreamsBuilder()
    b.stream("in").to("out")
    s = KafkaStreams(b.build(), {"bootstrap.servers": "x:1", "task.timeout.ms": 1234, "retry.backoff.ms": 2000,
                                 "max.block.ms": 777, "request.timeout.ms": 15_000})
    p = s.producer_config("p")
    c = s.consumer_config("c")
    assert p["request.timeout.ms"] == 15_000
    assert p["retry.backoff.ms"] == c["retry.backoff.ms"] == 2000
    assert p["retry.backoff.max.ms"] == c["retry.backoff.max.ms"] == 2000  # librdkafka's bound raised with it
    assert (s.partition_counts.task_timeout_ms, s.partition_counts.retry_backoff_ms, s.partition_counts.max_block_ms) == (1234, 2000, 777)
    default = KafkaStreams(b.build(), {"bootstrap.servers": "x:1"})
    assert "request.timeout.ms" not in default.producer_config("p")
    assert default.producer_config("p")["retry.backoff.ms"] == 100
    Producer(p)  # librdkafka accepts them


# -------------------------------------------------------------- start-up seeding (real broker)
@pytest.mark.broker
def test_sink_partition_counts_are_seeded_at_start_up(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(src=2, out=3, routed=4)
    b = StreamsBuilder()
    s = b.stream(t["src"])
    s.to(t["out"])
    s.to(lambda k, v, ctx: t["routed"])  # a topic extractor: looked up on its first send
    streams = kit.streams(b.build(), kit.config("app"))
    streams.start()
    try:
        # before any record was processed: the static sink is known, the routed one not
        assert streams.partition_counts.known(t["out"]) == 3
        assert streams.partition_counts.known(t["routed"]) is None
        kit.produce(t["src"], [("k1", 1, 1000), ("k2", 2, 1001)])
        assert streams.wait_until_caught_up(60), streams.errors
        deadline = time.monotonic() + 30
        while len(kit.read(t["routed"])) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert streams.partition_counts.known(t["routed"]) == 4
        assert len(kit.read(t["out"])) == 2
    finally:
        streams.close(30)


# -------------------------------------------------------------- the other broker calls (issue 25, item 3)
#: at least two attempts: "(2 attempt(s)", "(13 attempt(s)"...
RETRIED = r"\((?:[2-9]|\d{2,}) attempt\(s\)"


def _global_topology(topic: str = "table") -> Any:
    b = StreamsBuilder()
    b.global_table(topic)
    b.stream("in").to("out")
    return b.build()


def _global_updater(bootstrap: str, tmp: Path, topic: str, task_timeout_ms: int) -> GlobalStateUpdater:
    cfg = StreamsConfig.of({"application.id": "global-timeouts", "bootstrap.servers": bootstrap,
                            "task.timeout.ms": task_timeout_ms, "retry.backoff.ms": 50})
    return GlobalStateUpdater(_global_topology(topic), cfg, StateDirectory(tmp, "global-timeouts"),
                              {"bootstrap.servers": bootstrap, "log_level": 0}, lambda: None, lambda exc: None)  # type: ignore[arg-type,return-value]


def test_start_of_a_global_store_topology_with_an_unreachable_broker_fails_after_task_timeout_ms(tmp_path: Path) -> None:
    streams = KafkaStreams(_global_topology(), {"application.id": "unreachable", "bootstrap.servers": _closed_port(),
                                                "state.dir": str(tmp_path), "task.timeout.ms": 2000})
    started = time.monotonic()
    with pytest.raises(TaskTimeoutException, match=r"KafkaStreams\.start") as info:
        streams.start()
    elapsed = time.monotonic() - started
    assert 1.9 <= elapsed < 8, elapsed
    assert re.search(r"task\.timeout\.ms` \(2000\)", str(info.value)) and re.search(RETRIED, str(info.value)), info.value
    assert isinstance(info.value.__cause__, KafkaException)
    assert streams.state == "ERROR"


def test_start_with_task_timeout_zero_fails_at_the_first_error(tmp_path: Path) -> None:
    streams = KafkaStreams(_global_topology(), {"application.id": "unreachable", "bootstrap.servers": _closed_port(),
                                                "state.dir": str(tmp_path), "task.timeout.ms": 0})
    started = time.monotonic()
    with pytest.raises(TaskTimeoutException, match=r"\(1 attempt\(s\).*retrying is disabled.*task\.timeout\.ms"):
        streams.start()
    assert time.monotonic() - started < 2


def test_global_store_bootstrap_retries_until_task_timeout_ms(tmp_path: Path) -> None:
    updater = _global_updater(_closed_port(), tmp_path, "table", 2000)
    started = time.monotonic()
    try:
        with pytest.raises(TaskTimeoutException, match=r"global topic table \(global store bootstrap\)") as info:
            updater.bootstrap()
    finally:
        updater.shutdown(5)
    assert 1.9 <= time.monotonic() - started < 8
    assert re.search(RETRIED, str(info.value)) and "task.timeout.ms" in str(info.value)


def test_restore_watermarks_retry_until_task_timeout_ms() -> None:
    restorer = ChangelogRestorer({"bootstrap.servers": _closed_port(), "log_level": 0}, TaskTimeout(2000, 50, 60_000))
    started = time.monotonic()
    try:
        with pytest.raises(TaskTimeoutException, match=r"watermarks of app-store-changelog-3 \(restore\)") as info:
            restorer.watermarks("app-store-changelog", 3)
    finally:
        restorer.close()
    assert 1.9 <= time.monotonic() - started < 8
    assert re.search(RETRIED, str(info.value))


class _ScriptedOffsets:
    """A ``ListOffsets`` answering ``watermarks`` from a script (exceptions raised)."""

    def __init__(self, *answers: Any) -> None:
        self.answers, self.calls = list(answers), 0

    def watermarks(self, topic: str, partition: int, request_s: float) -> Any:
        self.calls += 1
        a = self.answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return a


def test_standby_watermarks_retry_retriable_errors() -> None:
    consumer = _ScriptedOffsets(KafkaException(KafkaError(KafkaError._TRANSPORT)),
                                KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)), (0, 7))
    standby = SimpleNamespace(config=StreamsConfig.of({"task.timeout.ms": 10_000, "retry.backoff.ms": 10}),
                              _changelogs=lambda task_id: {"store": ("app-store-changelog", 1)})
    assert StandbyUpdater._watermarks(standby, "0_1", consumer) == {("app-store-changelog", 1): (0, 7)}  # type: ignore[arg-type]
    assert consumer.calls == 3
    failing = _ScriptedOffsets(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    with pytest.raises(StreamsException, match=r"standby task 0_1.*TOPIC_AUTHORIZATION_FAILED") as info:
        StandbyUpdater._watermarks(standby, "0_1", failing)  # type: ignore[arg-type]
    assert not isinstance(info.value, TaskTimeoutException) and failing.calls == 1


def test_creating_topics_with_an_unreachable_broker_times_out() -> None:
    started = time.monotonic()
    with pytest.raises(TaskTimeoutException, match=r"creating topics \['t1'\]") as info:
        ensure_topics(_closed_port(), [TopicSpec("t1", 1)], timeouts=TaskTimeout(2000, 50, 60_000))
    assert 1.9 <= time.monotonic() - started < 8
    assert re.search(RETRIED, str(info.value))


# -------------------------------------------------------------- slow-to-appear topics (real broker)
def _create_later(bootstrap: str, topic: str, delay_s: float) -> threading.Thread:
    def create() -> None:
        time.sleep(delay_s)
        ensure_topics(bootstrap, [TopicSpec(topic, 2)])
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce(topic, key=b"k", value=b'"v"', partition=1)
        p.flush(10)

    t = threading.Thread(target=create, daemon=True)
    t.start()
    return t


@pytest.mark.broker
def test_a_global_topic_appearing_within_task_timeout_ms_is_bootstrapped(kafka_bootstrap: str, unique_name: str,
                                                                         tmp_path: Path) -> None:
    topic = f"{unique_name}-table"
    creator = _create_later(kafka_bootstrap, topic, 1.5)
    updater = _global_updater(kafka_bootstrap, tmp_path, topic, 15_000)
    started = time.monotonic()
    try:
        updater.bootstrap()  # Kafka: partitionsFor times out while the topic is missing: retried
        assert updater.bootstrapped.is_set()
        assert time.monotonic() - started >= 1.4
    finally:
        creator.join(10)
        updater.shutdown(5)


@pytest.mark.broker
def test_restore_watermarks_of_a_changelog_appearing_within_task_timeout_ms(kafka_bootstrap: str, unique_name: str) -> None:
    topic = f"{unique_name}-changelog"
    creator = _create_later(kafka_bootstrap, topic, 1.0)
    restorer = ChangelogRestorer({"bootstrap.servers": kafka_bootstrap}, TaskTimeout(15_000, 50, 60_000))
    try:
        lo, hi = restorer.watermarks(topic, 1)
        assert lo == 0 and hi in (0, 1)
    finally:
        creator.join(10)
        restorer.close()
