"""The parts of ``KafkaStreams`` that need no broker: its state machine (Kafka's
``KafkaStreams.State``), the uncaught exception handler's answer
(``StreamThreadExceptionResponse``), its client configs (``StreamsConfig#get*Configs``)
and the interactive-query store provider (``QueryableStoreProvider``)."""
from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Any

import pytest

from speed_layer.config import StreamsConfig
from speed_layer.errors import InvalidStateStoreException
from speed_layer.runtime import client_configs
from speed_layer.runtime.client_state import TRANSITIONS, ClientState
from speed_layer.runtime.uncaught_exceptions import handler_response
from speed_layer.state.query import QueryableStoreProvider


def test_client_state_moves_only_along_kafkas_transitions_and_tells_the_listener() -> None:
    seen: list[tuple[str, str]] = []
    state = ClientState("app")
    state.listener = lambda new, old: seen.append((new, old))
    assert not state.set("RUNNING")  # CREATED -> RUNNING is not a transition
    assert state.set("REBALANCING") and state.set("RUNNING") and not state.set("RUNNING")
    assert state.set("PENDING_SHUTDOWN") and state.set("NOT_RUNNING")
    assert not any(state.set(s) for s in TRANSITIONS)  # NOT_RUNNING is final
    assert seen == [("REBALANCING", "CREATED"), ("RUNNING", "REBALANCING"), ("PENDING_SHUTDOWN", "RUNNING"),
                    ("NOT_RUNNING", "PENDING_SHUTDOWN")]
    assert state.wait_for(["NOT_RUNNING", "ERROR"], 0.0)


def test_a_failing_listener_does_not_stop_a_transition() -> None:
    state = ClientState("app")
    state.listener = lambda new, old: 1 / 0
    assert state.set("REBALANCING") and state.state == "REBALANCING"
    assert not state.wait_for(["RUNNING"], 0.1)


@pytest.mark.parametrize("threads, expected", [
    (["RUNNING", "RUNNING"], "RUNNING"),
    (["RUNNING", "PARTITIONS_ASSIGNED"], "REBALANCING"),
    (["RUNNING", "DEAD"], "RUNNING"),
    (["DEAD"], "REBALANCING"),
])
def test_the_client_runs_when_every_live_thread_runs(threads: list[str], expected: str) -> None:
    state = ClientState("app")
    state.set("REBALANCING")
    state.threads_changed(lambda: threads)
    assert state.state == expected


class Response(enum.Enum):
    REPLACE_THREAD = 0
    SHUTDOWN_CLIENT = 1


@pytest.mark.parametrize("handler, expected", [
    (None, "SHUTDOWN_CLIENT"),
    (lambda exc: "replace_thread", "REPLACE_THREAD"),
    (lambda exc: Response.REPLACE_THREAD, "REPLACE_THREAD"),
    (lambda exc: "SHUTDOWN_APPLICATION", "SHUTDOWN_APPLICATION"),
    (lambda exc: "RETRY", "SHUTDOWN_CLIENT"),
    (lambda exc: 1 / 0, "SHUTDOWN_CLIENT"),
])
def test_the_handler_answer(handler: Any, expected: str) -> None:
    assert handler_response(handler, RuntimeError("boom")) == expected


def test_client_configs() -> None:
    cfg = StreamsConfig.of({"application.id": "app", "bootstrap.servers": "b:9092", "processing.guarantee": "exactly_once_v2",
                            "application.server": "h:1", "consumer.fetch.min.bytes": 7, "producer.linger.ms": 50,
                            "retry.backoff.ms": 2000})
    consumer = client_configs.consumer_config(cfg, "c")
    assert consumer["client.id"] == "c@h:1" and consumer["isolation.level"] == "read_committed"
    assert "fetch.min.bytes" not in consumer and client_configs.restore_consumer_config(cfg, "r")["fetch.min.bytes"] == 7
    assert (consumer["retry.backoff.ms"], consumer["retry.backoff.max.ms"]) == (2000, 2000)
    producer = client_configs.producer_config(cfg, "p")
    assert producer["linger.ms"] == 50 and producer["transaction.timeout.ms"] == 10_000
    assert client_configs.commit_interval_ms(cfg) == 100
    assert client_configs.offsets_reader_config(cfg)["isolation.level"] == "read_committed"


def test_the_store_provider_reads_open_local_stores_only_while_running() -> None:
    state = "REBALANCING"
    open_store, closed_store = SimpleNamespace(open=True), SimpleNamespace(open=False)
    tasks = [SimpleNamespace(stores={"s": open_store}), SimpleNamespace(stores={"s": closed_store}), SimpleNamespace(stores={})]
    provider = QueryableStoreProvider(lambda: state, lambda: {"g": "global"}, lambda: tasks)
    assert provider("s") == [open_store] and provider("g") == ["global"]
    state = "PENDING_SHUTDOWN"
    with pytest.raises(InvalidStateStoreException, match="State is PENDING_SHUTDOWN"):
        provider("s")
    assert provider.local_stores("s") == [open_store]
