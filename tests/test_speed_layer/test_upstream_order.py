"""One stream thread gives a backlog the same order whatever the timing of its repartition
round trips (issue 42, item 2; ``speed_layer/runtime/upstream.py``), without a broker: an
upstream task re-keys a source partition into a repartition topic read by two downstream
tasks, and the records it sends come back (are "fetched") after each loop, or only every
few loops, or in loops of one record. The downstream tasks must process the repartition
records in the same order in every schedule: before, how far the upstream task ran ahead
while the downstream ones waited for their round trips decided whether a partition's next
record (a flight behind a later flight in its source partition) was written when a
downstream task's turn came, and the flights backlog's repartition topics (and late drops:
474, 475 or 476) differed from run to run."""
from __future__ import annotations

import sys
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speed_layer.runtime.readiness import Readiness
from speed_layer.runtime.task_executor import TaskExecutor
from speed_layer.runtime.upstream import UpstreamInput, subtopology_of, task_order

sys.path.insert(0, str(Path(__file__).parent))
from test_task_executor import FakeTask  # noqa: E402

TP = tuple[str, int]
SRC, REP = "src", "app-by-dest-repartition"


class Writer(FakeTask):
    """The upstream task: each record it processes is sent, with its timestamp, to the
    repartition partition ``routes`` gives for its position in the source partition."""

    def __init__(self, task_id: str, stamps: list[int], routes: list[int], in_flight: dict[TP, deque[int]],
                 log: list[tuple[str, int]]) -> None:
        super().__init__(task_id, {(SRC, 0): list(stamps)}, log)
        self.routes = deque(routes)
        self.in_flight = in_flight

    def _pop(self) -> deque[int]:
        q = super()._pop()
        self.in_flight[(REP, self.routes.popleft())].append(self.log[-1][1])
        return q


def _run(stamps: list[int], routes: list[int], fetch_every: int, max_records: int, upstream: bool = True) -> list[tuple[str, int]]:
    """The downstream tasks' ``(task, timestamp)`` in processing order, the records sent
    coming back every ``fetch_every`` loops of at most ``max_records`` records."""
    log: list[tuple[str, int]] = []
    in_flight: dict[TP, deque[int]] = {(REP, 0): deque(), (REP, 1): deque()}
    writer = Writer("0_0", stamps, routes, in_flight, log)
    readers = [FakeTask(f"1_{p}", {(REP, p): []}, log) for p in (0, 1)]
    tasks = {t.task_id: t for t in (writer, *readers)}
    task_tps = {tid: sorted(t.queues) for tid, t in tasks.items()}
    tp_task = {tp: t for t in tasks.values() for tp in t.queues}
    ups = UpstreamInput({REP: {0}}, {0: (SRC,), 1: (REP,)}, False, tasks, task_tps, lambda tp: False)
    readiness = Readiness(0, False, task_tps, tp_task, lambda tp, consumed_next: in_flight[tp][0] if in_flight.get(tp) else None,
                          lambda: None, lambda tp: True, upstream=ups if upstream else None)  # type: ignore[arg-type]
    for tp in tp_task:
        readiness.add_partition(tp, tp[0] == REP)
        readiness.eof[tp] = True  # all fetched so far (the source is complete, in its buffer)
    ex = TaskExecutor(tasks, task_tps, readiness, lambda: None, clock=lambda: 0.0)  # type: ignore[arg-type]
    loops = 0
    while writer.buffered() or any(in_flight.values()) or any(r.buffered() for r in readers):
        loops += 1
        assert loops < 10_000, "no progress"
        ex.process(max_records)
        if loops % fetch_every == 0:
            for tp, q in in_flight.items():
                tp_task[tp].queues[tp].extend(q)
                q.clear()
    return [(t, ts) for t, ts in log if t != "0_0"]


#: the flights case: the source partition holds a record (20, to partition 1) behind a later
#: one (90); the other partition's records around 50-60 come back before or after it is sent
STAMPS = [10, 50, 15, 60, 90, 20, 95, 100, 55, 110]
ROUTES = [0, 0, 1, 0, 0, 1, 1, 0, 1, 0]


