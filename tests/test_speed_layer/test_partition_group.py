"""A task's buffered input (``PartitionGroup``) and its punctuation schedules
(``PunctuationQueue``), without a broker.

The punctuation cases are Kafka's ``PunctuationQueueTest`` (apache/kafka
``streams/src/test/java/org/apache/kafka/streams/processor/internals/PunctuationQueueTest.java``),
ported as data: the times a schedule of interval 100 ms fires at (aligned at 0 and at 50), and
a schedule cancelled from its own punctuator.
"""
from __future__ import annotations

import heapq

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from speed_layer.runtime.partition_group import PartitionGroup, RawRecord
from speed_layer.runtime.punctuation import PunctuationQueue, PunctuationSchedule


def _record(partition: int, offset: int, ts: int) -> RawRecord:
    return RawRecord("in", partition, offset, None, None, ts)


def _group(buffers: dict[int, list[int]]) -> PartitionGroup:
    """Partition p buffers records of timestamps ``buffers[p]`` (offsets 0, 1, ...)."""
    group = PartitionGroup()
    for p, stamps in buffers.items():
        group.add_records([_record(p, o, ts) for o, ts in enumerate(stamps)])
    return group


def test_the_lowest_head_goes_first_and_a_tie_goes_to_the_partition_seen_first() -> None:
    group = _group({0: [5, 30], 1: [10, 20], 2: [5]})
    assert group.buffered() == 5
    assert (group.buffered_in("in", 0), group.buffered_in("in", 1), group.buffered_in("in", 3)) == (2, 2, 0)
    assert group.head_timestamp() == 5
    assert group.buffered_head("in", 1) == 10 and group.buffered_head("in", 3) is None
    order = []
    while (q := group.next_queue()) is not None:
        r = q.popleft()
        order.append((r.partition, r.timestamp))
    assert order == [(0, 5), (2, 5), (1, 10), (1, 20), (0, 30)]
    assert group.head_timestamp() == -1 and group.buffered() == 0


def test_a_run_stops_at_its_bound_and_after_emptying_a_partition() -> None:
    seen: list[int] = []
    group = _group({0: [1, 2, 8], 1: [3, 9]})
    # the bound: nothing after 2 ms
    assert group.process_run(lambda r: seen.append(r.timestamp), 2, 100) == 2
    # the count
    assert group.process_run(lambda r: seen.append(r.timestamp), None, 1) == 1
    # partition 0 empties at 8 ms: the run stops there (KIP-695 may then hold the task)
    assert group.process_run(lambda r: seen.append(r.timestamp), None, 100) == 1
    assert group.process_run(lambda r: seen.append(r.timestamp), None, 100) == 1
    assert seen == [1, 2, 3, 8, 9]
    # one partition: its whole buffer in one run
    group.add_records([_record(0, 3, 20), _record(0, 4, 10)])
    assert group.process_run(lambda r: seen.append(r.timestamp), None, 100) == 2
    assert seen[-2:] == [20, 10]  # a queue is consumed in offset order, whatever the timestamps


_buffers = st.dictionaries(st.integers(0, 3), st.lists(st.integers(0, 50), max_size=8), max_size=4)


@settings(max_examples=200, deadline=None)
@given(_buffers, st.integers(1, 5), st.one_of(st.none(), st.integers(0, 50)))
def test_runs_take_records_in_the_order_of_the_lowest_head(buffers: dict[int, list[int]], size: int,
                                                           bound: int | None) -> None:
    """Whatever the run sizes, the records come in the order a merge by lowest head gives
    (ties to the lower partition, whatever order the partitions were seen in: the same
    order on every run, issue 42), each once, none past the bound."""
    group = _group(buffers)
    taken: list[tuple[int, int]] = []
    while group.process_run(lambda r: taken.append((r.partition, r.offset)), bound, size):
        pass
    heads = [(stamps[0], p, p, 0) for p, stamps in buffers.items() if stamps]
    heapq.heapify(heads)
    expected = []
    while heads:
        ts, rank, p, o = heapq.heappop(heads)
        if bound is not None and ts > bound:
            break
        expected.append((p, o))
        if o + 1 < len(buffers[p]):
            heapq.heappush(heads, (buffers[p][o + 1], p, p, o + 1))
    assert taken == expected


@pytest.mark.parametrize("first_due, steps", [
    # testPunctuationInterval: (time since now = first due - 100, punctuations so far)
    (0, [(0, 0), (99, 0), (100, 1), (199, 1), (200, 2), (1001, 3), (1002, 3), (1100, 4)]),
    # testPunctuationIntervalCustomAlignment: first due 50, now = 0
    (50, [(0, 0), (49, 0), (50, 1), (149, 1), (150, 2), (1051, 3), (1052, 3), (1150, 4)]),
])
def test_punctuation_interval(first_due: int, steps: list[tuple[int, int]]) -> None:
    """``PunctuationQueueTest``: interval 100 ms; ``mayPunctuate`` at each time, and how
    many times the punctuator ran by then."""
    fired: list[int] = []
    queue = PunctuationQueue()
    queue.schedule("p", 100, first_due, fired.append)

    def run(schedule: PunctuationSchedule, now: int) -> None:
        schedule.fn(now)

    now = first_due - (100 if first_due == 0 else 50)
    for offset, count in steps:
        queue.may_punctuate(now + offset, run)
        assert len(fired) == count, (offset, fired)


def test_a_schedule_cancelled_by_its_punctuator_does_not_fire_again() -> None:
    """``PunctuationQueueTest#testPunctuationIntervalCancelFromPunctuator``."""
    fired: list[int] = []
    queue = PunctuationQueue()
    schedule = queue.schedule("p", 100, 0, fired.append)

    def run(s: PunctuationSchedule, now: int) -> None:
        s.fn(now)
        schedule.cancel()

    for offset, count in [(0, 0), (100, 1), (200, 1), (1001, 1)]:
        queue.may_punctuate(-100 + offset, run)
        assert len(fired) == count, (offset, fired)
    assert schedule.cancelled and queue.schedules == [] and not queue.due(10_000)
