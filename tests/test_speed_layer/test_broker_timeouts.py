"""Kafka's timeout model where the runtime talks to a broker (issue 25).

``PartitionCounts.get`` (the partition count of a topic, looked up on its first send)
retries retriable errors every ``retry.backoff.ms`` until ``task.timeout.ms`` and then
raises ``TaskTimeoutException`` (Kafka's ``AbstractTask#maybeInitTaskTimeoutOrThrow``,
KIP-572: 0 fails at the first error, above 0 at least one retry). ``KafkaStreams.start``
seeds the partition counts of the sink topics named in the topology, so the first send
after a broker restart needs no metadata request; topics named by a topic extractor stay
lazy. The timeout keys are validated under Kafka's names and passed to the clients.
"""
from __future__ import annotations

import socket
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from speed_layer import KafkaStreams, StreamsBuilder, StreamsConfig
from speed_layer.errors import ConfigException, StreamsException, TaskTimeoutException
from speed_layer.runtime.record_collector import PartitionCounts


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
        _metadata(topic, error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE)),
        _metadata(topic, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)),  # metadata propagating
        _metadata(topic, partitions=3),
    )
    counts = PartitionCounts("unused", task_timeout_ms=10_000, retry_backoff_ms=10)
    started = time.monotonic()
    assert counts.get(topic, client) == 3
    assert client.calls == 5
    assert time.monotonic() - started < 2  # 4 backoffs of 10 ms
    assert counts.known(topic) == 3 and counts.get(topic, client) == 3 and client.calls == 5  # cached


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