@pytest.mark.parametrize("upstream", [True, False])
def test_a_backlog_goes_in_one_order_whatever_the_round_trips_take(upstream: bool) -> None:
    orders = {(f, m): _run(STAMPS, ROUTES, f, m, upstream) for f in (1, 2, 3) for m in (1, 2, 1000)}
    want = orders[(1, 1)]
    assert sorted(want) == sorted(("1_0" if r == 0 else "1_1", ts) for ts, r in zip(STAMPS, ROUTES))
    if upstream:
        assert all(o == want for o in orders.values()), orders
    else:
        # without the wait for upstream input the order depends on the schedule (what was
        # written when a downstream task's turn came): the rule the test above checks
        assert any(o != want for o in orders.values())


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 1)), min_size=1, max_size=14),
       st.integers(1, 3), st.integers(1, 4))
def test_any_backlog_goes_in_the_order_of_its_data(records: list[tuple[int, int]], fetch_every: int, max_records: int) -> None:
    """Whatever the timestamps (ties included) and the schedule of fetches and loops, the
    order is the one of fetching after every loop of one record."""
    stamps, routes = [ts for ts, _ in records], [r for _, r in records]
    assert _run(stamps, routes, fetch_every, max_records) == _run(stamps, routes, 1, 1)


def test_task_order_and_subtopology_of_task_ids() -> None:
    assert sorted(["1_10", "0_3", "1_2", "named"], key=task_order) == ["0_3", "1_2", "1_10", "named"]
    assert (subtopology_of("12_3"), subtopology_of("named")) == (12, None)


def test_no_wait_on_a_cycle_nor_with_a_topic_extractor_nor_once_upstream_is_done() -> None:
    class T:
        def __init__(self, n: int) -> None:
            self.n = n

        def buffered(self) -> int:
            return self.n

    tasks = {"0_0": T(1), "1_0": T(1), "2_0": T(1)}
    task_tps = {"0_0": [(SRC, 0)], "1_0": [("a", 0)], "2_0": [("b", 0)]}
    # 0 -> a -> 1 -> b -> 2; and 1 also writes a (a cycle through a)
    ups = UpstreamInput({"a": {0, 1}, "b": {1}}, {0: (SRC,), 1: ("a",), 2: ("b",)}, False, tasks, task_tps, lambda tp: False)
    assert ups("b", "2_0") == frozenset({0, 1})  # transitive
    assert ups("a", "1_0") is None  # its own sub-topology writes it: could wait for itself
    tasks["0_0"].n = tasks["1_0"].n = 0
    assert ups("b", "2_0") is None  # nothing left upstream
    held = UpstreamInput({"a": {0, 1}, "b": {1}}, {0: (SRC,), 1: ("a",), 2: ("b",)}, False, tasks, task_tps,
                         lambda tp: tp == (SRC, 0))
    assert held("b", "2_0") == frozenset({0, 1})  # records held by flow control count as input
    on_way = UpstreamInput({"a": {0}, "b": {1}}, {0: (SRC,), 1: ("a",), 2: ("b",)}, False, tasks, task_tps,
                           lambda tp: False, lambda tp: tp == ("a", 0))
    assert on_way("b", "2_0") == frozenset({0, 1})  # and so do records on their way back to an upstream task
    assert UpstreamInput({"b": {1}}, {1: ("a",), 2: ("b",)}, True, tasks, task_tps, lambda tp: True)("b", "2_0") is None


def test_an_equal_timestamp_on_its_way_to_a_sibling_of_a_lower_task_id_goes_first() -> None:
    """The sibling rule on a tie: a record on its way back to the partition of a task that
    comes first (``1_0`` before ``1_1``) holds a task whose head has the same timestamp, and
    bounds its runs below it; the other way round it does not (the first run of the flights
    backlog's repartition topics differed at its 24th record: ``1_1`` ran its 10:30 flights
    before ``1_0``'s 10:30 flight came back, or after)."""
    from test_readiness import REP, FakeTask as Buffers, Kit  # noqa: N811 - its tracked topic

    first, second = Buffers("1_0", {(REP, 0): []}), Buffers("1_1", {(REP, 1): [5, 9]})
    kit = Kit([first, second])
    kit.at_end((REP, 0), (REP, 1))
    kit.pending[(REP, 0)] = 5
    assert not kit.r.ready(second, 0.0)
    kit.pending[(REP, 0)] = 6
    assert kit.r.ready(second, 0.0) and kit.r.horizon(second) == 5
    first.queues[(REP, 0)].append(5)
    second.queues[(REP, 1)].clear()
    kit.pending.clear()
    kit.pending[(REP, 1)] = 5
    assert kit.r.ready(first, 0.0) and kit.r.horizon(first) == 5
