"""The stream thread's readiness rules without a broker (``speed_layer/runtime/readiness.py``):
KIP-695 per task and per thread (Kafka's ``PartitionGroup#readyToProcess``; the cases of
Kafka's ``PartitionGroupTest#shouldWaitForPollWhenLagIsNonzero`` /
``shouldIdleAsSpecifiedWhenLagIsZero`` / ``shouldNeverWaitIfIdlingIsDisabled``, with
end-of-partition standing for a known lag of zero), and duet's wait for repartition
records on their way back (own partitions and siblings), with the horizon that lets a task
process a run of records under the same rules."""
from __future__ import annotations

from collections import deque

import pytest

from speed_layer.runtime.readiness import UNKNOWN_LAG_WAIT_S, Readiness

TP = tuple[str, int]
SRC, REP = "src", "app-rep-repartition"


class FakeTask:
    """Buffers of timestamps per input partition."""

    def __init__(self, task_id: str, buffers: dict[TP, list[int]], feeds_itself: bool = False) -> None:
        self.task_id = task_id
        self.queues = {tp: deque(ts) for tp, ts in buffers.items()}
        self.feeds_itself = feeds_itself

    def buffered(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def buffered_in(self, topic: str, partition: int) -> int:
        return len(self.queues.get((topic, partition), ()))

    def buffered_head(self, topic: str, partition: int) -> int | None:
        q = self.queues.get((topic, partition))
        return q[0] if q else None

    def head_timestamp(self) -> int:
        heads = [q[0] for q in self.queues.values() if q]
        return min(heads) if heads else -1

    def may_send_to_own_sources(self) -> bool:
        return self.feeds_itself


class Kit:
    """A Readiness over fake tasks, a fake collector (pending sends per partition) and the
    partitions the thread holds records for."""

    def __init__(self, tasks: list[FakeTask], idle_ms: int = 0, eos: bool = False,
                 lags: dict[TP, int | None] | None = None, backlog: "FakeEnds | None" = None) -> None:
        self.tasks = {t.task_id: t for t in tasks}
        self.task_tps = {t.task_id: sorted(t.queues) for t in tasks}
        self.tp_task = {tp: t for t in tasks for tp in t.queues}
        self.pending: dict[TP, int] = {}
        self.acked_on_serve: set[TP] = set()
        self.served = 0
        self.held: set[TP] = set()
        self.enforced: list[str] = []
        #: the consumer's known lag per partition (None: no fetch answered); no dict: no consumer
        self.lags = lags
        #: the consumer's positions (past transaction markers), for the backlog's known ends
        self.positions: dict[TP, int] = {}
        self.r = Readiness(idle_ms, eos, self.task_tps, self.tp_task, self._pending, self._serve,
                           lambda tp: tp not in self.held, lag=None if lags is None else self.lags.get, backlog=backlog,
                           position=lambda tp: self.positions.get(tp))
        self.r.on_enforced = self.enforced.append
        for tp in self.tp_task:
            self.r.add_partition(tp, tp[0] == REP)

    def _pending(self, tp: TP, consumed_next: int) -> int | None:
        return self.pending.get(tp)

    def _serve(self) -> None:
        self.served += 1
        for tp in self.acked_on_serve:
            self.pending.pop(tp, None)

    def at_end(self, *tps: TP) -> None:
        for tp in tps:
            self.r.eof[tp] = True


def test_a_task_with_nothing_buffered_is_not_ready() -> None:
    kit = Kit([FakeTask("0_0", {(SRC, 0): []})])
    kit.at_end((SRC, 0))
    assert not kit.r.ready(kit.tasks["0_0"], 0.0)


def test_an_empty_partition_without_end_of_partition_holds_the_task_for_the_unknown_lag_wait() -> None:
    # Kafka: shouldWaitForPollWhenLagIsNonzero (lag unknown until the fetch answers)
    task = FakeTask("0_0", {(SRC, 0): [5], ("other", 0): []})
    kit = Kit([task])
    kit.at_end((SRC, 0))
    assert not kit.r.ready(task, 100.0)
    assert not kit.r.ready(task, 100.0 + UNKNOWN_LAG_WAIT_S / 2)
    assert kit.enforced == []
    assert kit.r.ready(task, 100.0 + UNKNOWN_LAG_WAIT_S)  # enforced processing
    assert kit.enforced == ["0_0"]


def test_an_empty_partition_at_its_end_does_not_hold_the_task_with_max_task_idle_0() -> None:
    task = FakeTask("0_0", {(SRC, 0): [5], ("other", 0): []})
    kit = Kit([task])
    kit.at_end((SRC, 0), ("other", 0))
    assert kit.r.ready(task, 0.0)


def test_max_task_idle_ms_waits_that_long_for_an_empty_partition_at_its_end() -> None:
    # Kafka: shouldIdleAsSpecifiedWhenLagIsZero
    task = FakeTask("0_0", {(SRC, 0): [5], ("other", 0): []})
    kit = Kit([task], idle_ms=2_000)
    kit.at_end((SRC, 0), ("other", 0))
    assert not kit.r.ready(task, 10.0)
    assert not kit.r.ready(task, 11.9)
    assert kit.r.ready(task, 12.0)


def test_a_partition_that_stays_empty_is_waited_for_once_not_after_every_record() -> None:
    # Kafka: shouldIdleAsSpecifiedWhenLagIsZero (readyToProcess false at 0, true at 1 and
    # again at 2: the deadline is the partition's, kept while it stays empty), and
    # PartitionGroup#readyToProcess dropping the deadline once the partition buffers a record
    task = FakeTask("0_0", {(SRC, 0): [5, 6, 7], ("table", 0): []})
    kit = Kit([task], idle_ms=1_000)
    kit.at_end((SRC, 0), ("table", 0))
    assert not kit.r.ready(task, 10.0)
    assert kit.r.ready(task, 11.0)  # the deadline passed: enforced processing
    assert kit.enforced == ["0_0"]
    task.queues[(SRC, 0)].popleft()
    kit.r.processed("0_0")
    assert kit.r.ready(task, 11.001)  # still empty, still past its deadline: no second wait
    assert kit.enforced == ["0_0", "0_0"]  # each processing past a deadline counts (Kafka's sensor)
    task.queues[("table", 0)].append(1)  # the partition buffers a record: its deadline is dropped
    assert kit.r.ready(task, 12.0)
    task.queues[("table", 0)].popleft()
    assert not kit.r.ready(task, 13.0)  # empty again at its end: a new wait
    assert kit.r.ready(task, 14.0)


def test_max_task_idle_minus_1_never_waits() -> None:
    # Kafka: shouldNeverWaitIfIdlingIsDisabled
    task = FakeTask("0_0", {(SRC, 0): [5], ("other", 0): []})
    kit = Kit([task], idle_ms=-1)
    assert kit.r.ready(task, 0.0)
    assert kit.r.thread_ready(0.0)


def test_a_send_on_its_way_back_to_an_empty_own_partition_holds_the_task_while_not_newer_than_its_head() -> None:
    task = FakeTask("1_0", {(REP, 0): [], (SRC, 0): [100, 150]})
    kit = Kit([task])
    kit.at_end((REP, 0), (SRC, 0))
    kit.pending[(REP, 0)] = 100
    assert not kit.r.ready(task, 0.0)  # pending <= head
    kit.pending[(REP, 0)] = 101
    assert kit.r.ready(task, 0.0)
    assert kit.r.horizon(task) == 100  # the record at 150 would be held back
    del kit.pending[(REP, 0)]
    assert kit.r.horizon(task) is None


def test_a_sibling_partition_with_an_older_record_queued_or_on_its_way_holds_the_task() -> None:
    a = FakeTask("1_0", {(REP, 0): [50, 90]})
    b = FakeTask("1_1", {(REP, 1): [60]})
    kit = Kit([a, b])
    kit.at_end((REP, 0), (REP, 1))
    assert kit.r.ready(a, 0.0)
    assert kit.r.horizon(a) == 60  # b's head: a may go on up to it
    assert not kit.r.ready(b, 0.0)  # a holds an older record (50 < 60)
    b2 = FakeTask("1_1", {(REP, 1): []})
    kit = Kit([a, b2])
    kit.at_end((REP, 0), (REP, 1))
    kit.pending[(REP, 1)] = 40  # an older record on its way to the sibling
    assert not kit.r.ready(a, 0.0)
    assert kit.served == 1  # delivery reports served before deciding
    kit.acked_on_serve.add((REP, 1))  # its report says it was consumed back meanwhile
    assert kit.r.ready(a, 1.0)
    assert kit.r.horizon(a) is None


@pytest.mark.parametrize("eos", [False, True])
def test_max_task_idle_ms_waits_for_an_empty_sibling_at_its_end_fed_by_another_process(eos: bool) -> None:
    # the sibling's records come from another instance (nothing of this thread's is on its
    # way): its next one may be older than the task's head
    a = FakeTask("1_0", {(REP, 0): [100, 110]})
    b = FakeTask("1_1", {(REP, 1): []})
    kit = Kit([a, b], idle_ms=500, eos=eos)
    kit.at_end((REP, 0), (REP, 1))
    assert not kit.r.ready(a, 10.0)
    assert not kit.r.ready(a, 10.4)
    assert kit.r.ready(a, 10.5)  # the sibling's deadline passed
    a.queues[(REP, 0)].popleft()
    assert kit.r.ready(a, 10.6)  # it stays passed while the sibling stays empty
    b.queues[(REP, 1)].append(105)  # the sibling buffers a record: its deadline is dropped
    assert kit.r.ready(b, 11.0)
    b.queues[(REP, 1)].popleft()
    assert not kit.r.ready(a, 11.1)  # empty at its end again: a new wait
    assert kit.r.ready(a, 11.6)


def test_an_empty_sibling_at_its_end_does_not_hold_the_task_with_max_task_idle_0() -> None:
    a = FakeTask("1_0", {(REP, 0): [100]})
    b = FakeTask("1_1", {(REP, 1): []})
    kit = Kit([a, b])
    kit.at_end((REP, 0), (REP, 1))
    assert kit.r.ready(a, 0.0)


def test_exactly_once_neither_waits_for_round_trips_nor_bounds_runs() -> None:
    a = FakeTask("1_0", {(REP, 0): [50]})
    b = FakeTask("1_1", {(REP, 1): []})
    kit = Kit([a, b], eos=True)
    kit.at_end((REP, 0), (REP, 1))
    kit.pending[(REP, 1)] = 10
    assert kit.r.ready(a, 0.0)
    assert kit.r.horizon(a) is None


def test_a_task_that_may_feed_its_own_sources_runs_one_record_at_a_time() -> None:
    a = FakeTask("1_0", {(REP, 0): [50, 70]}, feeds_itself=True)
    kit = Kit([a])
    kit.at_end((REP, 0))
    assert kit.r.horizon(a) == 50


def test_the_thread_waits_for_an_empty_partition_not_at_its_end_with_nothing_held() -> None:
    a = FakeTask("0_0", {(SRC, 0): [5]})
    b = FakeTask("0_1", {(SRC, 1): []})
    kit = Kit([a, b])
    kit.at_end((SRC, 0))
    assert not kit.r.thread_ready(10.0)
    assert kit.r.thread_ready(10.0 + UNKNOWN_LAG_WAIT_S)
    kit.held.add((SRC, 1))  # its held records are refilled, not waited for (test_held_records_order.py)
    assert kit.r.thread_ready(20.0)
    kit.held.clear()
    kit.at_end((SRC, 1))
    assert kit.r.thread_ready(20.0)


@pytest.mark.parametrize("buffers, at_end, expected", [
    ({(SRC, 0): []}, [(SRC, 0)], True),
    ({(SRC, 0): []}, [], False),
    ({(SRC, 0): [1]}, [(SRC, 0)], False),
])
def test_caught_up(buffers: dict[TP, list[int]], at_end: list[TP], expected: bool) -> None:
    kit = Kit([FakeTask("0_0", buffers)])
    kit.at_end(*at_end)
    assert kit.r.caught_up() is expected


def test_a_closed_task_is_forgotten() -> None:
    a = FakeTask("1_0", {(REP, 0): [50]})
    b = FakeTask("1_1", {(REP, 1): [10]})
    kit = Kit([a, b])
    kit.at_end((REP, 0), (REP, 1))
    assert not kit.r.ready(a, 0.0)  # b's older head
    kit.r.remove_task("1_1", [(REP, 1)])
    del kit.task_tps["1_1"], kit.tp_task[(REP, 1)]
    assert kit.r.ready(a, 0.0)
    assert (REP, 1) not in kit.r.tracked and (REP, 1) not in kit.r.eof


# -- with the consumer's lag known (at-least-once): Kafka's waits, never enforced on the clock
LONG_AFTER = 100.0 + 1000 * UNKNOWN_LAG_WAIT_S


@pytest.mark.parametrize("lag", [None, 3])
def test_a_partition_with_data_on_the_broker_or_no_fetch_answer_holds_task_and_thread_without_deadline(lag: int | None) -> None:
    # Kafka's PartitionGroupTest#shouldWaitForPollWhenLagIsNonzero and
    # shouldWaitForFetchesWhenMetadataIsIncomplete: no enforced processing, however long;
    # issue 42: a thread released after 17 s on a not yet fetched clicks-0 ran the orders
    # of a backlog a month ahead of the clicks and a stream-stream join lost matches
    orders = FakeTask("1_0", {("orders", 0): [5, 6, 7]})
    clicks = FakeTask("0_0", {(SRC, 0): [], ("other", 0): [1]})
    kit = Kit([orders, clicks], lags={(SRC, 0): lag, ("orders", 0): 3, ("other", 0): 1})
    for now in (100.0, 100.0 + UNKNOWN_LAG_WAIT_S, LONG_AFTER):
        assert not kit.r.ready(clicks, now)
        assert not kit.r.thread_ready(now)  # the orders' task does not run ahead either
    assert kit.enforced == []
    kit.lags[(SRC, 0)] = 0  # fetched to the high watermark: its end, with or without the event
    assert kit.r.ready(clicks, LONG_AFTER)
    assert kit.r.thread_ready(LONG_AFTER)
    assert kit.enforced == []


def test_the_known_lag_rules_leave_max_task_idle_ms_and_round_trips_as_they_are() -> None:
    task = FakeTask("0_0", {(SRC, 0): [5], (REP, 0): []})
    kit = Kit([task], idle_ms=2000, lags={(SRC, 0): 1, (REP, 0): 0})
    kit.at_end((SRC, 0))
    assert not kit.r.ready(task, 10.0)  # lag 0: at its end, waited for max.task.idle.ms
    assert kit.r.ready(task, 12.0)
    kit2 = Kit([FakeTask("0_0", {(SRC, 0): [5], (REP, 0): []})], lags={(SRC, 0): 1, (REP, 0): 0})
    kit2.at_end((SRC, 0))
    kit2.pending[(REP, 0)] = 4
    t2 = kit2.tasks["0_0"]
    assert not kit2.r.ready(t2, 10.0)  # on its way back: the round-trip wait
    del kit2.pending[(REP, 0)]
    assert kit2.r.ready(t2, 10.0)


def test_exactly_once_ignores_the_lag_and_keeps_the_unknown_lag_deadline() -> None:
    # read_committed: transaction markers keep the high watermark beyond the last record
    task = FakeTask("0_0", {(SRC, 0): [5], ("other", 0): []})
    kit = Kit([task], eos=True, lags={(SRC, 0): 1, ("other", 0): 1})
    kit.at_end((SRC, 0))
    assert not kit.r.ready(task, 100.0)
    assert kit.r.ready(task, 100.0 + UNKNOWN_LAG_WAIT_S)


# -- a backlog's known ends (backlog.inputs.complete): no clock decides a wait
class FakeEnds:
    """Known ends: ``final`` per partition once known, of the ``covered`` topics."""

    def __init__(self, covered: set[str]) -> None:
        self.covered = covered
        self.final: dict[TP, int] = {}

    def covers(self, topic: str) -> bool:
        return topic in self.covered

    def final_end(self, tp: TP) -> int | None:
        return self.final.get(tp)


def test_with_known_ends_an_empty_repartition_partition_holds_its_task_until_its_writers_are_done() -> None:
    # issue 42: max.task.idle.ms on a partition another instance feeds ended on the clock
    # under load, and the task ran past records that instance had not sent yet
    task = FakeTask("3_0", {(REP, 0): [], (SRC, 0): [100]})
    ends = FakeEnds({REP, SRC})
    kit = Kit([task], idle_ms=1000, lags={(REP, 0): 0, (SRC, 0): 0}, backlog=ends)
    kit.at_end((REP, 0), (SRC, 0))
    kit.r.fetched_next[(REP, 0)] = 7
    for now in (0.0, 1.0, LONG_AFTER):
        assert not kit.r.ready(task, now) and kit.r.idling  # the thread runs its other tasks meanwhile
    assert kit.enforced == []
    ends.final[(REP, 0)] = 9  # the writers are done: two records not fetched yet
    assert not kit.r.ready(task, LONG_AFTER) and not kit.r.idling  # the records are on the broker
    kit.r.fetched_next[(REP, 0)] = 9  # consumed to its end: empty for good
    assert kit.r.ready(task, LONG_AFTER)
    assert kit.enforced == []
    ends.final[(SRC, 0)] = 3  # a user topic whose last offset is a transaction marker
    task.queues[(SRC, 0)].clear()
    task.queues[(REP, 0)].append(120)
    kit.r.fetched_next[(SRC, 0)] = 2
    assert not kit.r.ready(task, LONG_AFTER)
    kit.positions[(SRC, 0)] = 3  # the consumer's position is past it
    assert kit.r.ready(task, LONG_AFTER)


def test_with_known_ends_an_empty_sibling_holds_the_task_until_its_end_is_known_and_reached() -> None:
    a = FakeTask("1_0", {(REP, 0): [100, 110]})
    b = FakeTask("1_1", {(REP, 1): []})
    ends = FakeEnds({REP})
    kit = Kit([a, b], idle_ms=500, lags={(REP, 0): 0, (REP, 1): 0}, backlog=ends)
    kit.at_end((REP, 0), (REP, 1))
    for now in (10.0, 10.5, LONG_AFTER):
        assert not kit.r.ready(a, now) and kit.r.idling
    ends.final[(REP, 0)], ends.final[(REP, 1)] = 2, 4
    assert not kit.r.ready(a, LONG_AFTER)  # the sibling's records are on the broker
    kit.r.fetched_next[(REP, 1)] = 4
    assert kit.r.ready(a, LONG_AFTER)
    ends.final[(REP, 1)] = 0  # a partition that never held a record
    del kit.r.fetched_next[(REP, 1)]
    assert kit.r.ready(a, LONG_AFTER)
    assert kit.enforced == []


def test_a_topic_the_known_ends_do_not_cover_keeps_the_max_task_idle_ms_deadline() -> None:
    # a foreign-key join's response topic: its writers wait for this task's subscriptions
    a = FakeTask("1_0", {(REP, 0): [100]})
    b = FakeTask("1_1", {(REP, 1): []})
    kit = Kit([a, b], idle_ms=500, lags={(REP, 0): 0, (REP, 1): 0}, backlog=FakeEnds({SRC}))
    kit.at_end((REP, 0), (REP, 1))
    assert not kit.r.ready(a, 10.0)
    assert kit.r.ready(a, 10.5)


@pytest.mark.parametrize("idle_ms, eos", [(0, False), (500, True)])
def test_known_ends_change_nothing_without_max_task_idle_ms_or_under_exactly_once(idle_ms: int, eos: bool) -> None:
    # one instance (max.task.idle.ms 0) keeps its rules; exactly-once keeps its deadlines
    a = FakeTask("1_0", {(REP, 0): [100]})
    b = FakeTask("1_1", {(REP, 1): []})
    kit = Kit([a, b], idle_ms=idle_ms, eos=eos, lags={(REP, 0): 0, (REP, 1): 0}, backlog=FakeEnds({REP}))
    kit.at_end((REP, 0), (REP, 1))
    assert kit.r.backlog is None
    assert kit.r.ready(a, 10.0) is (idle_ms == 0)
    assert kit.r.ready(a, 10.0 + idle_ms / 1000)  # the deadline, as without them


def test_with_known_ends_a_sibling_s_older_record_held_by_an_empty_partition_holds_the_task_on_no_clock() -> None:
    # issue 42 (the watchdog's "task 1_0 waited 5.1 s ... an older record of a sibling
    # repartition partition"): 1_1 buffers an older record and waits for 1_2's empty
    # partition, which another instance feeds; 1_0 waited for 1_1 on UNKNOWN_LAG_WAIT_S
    a = FakeTask("1_0", {(REP, 0): [100]})
    b = FakeTask("1_1", {(REP, 1): [60]})
    c = FakeTask("1_2", {(REP, 2): []})
    ends = FakeEnds({REP})
    kit = Kit([a, b, c], idle_ms=1000, lags={(REP, p): 0 for p in range(3)}, backlog=ends)
    kit.at_end((REP, 0), (REP, 1), (REP, 2))
    for now in (0.0, UNKNOWN_LAG_WAIT_S, LONG_AFTER):
        assert not kit.r.ready(b, now) and kit.r.idling
        assert not kit.r.ready(a, now) and kit.r.idling
    assert kit.enforced == []
    ends.final.update({(REP, 0): 1, (REP, 1): 1, (REP, 2): 0})
    kit.r.fetched_next.update({(REP, 0): 1, (REP, 1): 1})
    assert kit.r.ready(b, LONG_AFTER)
    assert not kit.r.ready(a, LONG_AFTER)  # b's older record first (the sibling rule)
    b.queues[(REP, 1)].popleft()
    assert kit.r.ready(a, LONG_AFTER)
    assert kit.enforced == []
