"""Which of a stream thread's tasks may process their next record now (Kafka's
``PartitionGroup#readyToProcess``, KIP-695, applied per task and to the whole thread, plus
duet's wait for repartition records on their way back). No Kafka client here: the thread
feeds it what its consumer reported (end of partition, fetched positions) and the
collector's pending sends, so the rules are unit-tested with fake tasks
(``tests/test_speed_layer/test_readiness.py``).

The rules, all times in ms unless named ``_s``:

* **KIP-695 per task.** An empty input partition holds its task back while data may be on
  the broker: no end-of-partition seen since its last record, and for ``max.task.idle.ms``
  once it is caught up (0: not at all; -1: never wait), counted from the first time it is
  seen empty at its end until it buffers a record again (Kafka's
  ``idlePartitionDeadlines``: a partition that stays empty is waited for once). With the
  consumer's fetch positions known (``lag``, at-least-once), a partition whose lag is
  unknown (no fetch answered yet) or above 0 holds the task and the thread for as long as
  it takes, as Kafka's ``PartitionGroup#readyToProcess``; a lag of 0 counts as its end. So
  load cannot make one partition of a backlog run ahead of another whose records are on
  the broker (issue 42: a thread released after 17 s on a not yet fetched ``clicks-0``
  ran the orders ahead of the clicks, and a stream-stream join lost their matches).
  Without a known lag (exactly-once, whose transaction markers keep the high watermark
  beyond the last record) the wait is at most ``UNKNOWN_LAG_WAIT_S``.
* **Repartition round trips (at-least-once).** A task is also held back while a record
  this thread sent to one of its empty repartition partitions, with a timestamp ``<=`` its
  head, is on its way back; or while a sibling partition (the same repartition topic,
  owned by another of the thread's tasks) holds, or has on its way, a record older than
  its head (as old: its task first in :func:`.upstream.task_order`); or while such a
  partition, its own or a sibling's, has neither and an upstream task of the thread still
  has input (its next record may be older than the head: :mod:`.upstream`). Processing
  the task first would advance the stream time of everything downstream of both past that
  record and make it late there. Exactly-once skips these (its sends are invisible until
  the transaction commits). A record on its way to a sibling partition that still buffers
  records is not waited for (:meth:`Readiness._sibling_pending`).
* **Siblings from another process.** With ``max.task.idle.ms`` > 0, a task also waits, up
  to that partition's deadline, while a sibling partition is empty at its end: its next
  record may come from another process (an instance running the stage upstream) and be
  older than the task's head. duet's extension of KIP-695 to the tasks of one repartition
  topic, for instances that run different stages of one application on a backlog.
* **Known ends of a backlog** (``backlog``, the streams config ``backlog.inputs.complete``,
  :mod:`.backlog_ends`; at-least-once, ``max.task.idle.ms`` > 0). The two waits above for
  an empty partition at its end (the task's own, a sibling's) use no deadline when the
  backlog covers its topic: the partition holds the task (as ``max.task.idle.ms``: the
  thread runs its other tasks meanwhile) until its end is known, that is until every
  sub-topology writing it has committed its whole input, and then only until that end is
  fetched. So no clock decides which records another process' output makes late (issue
  42: two loaded instances dropped 21,167-47,731 window updates as late, not 122). Topics
  the backlog does not cover (written by a cycle of sub-topologies, or downstream of one)
  keep the deadline: a wait without one there could wait for itself.
* **The thread.** No task processes while an assigned partition has nothing buffered or
  held and has not reached its end (its lag unknown or above 0 when known, else at most
  ``UNKNOWN_LAG_WAIT_S``): a replayed backlog keeps its tasks at the same event time. A
  paused partition is no exception; records the thread holds for a partition are moved
  into its buffer as soon as it runs dry (``refill``), so a task never runs past them.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Mapping, Protocol

from .upstream import task_order

__all__ = ["BufferedTask", "Readiness", "UNKNOWN_LAG_WAIT_S", "WATCHDOG_LOG_EVERY_S"]

log = logging.getLogger("speed_layer.thread")

TP = tuple[str, int]
#: how long a task waits for a partition whose lag is unknown (no record, no end-of-partition yet), s
UNKNOWN_LAG_WAIT_S = 5.0
#: the watchdog logs an enforced wait for data at most once per this many seconds per thread
WATCHDOG_LOG_EVERY_S = 60.0
#: what a backlog's known ends say of an empty partition (:meth:`Readiness._backlog_state`)
UNCOVERED, CONSUMED, FETCH, WRITERS = range(4)
#: the rules, as the watchdog names them
RULE_UNKNOWN_LAG = "an empty partition whose end was not seen"
RULE_ON_ITS_WAY = "a record on its way back to an empty repartition partition"
RULE_SIBLING = "an older record of a sibling repartition partition"


class BufferedTask(Protocol):
    """What readiness reads of a task (``StreamTask`` implements it)."""

    task_id: str

    def buffered(self) -> int: ...

    def buffered_in(self, topic: str, partition: int) -> int: ...

    def buffered_head(self, topic: str, partition: int) -> int | None: ...

    def head_timestamp(self) -> int: ...

    def may_send_to_own_sources(self) -> bool: ...


class KnownEnds(Protocol):
    """What readiness reads of a backlog's known ends (:class:`.backlog_ends.BacklogEnds`)."""

    def covers(self, topic: str) -> bool: ...

    def final_end(self, tp: TP) -> int | None: ...


