"""``StreamsRebalanceListener`` without a broker: the plan, task manager, offsets, committer
and consumer are stand-ins recording the calls; the broker-backed behaviour (tasks moving
between threads and instances) is in ``test_runtime_restart.py`` and
``test_standby_replicas.py``."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from speed_layer.errors import StreamsException
from speed_layer.runtime.rebalance_listener import StreamsRebalanceListener


class Plan:
    """Lead topic ``lead`` (2 partitions) of sub-topology 0, which also reads ``side``."""

    def task_of_lead(self, topic: str, partition: int) -> str | None:
        return f"0_{partition}" if topic == "lead" else None

    def task_partitions(self, task_id: str) -> list[tuple[str, int]]:
        p = int(task_id.split("_")[1])
        return [("lead", p), ("side", p)]


class Consumer:
    def __init__(self, fail_unassign: bool = False) -> None:
        self.assigned: list[TopicPartition] = []
        self.unassigned: list[TopicPartition] = []
        self.fail_unassign = fail_unassign

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.assigned += tps

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        if self.fail_unassign:
            raise KafkaException(KafkaError(KafkaError._STATE, "unassign failed"))
        self.unassigned += tps


def _listener(fail_close: bool = False) -> tuple[StreamsRebalanceListener, list[Any]]:
    calls: list[Any] = []
    tasks: dict[str, object] = {}

    def create_tasks(tps: list[tuple[str, int]], committed: dict[tuple[str, int], int]) -> None:
        calls.append(("create", tps, committed))
        for t, p in tps:
            tasks[f"0_{p}"] = object()

    def close_tasks(ids: list[str], clean: bool) -> None:
        calls.append(("close", ids, clean))
        if fail_close and clean:
            raise StreamsException("commit failed")

    offsets = SimpleNamespace(offsets=lambda tps: {("lead", 1): 7},
                              start_positions=lambda tps, committed: [TopicPartition(t, p, committed.get((t, p), -2)) for t, p in tps])
    listener = StreamsRebalanceListener(
        "t1", Plan(), SimpleNamespace(tasks=tasks, create_tasks=create_tasks), offsets,  # type: ignore[arg-type]
        SimpleNamespace(restart_interval=lambda: calls.append("restart")),  # type: ignore[arg-type]
        set_state=lambda s: calls.append(s), close_tasks=close_tasks, standby_refresh=lambda: calls.append("refresh"))
    return listener, calls


def test_an_assignment_fetches_every_partition_of_the_tasks_and_creates_them() -> None:
    listener, calls = _listener()
    consumer = Consumer()
    listener.on_assign(consumer, [TopicPartition("lead", 1)])  # type: ignore[arg-type]
    assert [(tp.topic, tp.partition, tp.offset) for tp in consumer.assigned] == [("lead", 1, 7), ("side", 1, -2)]
    assert calls == ["PARTITIONS_ASSIGNED", ("create", [("lead", 1), ("side", 1)], {("lead", 1): 7}), "restart",
                     "RUNNING", "refresh"]
    listener.raise_error()  # nothing kept


def test_an_assignment_error_is_raised_by_the_loop_once() -> None:
    listener, _ = _listener()
    listener.on_assign(Consumer(), [TopicPartition("other", 0)])  # type: ignore[arg-type]
    with pytest.raises(StreamsException, match="no sub-topology's lead topic"):
        listener.raise_error()
    listener.raise_error()


def test_a_revocation_that_fails_to_commit_closes_dirty_and_still_unassigns() -> None:
    listener, calls = _listener(fail_close=True)
    consumer = Consumer()
    listener.on_assign(consumer, [TopicPartition("lead", 0)])  # type: ignore[arg-type]
    listener.on_revoke(consumer, [TopicPartition("lead", 0)])  # type: ignore[arg-type]
    assert calls[-3:] == ["PARTITIONS_REVOKED", ("close", ["0_0"], True), ("close", ["0_0"], False)]
    assert [(tp.topic, tp.partition) for tp in consumer.unassigned] == [("lead", 0), ("side", 0)]
    with pytest.raises(StreamsException, match="commit failed"):
        listener.raise_error()


def test_lost_partitions_close_dirty_and_an_unassign_error_is_kept() -> None:
    listener, calls = _listener()
    listener.on_assign(Consumer(), [TopicPartition("lead", 0)])  # type: ignore[arg-type]
    listener.on_lost(Consumer(fail_unassign=True), [TopicPartition("lead", 0)])  # type: ignore[arg-type]
    assert calls[-1] == ("close", ["0_0"], False)
    with pytest.raises(KafkaException):
        listener.raise_error()
