"""A backlog's known ends without a broker (``speed_layer/runtime/backlog_ends.py``): which
topics they cover (the flights' chain of repartition topics, not a foreign-key join's cycle
nor what is downstream of it, nothing with a topic extractor), the order in which the ends
become known from the group's committed offsets, and when a thread commits a task that
consumed its input to those ends. The offsets are dicts standing for the group coordinator
and ListOffsets; the rules that use the ends: ``test_readiness.py``."""
from __future__ import annotations

from speed_layer import StreamsBuilder
from speed_layer.runtime.backlog_ends import BacklogEnds
from speed_layer.runtime.internal_topics import plan_topology

TP = tuple[str, int]
APP = "app"
BY_DEST, BY_ORIGIN, DUTY = (f"{APP}-{t}-repartition" for t in ("flights-by-dest", "flights-by-origin", "plane_duty_sessions"))


class Broker:
    """End offsets and the group's committed offsets, and the requests made of them."""

    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends
        self.committed: dict[TP, int] = {}
        self.asked: list[str] = []

    def end_offsets(self, tps: list[TP]) -> dict[TP, int]:
        self.asked.append(f"ends {sorted({t for t, _ in tps})}")
        return {tp: self.ends.get(tp, 0) for tp in tps}

    def committed_offsets(self, tps: list[TP]) -> dict[TP, int]:
        self.asked.append(f"committed {sorted({t for t, _ in tps})}")
        return {tp: self.committed[tp] for tp in tps if tp in self.committed}


def flights() -> tuple[BacklogEnds, Broker]:
    from pipelines.examples.flights import pipeline

    topology = pipeline.build_topology()
    plan = plan_topology(topology, APP, {"flights": 4, "planes": 4, "airports": 6, "airlines": 1})
    broker = Broker({("flights", p): 100 + p for p in range(4)} | {("planes", 0): 5, ("airports", 2): 7})
    return BacklogEnds(plan, topology, broker.committed_offsets, broker.end_offsets), broker


def test_the_flights_chain_is_covered_and_each_topic_names_its_writers() -> None:
    ends, _ = flights()
    assert ends.covered == {"flights", "planes", "airports", BY_DEST, BY_ORIGIN, DUTY}
    assert ends.writers == {BY_DEST: {0}, BY_ORIGIN: {1}, DUTY: {1}}


def test_a_foreign_key_join_cycle_and_what_is_downstream_of_it_keep_the_clock_rules() -> None:
    from pipelines.examples.shop import pipeline

    topology = pipeline.build_topology()
    plan = plan_topology(topology, APP, {"clicks": 4, "orders": 4, "products": 4})
    ends = BacklogEnds(plan, topology, lambda tps: {}, lambda tps: {})
    # the clicks' side is covered; the orders' sub-topology reads the FK responses, which
    # the products' sub-topology writes from the orders' subscriptions: a cycle
    assert ends.covered == {"clicks", "orders", "products", f"{APP}-conversions-right-repartition"}


def test_a_topic_extractor_leaves_nothing_covered() -> None:
    b = StreamsBuilder()
    b.stream("in").map(lambda k, v: (v, k)).to(lambda k, v, ctx: "out")
    b.stream("other").group_by_key().count()
    topology = b.build()
    plan = plan_topology(topology, APP, {"in": 2, "other": 2})
    assert not BacklogEnds(plan, topology, lambda tps: {}, lambda tps: {}).covered


def test_ends_become_known_writer_by_writer_from_the_group_s_committed_offsets() -> None:
    ends, broker = flights()
    assert not ends.poll()
    assert ends.final_end(("flights", 2)) == 102 and ends.final_end(("planes", 1)) == 0
    assert ends.final_end((BY_DEST, 0)) is None and not ends.done
    # sub-topology 0 committed all but one partition of its input: not done
    broker.committed.update({("flights", p): 100 + p for p in range(3)} | {("planes", 0): 5})
    broker.ends.update({(BY_DEST, p): 50 for p in range(4)})
    assert not ends.poll() and ends.final_end((BY_DEST, 0)) is None
    broker.committed[("flights", 3)] = 103
    assert not ends.poll()
    assert ends.done == {0} and ends.final_end((BY_DEST, 3)) == 50
    assert ends.final_end((BY_ORIGIN, 0)) is None  # sub-topology 1 has not committed yet
    broker.committed.update({(BY_DEST, p): 50 for p in range(4)} | {("airports", 2): 7})
    broker.ends.update({(BY_ORIGIN, 1): 30, (DUTY, 2): 40})
    assert ends.poll()  # every end known
    assert ends.done == {0, 1} and ends.final_end((BY_ORIGIN, 1)) == 30 and ends.final_end((DUTY, 2)) == 40
    # the repartition topics' ends were read after their writers' commits, never before
    assert broker.asked.index(f"ends [{BY_DEST!r}]") > broker.asked.index("committed ['flights', 'planes']")


def test_a_thread_commits_a_task_consumed_to_its_known_ends_once() -> None:
    ends, _ = flights()
    ends.poll()
    tps = [("flights", 2), ("planes", 2)]  # planes-2 never held a record (end 0)
    assert not ends.finished(tps, lambda tp, end: 101, {})  # one record still to process
    assert ends.finished(tps, lambda tp, end: 102, {})
    assert not ends.finished(tps, lambda tp, end: 102, {("flights", 2): 102})  # committed there already
    assert not ends.finished([(BY_DEST, 2)], lambda tp, end: 10**6, {})  # its end is not known yet