class Readiness:
    """The readiness rules of one stream thread (see the module docstring).

    Args:
        max_task_idle_ms: Kafka's ``max.task.idle.ms`` (ms; -1 never waits).
        exactly_once: whether the thread runs ``exactly_once_v2`` (no round-trip waits).
        task_tps: the thread's ``{task id: its input partitions}`` (read, not written).
        tp_task: the thread's ``{input partition: its task}`` (read, not written).
        pending: ``pending(tp, consumed_next)``: the timestamp of the oldest record this
            thread sent to ``tp`` not consumed back yet (offsets below ``consumed_next``
            are), None if none (the record collector's).
        serve_reports: serves the producer's delivery reports.
        waiting_input: ``waiting_input(tp)``: whether no record of ``tp`` is held by the
            thread's flow control (its next records are to come from the consumer).
        owner: names the thread in the watchdog's warnings.
        lag: ``lag(tp)``: the partition's known lag (its cached high watermark minus the next
            offset to fetch, >= 0), None while unknown; when given, the waits for data on
            the broker have no deadline. Ignored with ``exactly_once``.
        backlog: the known ends of a backlog (``backlog.inputs.complete``,
            :mod:`.backlog_ends`; see the module docstring). Ignored with ``exactly_once``
            or ``max.task.idle.ms`` <= 0.
        position: ``position(tp)``: the consumer's next offset of ``tp`` (past transaction
            markers; None: unknown), for the backlog's known ends and the lag when nothing
            was fetched from ``tp`` yet.
        upstream: ``upstream(topic, task_id)`` (:class:`.upstream.UpstreamInput`): the
            sub-topologies of the thread that may still write ``topic`` for that task, None
            if none. At-least-once only.

    The watchdog: a wait for data (lag > 0, a record on its way back, a sibling's older
    record) that ends in enforced processing after ``UNKNOWN_LAG_WAIT_S`` (the data did not
    come while the task sat idle; Kafka never processes past a partition with lag) is
    logged as a WARNING naming the task (or the thread), the rule and the partition, at
    most once per ``WATCHDOG_LOG_EVERY_S`` per thread (with the count of the others).
    """

    def __init__(self, max_task_idle_ms: int, exactly_once: bool, task_tps: Mapping[str, list[TP]],
                 tp_task: Mapping[TP, BufferedTask], pending: Callable[[TP, int], int | None],
                 serve_reports: Callable[[], None], waiting_input: Callable[[TP], bool], owner: str = "stream thread",
                 lag: Callable[[TP], int | None] | None = None, backlog: KnownEnds | None = None,
                 position: Callable[[TP], int | None] = lambda tp: None,
                 upstream: Callable[[str, str], frozenset[int] | None] | None = None) -> None:
        self.max_task_idle_ms = max_task_idle_ms
        self._lag = None if exactly_once else lag
        #: the known ends of a backlog, when they apply (the committer reads them too)
        self.backlog = self._backlog = None if exactly_once or max_task_idle_ms <= 0 else backlog
        self._position = position
        self._upstream = None if exactly_once else upstream
        #: set by :meth:`ready`: the sub-topologies whose input the task waits for, if any
        self.upstream_wait: frozenset[int] | None = None
        self.exactly_once = exactly_once
        self.task_tps = task_tps
        self.tp_task = tp_task
        self._pending = pending
        self._serve_reports = serve_reports
        self._waiting_input = waiting_input
        #: end of partition reported since the partition's last consumed record
        self.eof: dict[TP, bool] = {}
        #: the next offset to fetch per partition (what was consumed up to)
        self.fetched_next: dict[TP, int] = {}
        #: repartition partitions this thread owns (its own sends to them are tracked)
        self.tracked: set[TP] = set()
        self._siblings: dict[str, tuple[list[TP], frozenset[TP]]] = {}
        self._feeds_itself: dict[str, bool] = {}
        self._idle_since: dict[str, float] = {}
        #: ``max.task.idle.ms`` deadline (monotonic s) per caught-up empty partition, set the
        #: first time it is seen so, dropped once it buffers a record (``idlePartitionDeadlines``)
        self._idle_deadlines: dict[TP, float] = {}
        self._thread_wait_since: float | None = None
        self._thread_enforced = False
        #: the count of enforced processings per task (Kafka's ``enforced-processing`` metric)
        self.on_enforced: Callable[[str], None] = lambda task_id: None
        #: ``refill(tps)``: moves the records held for those partitions whose buffer ran dry
        #: into it (set by the thread's flow control; the executor calls it after each run)
        self.refill: Callable[[list[TP]], None] = lambda tps: None
        self.owner = owner  # names the thread in the watchdog's warnings
        #: enforced processings of waits for data (lag > 0) not logged yet, and when the last was
        self._unlogged_enforced = 0
        self._last_warning: float | None = None
        #: set by :meth:`ready`: the task was held by ``max.task.idle.ms`` alone
        self.idling = False

    # -- the thread's bookkeeping
    def add_partition(self, tp: TP, repartition: bool) -> None:
        """A partition of a new task: not at its end yet; tracked if a repartition topic's."""
        self.eof[tp] = False
        if repartition:
            self.tracked.add(tp)
            self._siblings.clear()

    def remove_task(self, task_id: str, tps: list[TP]) -> None:
        """Forget a closed task and its partitions."""
        self._idle_since.pop(task_id, None)
        self._feeds_itself.pop(task_id, None)
        for tp in tps:
            self._idle_deadlines.pop(tp, None)
            self.eof.pop(tp, None)
            self.fetched_next.pop(tp, None)
            self.tracked.discard(tp)
        self._siblings.clear()

    def processed(self, task_id: str) -> None:
        """The task processed a record: its wait for data (lag > 0) starts again. The
        ``max.task.idle.ms`` deadlines are the partitions' own (see :meth:`ready`)."""
        self._idle_since.pop(task_id, None)

    # -- the rules
    def ready(self, task: BufferedTask, now: float) -> bool:
        """Whether ``task`` may process its next record at ``now`` (monotonic s). When not,
        :attr:`idling` tells whether only ``max.task.idle.ms`` holds it (a caught-up
        partition, its own or a sibling's, that another process may still feed)."""
        self.idling = False
        self.upstream_wait = None
        if task.buffered() == 0:
            return False
        idle = self.max_task_idle_ms
        if idle < 0:
            return True
        wait_s = 0.0
        head: int | None = None
        #: the rule and partition holding the task, a wait for data first (the watchdog's)
        why: tuple[str, TP] | None = None
        deadlines = self._idle_deadlines
        idle_wait = enforced_idle = False
        for tp in self.task_tps[task.task_id]:
            if task.buffered_in(*tp) > 0:
                if deadlines:  # empty unless max.task.idle.ms > 0
                    deadlines.pop(tp, None)
                continue
            if not self.eof.get(tp) and not self._caught_up_by_lag(tp):
                if deadlines:
                    deadlines.pop(tp, None)
                if self._lag is not None:
                    return False  # data on the broker, or no fetch answered yet: Kafka waits, unbounded
                if why is None:
                    why = (RULE_UNKNOWN_LAG, tp)
                wait_s = max(wait_s, idle / 1000, UNKNOWN_LAG_WAIT_S)
                continue
            if not self.exactly_once and tp in self.tracked:
                pending = self._pending(tp, self.fetched_next.get(tp, 0))
                if pending is not None:
                    head = task.head_timestamp() if head is None else head
                    if pending <= head:
                        if deadlines:
                            deadlines.pop(tp, None)
                        if why is None:
                            why = (RULE_ON_ITS_WAY, tp)
                        wait_s = max(wait_s, idle / 1000, UNKNOWN_LAG_WAIT_S)
                        continue
                elif self._unwritten(tp, task):
                    return False
            if idle > 0:
                known = self._backlog_state(tp)
                if known == FETCH:
                    return False  # its known end is beyond what was fetched: the records are on the broker
                if known == UNCOVERED:
                    if self._idle_deadline_passed(tp, now):
                        enforced_idle = True
                    else:
                        idle_wait = True
                elif known == WRITERS:
                    idle_wait = True  # no deadline: its end is known once its writers are done
        if wait_s == 0 and idle_wait:
            self.idling = True
            return False
        if wait_s == 0 and self._backlog is not None and self._sibling_idle(task, now):
            # first: a sibling older record held back by the same empty partition would
            # otherwise hold this task on UNKNOWN_LAG_WAIT_S's clock (the sibling rule)
            self.idling = True
            return False
        if wait_s == 0 and self._upstream is not None and self.tracked:
            for tp in self._siblings_of(task)[0]:
                if not self.tp_task[tp].buffered_in(*tp) and self._unwritten(tp, task):
                    return False
        if wait_s == 0 and not self.exactly_once:
            sibling = self._sibling_pending(task)
            if sibling is not None:
                wait_s, why = UNKNOWN_LAG_WAIT_S, (RULE_SIBLING, sibling)
        if wait_s == 0 and idle > 0 and self._sibling_idle(task, now):
            self.idling = True
            return False
        if wait_s == 0:
            self._idle_since.pop(task.task_id, None)
            if enforced_idle:
                self.on_enforced(task.task_id)
            return True
        since = self._idle_since.setdefault(task.task_id, now)
        if now - since >= wait_s:
            self.on_enforced(task.task_id)
            if why is not None:
                self._enforced(f"task {task.task_id}", why, now - since)
            return True
        return False

    def horizon(self, task: BufferedTask) -> int | None:
        """The largest timestamp (ms) the task's next record may have while :meth:`ready`
        stays true for the same reason, as long as none of its buffers runs dry: below the
        oldest record on its way back to one of its empty tracked partitions, and at most
        the head or the oldest pending send of each sibling partition (below it when the
        sibling's task comes first on a tie). None: no bound (exactly-once). A task that may
        send to its own input topics changes these bounds as it runs: its head, one record
        at a time."""
        if self.exactly_once:
            return None
        if self._self_feeding(task):
            return task.head_timestamp()
        pending_ts, fetched = self._pending, self.fetched_next
        horizon: int | None = None
        for tp in self.task_tps[task.task_id]:
            if tp in self.tracked and task.buffered_in(*tp) == 0:
                pending = pending_ts(tp, fetched.get(tp, 0))
                if pending is not None and (horizon is None or pending - 1 < horizon):
                    horizon = pending - 1
        siblings, first = self._siblings_of(task)
        for tp in siblings:
            head = self.tp_task[tp].buffered_head(*tp)
            if head is not None:
                # what is on its way to tp comes after this record (see _sibling_pending)
                if horizon is None or head < horizon:
                    horizon = head
                continue
            pending = pending_ts(tp, fetched.get(tp, 0))
            if pending is not None:
                if tp in first:
                    pending -= 1  # an equal timestamp on its way to an earlier task goes first
                if horizon is None or pending < horizon:
                    horizon = pending
        return horizon

    def thread_ready(self, now: float) -> bool:
        """False while an assigned partition, paused or not, has nothing buffered or held and
        has not reached its end (data may be on its way): as long as its lag is unknown or
        above 0 when the lag is known (``lag``), else for at most ``UNKNOWN_LAG_WAIT_S``."""
        if self.max_task_idle_ms < 0:
            return True
        eof, waiting_input = self.eof, self._waiting_input
        waiting: TP | None = None
        for tp, task in self.tp_task.items():
            if not eof.get(tp) and task.buffered_in(*tp) == 0 and waiting_input(tp) and not self._caught_up_by_lag(tp):
                waiting = tp
                break
        if waiting is not None and self._lag is not None:
            return False  # as Kafka, no deadline on data the broker has (see the module docstring)
        if waiting is None:
            self._thread_wait_since = None
            self._thread_enforced = False
            return True
        if self._thread_wait_since is None:
            self._thread_wait_since = now
        if now - self._thread_wait_since < UNKNOWN_LAG_WAIT_S:
            return False
        if not self._thread_enforced:  # once per wait (it stays released until the wait ends)
            self._thread_enforced = True
            self._enforced("the thread", (RULE_UNKNOWN_LAG, waiting), now - self._thread_wait_since)
        return True

    def caught_up(self) -> bool:
        """Every owned partition at its end and nothing buffered (the thread checks what it
        holds itself)."""
        eof = self.eof
        return all(eof.get(tp) for tp in self.tp_task) and not any(t.buffered() for t in self.tp_task.values())

    # -- helpers
    def _caught_up_by_lag(self, tp: TP) -> bool:
        """Whether the consumer's known lag of ``tp`` is 0 and no record is held for it: the
        partition is at its end even when its end-of-partition event was not seen (librdkafka reports it once per
        offset; one dropped with a paused partition's prefetched records is not sent
        again)."""
        lag = self._lag
        # records held for it are fetched (counted in the lag) but not in its buffer yet
        return lag is not None and self._waiting_input(tp) and lag(tp) == 0

    def _enforced(self, who: str, why: tuple[str, TP], waited_s: float) -> None:
        """The watchdog (see the class docstring): log an enforced wait for data."""
        self._unlogged_enforced += 1
        now = time.monotonic()
        if self._last_warning is not None and now - self._last_warning < WATCHDOG_LOG_EVERY_S:
            return
        others = self._unlogged_enforced - 1
        self._unlogged_enforced, self._last_warning = 0, now
        rule, (topic, partition) = why
        log.warning("%s: %s waited %.1f s without progress (%s: %s-%d) and processes anyway%s",
                    self.owner, who, waited_s, rule, topic, partition,
                    f" ({others} other such wait(s) since the last warning)" if others else "")

    def _self_feeding(self, task: BufferedTask) -> bool:
        feeds = self._feeds_itself.get(task.task_id)
        if feeds is None:
            feeds = self._feeds_itself[task.task_id] = task.may_send_to_own_sources()
        return feeds

    def _siblings_of(self, task: BufferedTask) -> tuple[list[TP], frozenset[TP]]:
        """The tracked partitions of the task's repartition topics owned by its other tasks,
        and those of them whose task comes first on equal timestamps (:func:`task_order`)."""
        siblings = self._siblings.get(task.task_id)
        if siblings is None:
            own = self.task_tps[task.task_id]
            topics = {tp[0] for tp in own if tp in self.tracked}
            tps = [tp for tp in sorted(self.tracked) if tp[0] in topics and tp not in own]
            mine = task_order(task.task_id)
            siblings = self._siblings[task.task_id] = (
                tps, frozenset(tp for tp in tps if task_order(self.tp_task[tp].task_id) < mine))
        return siblings

    def _unwritten(self, tp: TP, task: BufferedTask) -> bool:
        """Whether ``tp`` (tracked, nothing buffered) has nothing on its way while upstream
        tasks of the thread have input (:attr:`upstream_wait`: their sub-topologies)."""
        if self._upstream is None or self._pending(tp, self.fetched_next.get(tp, 0)) is not None:
            return False
        self.upstream_wait = self._upstream(tp[0], task.task_id)
        return self.upstream_wait is not None

    def _sibling_idle(self, task: BufferedTask, now: float) -> bool:
        """Whether a sibling partition of the task (see :meth:`_siblings_of`) that is empty
        at its end is still within its ``max.task.idle.ms`` deadline (the same per-partition
        deadline as the task's own partitions'): its next record, written by another
        process, may be older than the task's head. A sibling whose end was not seen is the
        thread's wait (:meth:`thread_ready`)."""
        deadlines = self._idle_deadlines
        waiting = False
        for tp in self._siblings_of(task)[0]:
            if self.tp_task[tp].buffered_in(*tp) > 0:
                deadlines.pop(tp, None)
                continue
            known = self._backlog_state(tp)
            if known == UNCOVERED:
                if self.eof.get(tp) and not self._idle_deadline_passed(tp, now):
                    waiting = True
            elif known != CONSUMED:
                return True  # its end unknown, or known and not fetched yet: no deadline
        return waiting

    def _backlog_state(self, tp: TP) -> int:
        """What the backlog's known ends (``backlog``) say of ``tp``, an empty partition:
        ``UNCOVERED`` (no backlog, or a topic whose end it cannot know: the clock rules),
        ``CONSUMED`` (consumed to its known end: nothing more will come), ``FETCH`` (its
        end is known and beyond the next offset to fetch), ``WRITERS`` (its end is not
        known yet: its writers have not committed their whole input)."""
        backlog = self._backlog
        if backlog is None or not backlog.covers(tp[0]):
            return UNCOVERED
        end = backlog.final_end(tp)
        if end is None:
            return WRITERS
        if end == 0:
            return CONSUMED
        position = self.position(tp, end)
        return CONSUMED if position is not None and position >= end else FETCH

    def position(self, tp: TP, end: int) -> int | None:
        """The next offset of ``tp`` to fetch: the last fetched record's + 1, or, when that
        is below ``end`` or nothing was fetched, the consumer's position (past transaction
        markers, which no record stands for); None if unknown."""
        fetched = self.fetched_next.get(tp)
        if fetched is not None and fetched >= end:
            return fetched
        consumer = self._position(tp)
        return fetched if consumer is None else consumer if fetched is None else max(fetched, consumer)

    def _idle_deadline_passed(self, tp: TP, now: float) -> bool:
        """Whether the ``max.task.idle.ms`` deadline of ``tp``, a caught-up empty partition,
        has passed at ``now`` (monotonic s). The deadline is set the first time it is asked
        for and kept until the partition buffers a record (the callers drop it then)."""
        return now >= self._idle_deadlines.setdefault(tp, now + self.max_task_idle_ms / 1000)

    def _sibling_pending(self, task: BufferedTask) -> TP | None:
        """The sibling partition to which this thread has sent a record older than the
        task's next record that may still be processed before it (queued at the head of the
        sibling's buffer, or on its way back to an empty sibling partition); None if none.

        A record on its way to a sibling partition that buffers records is not waited for:
        the sibling processes its buffer first (in offset order), and its head is not older
        than the task's, so that record is late downstream in any case. Waiting for it held
        the two tasks in turn, ``UNKNOWN_LAG_WAIT_S`` per run of records (issue 25)."""
        siblings, first = self._siblings_of(task)
        if not siblings:
            return None
        head = task.head_timestamp()
        for polled in (False, True):
            older: TP | None = None
            for tp in siblings:
                queued = self.tp_task[tp].buffered_head(*tp)
                if queued is not None:
                    if queued < head:
                        older = tp  # the sibling holds an older record back itself: wait for it
                        break
                    continue  # anything on its way to tp is processed after this record
                pending = self._pending(tp, self.fetched_next.get(tp, 0))
                if pending is not None and (pending < head or pending == head and tp in first):
                    older = tp
                    break
            if older is None or polled:
                return older
            # a send whose delivery report was not served yet may already be consumed back
            # (its offset is unknown until then): serve the reports and look again
            self._serve_reports()
        return None
