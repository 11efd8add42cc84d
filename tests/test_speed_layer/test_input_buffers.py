"""``InputBuffers`` bookkeeping on the client's own ``confluent_kafka.Message`` objects: every
consumed record reaches its task buffer once, in offset order, whatever the interleaving of
partitions in a consumed batch; the held bytes always equal the keys and values held; a
partition is paused once ``held_bytes_limit`` bytes are held and resumed when its buffer has
room again (the stream thread's flow control; the broker tests are in
test_runtime_flow_control.py)."""
from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from speed_layer.runtime import input_buffers
from speed_layer.runtime.input_buffers import InputBuffers

TOPIC = "in"


class _Task:
    """The two calls InputBuffers makes of a StreamTask: its partition queues."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, int], deque[Any]] = {}

    def queue(self, topic: str, partition: int) -> deque[Any]:
        return self.queues.setdefault((topic, partition), deque())

    def buffered_in(self, topic: str, partition: int) -> int:
        return len(self.queues.get((topic, partition), ()))


class _Readiness:
    def __init__(self) -> None:
        self.eof: dict[Any, bool] = {}
        self.fetched_next: dict[Any, int] = {}


class _Consumer:
    def __init__(self) -> None:
        self.paused: set[tuple[str, int]] = set()

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in tps)

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in tps)


def _size(key: bytes | None, value: bytes | None) -> int:
    return len(key or b"") + len(value or b"")


_payload = st.one_of(st.none(), st.binary(max_size=12))
# a consumed batch: (partition, key, value) per message; processing steps take records out
_batch = st.lists(st.tuples(st.integers(0, 2), _payload, _payload), max_size=30)
_steps = st.lists(st.tuples(_batch, st.integers(0, 25)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(steps=_steps, limit=st.integers(1, 8), held_limit=st.integers(1, 60))
def test_every_record_reaches_its_buffer_once_in_order(steps: list[Any], limit: int, held_limit: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(input_buffers, "HELD_BYTES_PER_PARTITION", held_limit)
        mp.setattr(input_buffers, "HELD_BYTES_PER_THREAD", 0)
        _check_buffers(steps, limit, held_limit)


def _check_buffers(steps: list[Any], limit: int, held_limit: int) -> None:
    task = _Task()
    tp_task = {(TOPIC, p): task for p in range(3)}
    buffers = InputBuffers(tp_task, _Readiness(), limit, "test")  # type: ignore[arg-type]
    consumer = _Consumer()
    next_offset = [0, 0, 0]
    sent: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {0: [], 1: [], 2: []}
    taken: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {0: [], 1: [], 2: []}
    for batch, take in steps:
        msgs = []
        for p, key, value in batch:
            if (TOPIC, p) in consumer.paused:
                continue  # a paused partition is not fetched
            msgs.append(Message(topic=TOPIC, partition=p, offset=next_offset[p], key=key, value=value, timestamp=(1, next_offset[p])))
            sent[p].append((next_offset[p], key, value))
            next_offset[p] += 1
        buffers.add(msgs)
        buffers.pause_resume(consumer)  # type: ignore[arg-type]
        for tp, held in buffers.held.items():
            assert buffers.held_bytes[tp] == sum(_size(r.key, r.value) for r in held)
            assert task.buffered_in(*tp) == limit  # records are held only behind a full buffer
            if buffers.held_bytes[tp] >= held_limit:
                assert tp in consumer.paused
        for tp in consumer.paused:
            assert tp in buffers.held or task.buffered_in(*tp) >= limit
        for p in range(3):  # the task processes up to `take` records of each partition
            q = task.queue(TOPIC, p)
            for _ in range(min(take, len(q))):
                r = q.popleft()
                taken[p].append((r.offset, r.key, r.value))
    while buffers.any_held() or any(task.queues.values()):
        buffers.pause_resume(consumer)  # type: ignore[arg-type]
        for p in range(3):
            q = task.queue(TOPIC, p)
            while q:
                r = q.popleft()
                taken[p].append((r.offset, r.key, r.value))
    buffers.pause_resume(consumer)  # type: ignore[arg-type]
    assert taken == sent
    assert not consumer.paused and not buffers.held and not buffers.held_bytes


def test_a_batch_beyond_the_limit_is_held_and_pauses_at_the_held_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_PARTITION", 10)
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_THREAD", 0)
    task = _Task()
    buffers = InputBuffers({(TOPIC, 0): task, (TOPIC, 1): task}, _Readiness(), 2, "test")  # type: ignore[arg-type]
    consumer = _Consumer()
    msgs = [Message(topic=TOPIC, partition=p, offset=o, key=b"k", value=b"vvvv", timestamp=(1, o)) for p, o in
            [(0, 0), (0, 1), (0, 2), (1, 0), (0, 3), (0, 4)]]
    buffers.add(msgs)
    assert [r.offset for r in task.queue(TOPIC, 0)] == [0, 1]
    assert [r.offset for r in buffers.held[(TOPIC, 0)]] == [2, 3, 4]
    assert buffers.held_bytes[(TOPIC, 0)] == 15
    assert [r.offset for r in task.queue(TOPIC, 1)] == [0]
    buffers.pause_resume(consumer)  # type: ignore[arg-type]
    assert consumer.paused == {(TOPIC, 0)}
    task.queue(TOPIC, 0).clear()
    buffers.pause_resume(consumer)  # room for two: offsets 2 and 3 move, 4 stays held
    assert [r.offset for r in task.queue(TOPIC, 0)] == [2, 3]
    assert buffers.held_bytes[(TOPIC, 0)] == 5 and consumer.paused == {(TOPIC, 0)}
    task.queue(TOPIC, 0).clear()
    buffers.pause_resume(consumer)  # type: ignore[arg-type]
    assert not buffers.held and consumer.paused == set()
    assert buffers.readiness.fetched_next == {(TOPIC, 0): 5, (TOPIC, 1): 1}


def test_the_threads_budget_raises_the_pause_threshold_of_few_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition is paused at ``HELD_BYTES_PER_PARTITION`` (Java's one fetch) or at its
    share of ``HELD_BYTES_PER_THREAD``, whichever is more."""
    mib = 1_048_576
    assert input_buffers.held_bytes_limit(4) == 4 * mib
    assert input_buffers.held_bytes_limit(1) == 16 * mib
    assert input_buffers.held_bytes_limit(0) == 16 * mib
    assert input_buffers.held_bytes_limit(64) == mib
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_PARTITION", 10)
    monkeypatch.setattr(input_buffers, "HELD_BYTES_PER_THREAD", 40)
    task = _Task()
    buffers = InputBuffers({(TOPIC, 0): task, (TOPIC, 1): task}, _Readiness(), 1, "test")  # type: ignore[arg-type]
    consumer = _Consumer()
    # 5 bytes per record; the buffer takes one, so 3 records = 15 bytes are held: under
    # the share of 40 / 2 partitions = 20
    buffers.add([Message(topic=TOPIC, partition=0, offset=o, key=b"k", value=b"vvvv", timestamp=(1, o)) for o in range(4)])
    buffers.pause_resume(consumer)  # type: ignore[arg-type]
    assert buffers.held_bytes[(TOPIC, 0)] == 15 and not consumer.paused
    buffers.add([Message(topic=TOPIC, partition=0, offset=4, key=b"k", value=b"vvvv", timestamp=(1, 4))])
    buffers.pause_resume(consumer)  # type: ignore[arg-type]
    assert buffers.held_bytes[(TOPIC, 0)] == 20 and consumer.paused == {(TOPIC, 0)}
