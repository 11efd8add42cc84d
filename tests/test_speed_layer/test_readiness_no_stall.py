"""No wait of the readiness rules holds a thread idle when nothing can arrive (broker-free,
fake tasks as in ``test_readiness.py``).

The stall (issue 25: flights with null keys never caught up): a late record re-keyed
into a repartition topic is on its way to partition 1, behind the records that partition's
task already buffers. The task of partition 0 waited for it (a sibling's older record on its
way), while the task of partition 1 waited for partition 0's older head: each wait ended
only in enforced processing after ``UNKNOWN_LAG_WAIT_S``, and every run of records began
the next one. The record on its way comes after partition 1's buffered head, which is not
older than partition 0's head: it is late downstream whatever partition 0 does, so it is
not waited for. The ordering the sibling rule exists for (a sibling's older record
processed first) is kept, and so is the watchdog's warning when a wait for data has to be
enforced."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from speed_layer.runtime import readiness as readiness_module
from speed_layer.runtime.readiness import UNKNOWN_LAG_WAIT_S
from speed_layer.runtime.task_executor import TaskExecutor

sys.path.insert(0, str(Path(__file__).parent))
from test_readiness import REP, SRC, FakeTask, Kit  # noqa: E402
from test_task_executor import FakeTask as ProcessingTask  # noqa: E402


def test_a_late_record_behind_a_siblings_buffer_does_not_hold_the_task() -> None:
    a = FakeTask("1_0", {(REP, 0): [100, 300]})
    b = FakeTask("1_1", {(REP, 1): [200, 400]})
    kit = Kit([a, b])
    kit.at_end((REP, 0), (REP, 1))
    kit.pending[(REP, 1)] = 50  # late, sent to partition 1 after what b buffers
    assert not kit.r.ready(b, 0.0)  # a's older head first (100 < 200): the ordering is kept
    assert kit.r.ready(a, 0.0)  # was held for UNKNOWN_LAG_WAIT_S: b waited for a, a for b
    assert kit.enforced == []
    assert kit.r.horizon(a) == 200  # up to b's head, not below the late record


def test_a_siblings_older_record_on_its_way_to_its_empty_partition_still_holds_the_task() -> None:
    a = FakeTask("1_0", {(REP, 0): [100]})
    b = FakeTask("1_1", {(REP, 1): []})
    kit = Kit([a, b])
    kit.at_end((REP, 0), (REP, 1))
    kit.pending[(REP, 1)] = 50  # the next record of partition 1: b processes it first
    assert not kit.r.ready(a, 0.0)
    assert kit.r.horizon(a) == 50


def test_two_tasks_with_a_late_record_on_its_way_behind_a_buffer_run_without_waiting() -> None:
    """The executor processes every buffered record in one loop, in timestamp order across
    the two tasks (before the fix: nothing, until UNKNOWN_LAG_WAIT_S had passed)."""
    log: list[tuple[str, int]] = []
    a = ProcessingTask("1_0", {(REP, 0): [100, 300, 500]}, log)
    b = ProcessingTask("1_1", {(REP, 1): [200, 400, 600]}, log)
    tasks = [a, b]
    task_tps = {t.task_id: sorted(t.queues) for t in tasks}
    tp_task = {tp: t for t in tasks for tp in t.queues}
    pending = {(REP, 1): 50}
    r = readiness_module.Readiness(0, False, task_tps, tp_task, lambda tp, nxt: pending.get(tp), lambda: None,
                                   lambda tp: True)
    for tp in tp_task:
        r.add_partition(tp, True)
        r.eof[tp] = True
    ex = TaskExecutor({t.task_id: t for t in tasks}, task_tps, r, lambda: None, clock=lambda: 0.0)  # type: ignore[arg-type]
    assert ex.process() == 6
    assert [ts for _, ts in log] == [100, 200, 300, 400, 500, 600]


def test_the_watchdog_names_the_task_the_rule_and_the_partition_of_an_enforced_wait_for_data(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    task = FakeTask("0_0", {(SRC, 0): [5], ("other", 3): []})
    kit = Kit([task])
    kit.at_end((SRC, 0))
    clock = [1000.0]
    monkeypatch.setattr(readiness_module.time, "monotonic", lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="speed_layer.thread"):
        assert not kit.r.ready(task, 100.0)
        assert kit.r.ready(task, 100.0 + UNKNOWN_LAG_WAIT_S)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "task 0_0" in warnings[0] and "other-3" in warnings[0] and "end was not seen" in warnings[0]
        # rate-limited: the next enforced waits within WATCHDOG_LOG_EVERY_S are counted, not logged
        kit.r.processed("0_0")
        assert not kit.r.ready(task, 200.0)
        assert kit.r.ready(task, 200.0 + UNKNOWN_LAG_WAIT_S)
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
        clock[0] += readiness_module.WATCHDOG_LOG_EVERY_S
        kit.r.processed("0_0")
        assert not kit.r.ready(task, 300.0)
        assert kit.r.ready(task, 300.0 + UNKNOWN_LAG_WAIT_S)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2 and "1 other such wait" in warnings[1]


def test_the_watchdog_does_not_log_a_max_task_idle_wait_at_the_end_of_a_partition(caplog: pytest.LogCaptureFixture) -> None:
    task = FakeTask("0_0", {(SRC, 0): [5], ("other", 0): []})
    kit = Kit([task], idle_ms=2_000)
    kit.at_end((SRC, 0), ("other", 0))
    with caplog.at_level(logging.WARNING, logger="speed_layer.thread"):
        assert not kit.r.ready(task, 10.0)
        assert kit.r.ready(task, 12.0)
    assert kit.enforced == ["0_0"]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_the_watchdog_logs_the_threads_enforced_wait_once_per_wait(caplog: pytest.LogCaptureFixture) -> None:
    a = FakeTask("0_0", {(SRC, 0): [5]})
    b = FakeTask("0_1", {(SRC, 1): []})
    kit = Kit([a, b])
    kit.at_end((SRC, 0))
    with caplog.at_level(logging.WARNING, logger="speed_layer.thread"):
        assert not kit.r.thread_ready(10.0)
        assert kit.r.thread_ready(10.0 + UNKNOWN_LAG_WAIT_S)
        assert kit.r.thread_ready(11.0 + UNKNOWN_LAG_WAIT_S)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the thread" in warnings[0] and f"{SRC}-1" in warnings[0]


def test_internal_topic_names_as_kafkas_streams_resetter() -> None:
    """Kafka's ``StreamsResetter#matchesInternalTopicFormat`` (``StreamsResetterTest``):
    changelogs, repartition topics and the foreign-key join's subscription topics are
    internal; the FK topics end in ``-topic``, which a ``-changelog``/``-repartition`` test
    missed (a reset, or ``duet run``'s clean-up of earlier runs, left them behind)."""
    from speed_layer.runtime.internal_topics import matches_internal_topic_format

    app = "duet-shop-run-1"
    for name in (f"{app}-orders-store-changelog", f"{app}-conversions-left-repartition",
                 f"{app}-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000027-topic",
                 f"{app}-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000035-topic",
                 f"{app}-my-fk-subscription-registration-topic", f"{app}-my-fk-subscription-response-topic"):
        assert matches_internal_topic_format(name), name
    for name in ("orders", f"{app}-orders", f"{app}-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-topic"):
        assert not matches_internal_topic_format(name), name


def test_a_task_held_until_its_writers_are_done_lets_the_thread_run_them_and_nothing_past_its_input() -> None:
    """With a backlog's known ends (``backlog.inputs.complete``) a task whose repartition
    partition is empty holds without deadline: the thread runs its other tasks (here the
    writer of that partition, whose heads are later), never the held task's sibling past a
    record the empty partition may still get, and the held task once its end is known."""
    from test_readiness import FakeEnds

    log: list[tuple[str, int]] = []
    up = ProcessingTask("0_0", {(SRC, 0): [300, 400]}, log)
    d0 = ProcessingTask("1_0", {(REP, 0): [100, 200]}, log)
    d1 = ProcessingTask("1_1", {(REP, 1): []}, log)
    tasks = [d0, d1, up]
    task_tps = {t.task_id: sorted(t.queues) for t in tasks}
    tp_task = {tp: t for t in tasks for tp in t.queues}
    ends = FakeEnds({SRC, REP})
    ends.final[(SRC, 0)] = 2
    r = readiness_module.Readiness(1000, False, task_tps, tp_task, lambda tp, nxt: None, lambda: None,
                                   lambda tp: True, lag=lambda tp: 0, backlog=ends, position=lambda tp: None)
    enforced: list[str] = []
    r.on_enforced = enforced.append
    for tp in tp_task:
        r.add_partition(tp, tp[0] == REP)
        r.eof[tp] = True
    now = [0.0]
    ex = TaskExecutor({t.task_id: t for t in tasks}, task_tps, r, lambda: None, clock=lambda: now[0])  # type: ignore[arg-type]
    for now[0] in (0.0, 10.0, 1000.0):
        ex.process()
    assert log == [("0_0", 300), ("0_0", 400)]  # 1_0 waits for 1_1's partition, on no clock
    ends.final[(REP, 0)], ends.final[(REP, 1)] = 2, 0  # its writers done: 1_1 never gets a record
    r.fetched_next[(REP, 0)] = 2
    assert ex.process() == 2
    assert log[2:] == [("1_0", 100), ("1_0", 200)]
    assert enforced == []
