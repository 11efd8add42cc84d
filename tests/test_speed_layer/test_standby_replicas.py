"""Standby replicas (``num.standby.replicas``) and sticky, co-partitioned assignment.

As Kafka's ``StandbyTaskEOSIntegrationTest`` / ``StandbyTaskCreationIntegrationTest``: with
one standby and two instances, each instance keeps a warm copy of every stateful task the
other one runs; when an instance goes, the survivor's new active tasks restore only the
changelog tail past the standby's checkpoint, not the whole changelog.
"""
from __future__ import annotations

import time
from typing import Any

import pytest

from speed_layer import Consumed, Materialized, Serdes, StreamsBuilder, Topology
from speed_layer.runtime.internal_topics import plan_topology
from speed_layer.runtime.metadata import GroupMember, process_of, standby_assignment
from speed_layer.testing import TopologyTestDriver


def build(events: str, clicks: str | None = None) -> Topology:
    b = StreamsBuilder()
    stream = b.stream(events, Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON()))
    if clicks is not None:  # a co-partitioned join: both topics' partition p belong to task 0_p
        table = b.table(clicks, Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON()), Materialized.as_("clicks"))
        stream = stream.left_join(table, lambda v, c: v)
    stream.group_by_key().aggregate(lambda: 0, lambda k, v, agg: agg + v, Materialized.as_("sums"))
    return b.build()


def expected(events: str, n: int) -> dict[str, int]:
    with TopologyTestDriver(build(events)) as d:
        inp = d.create_input_topic(events)
        for i in range(n):
            inp.pipe_input(f"k{i % 23}", i, 1000 + i)
        return dict(d.get_key_value_store("sums").all())


def active(s: Any) -> set[str]:
    return {x for th in s.local_thread_metadata() for x in th["active_tasks"]}


# ---------------------------------------------------------------- placement (no broker)
def test_process_id_is_read_from_the_client_id() -> None:
    assert process_of("app", "app-9f1c-4d2e-StreamThread-2-consumer@h:1") == "9f1c-4d2e"
    assert process_of("app", "app-9f1c-StreamThread-1-consumer") == "9f1c"
    assert process_of("app", "other-9f1c-StreamThread-1-consumer") is None
    assert process_of("app", "rdkafka") is None


def test_standbys_never_sit_with_their_active_task_and_spread_evenly() -> None:
    plan = plan_topology(build("events"), "app", {"events": 6})
    lead = plan.lead_topic(0)
    members = [
        GroupMember("app-a-StreamThread-1-consumer", "a", None, frozenset({(lead, 0), (lead, 1)})),
        GroupMember("app-b-StreamThread-1-consumer", "b", None, frozenset({(lead, 2), (lead, 3)})),
        GroupMember("app-c-StreamThread-1-consumer", "c", None, frozenset({(lead, 4)})),  # 0_5 unowned
    ]
    one = standby_assignment(plan, members, 1)
    assert set(one) == {"0_0", "0_1", "0_2", "0_3", "0_4"}  # no active owner: no standby
    owner = {"0_0": "a", "0_1": "a", "0_2": "b", "0_3": "b", "0_4": "c"}
    assert all(len(p) == 1 and owner[t] not in p for t, p in one.items())
    load = [p for procs in one.values() for p in procs]
    assert max(load.count(x) for x in "abc") - min(load.count(x) for x in "abc") <= 1
    two = standby_assignment(plan, members, 2)
    assert all(set(p) == set("abc") - {owner[t]} for t, p in two.items())
    assert standby_assignment(plan, members, 5) == two  # at most one copy per other instance
    assert standby_assignment(plan, members, 0) == {}


def test_a_lead_topic_stands_for_each_task_of_a_join() -> None:
    plan = plan_topology(build("events", "clicks"), "app", {"events": 3, "clicks": 3})
    assert plan.lead_topics() == ["clicks"]  # equal counts: the first by name
    assert plan.task_of_lead("clicks", 2) == "0_2" and plan.task_of_lead("events", 2) is None
    assert plan.task_partitions("0_2") == [("clicks", 2), ("events", 2)]


# ---------------------------------------------------------------- on a broker


@pytest.mark.broker
def test_failover_to_a_warm_standby_restores_only_the_tail(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(events=4)
    n = 4000
    kit.produce(t["events"], [(f"k{i % 23}", i, 1000 + i) for i in range(n)])
    cfg = {"num.standby.replicas": 1}
    a = kit.run(build(t["events"]), kit.config("app", state="a", **cfg))
    b = kit.streams(build(t["events"]), kit.config("app", state="b", **cfg))
    b.start()
    deadline = time.monotonic() + 60
    while True:
        ta, tb = active(a), active(b)
        settled = ta and tb and len(ta | tb) == 4 and a.state == b.state == "RUNNING"
        if settled and set(a.standby_tasks()) == tb and set(b.standby_tasks()) == ta:
            break
        assert time.monotonic() < deadline, (ta, tb, a.standby_tasks(), b.standby_tasks())
        time.sleep(0.1)
    for s in (a, b):
        assert s.wait_until_caught_up(60)
    # the standbys catch up with the changelogs (updates applied >= what the actives wrote)
    deadline = time.monotonic() + 30
    while sum(b.metrics()["tasks"].get(x, {}).get("update-total", 0) for x in ta) < len({f"k{i % 23}" for i in range(n)}) // 4:
        assert time.monotonic() < deadline, b.metrics()["tasks"]
        time.sleep(0.1)
    time.sleep(0.5)  # a standby checkpoint (commit.interval.ms 100)
    before = b.metrics()["restore-total"]

    assert a.close(30)  # a's tasks move to b, whose standbys of them hand their stores over
    deadline = time.monotonic() + 60
    while active(b) != {"0_0", "0_1", "0_2", "0_3"} or b.state != "RUNNING":
        assert time.monotonic() < deadline, b.local_thread_metadata()
        time.sleep(0.05)
    assert b.wait_until_caught_up(60)
    assert dict(b.store("sums").all()) == expected(t["events"], n)
    restored_with_standby = b.metrics()["restore-total"] - before
    assert b.standby_tasks() == []  # alone: nowhere else to put one
    changelog_records = sum(b.metrics()["tasks"].get(x, {}).get("update-total", 0) for x in ta)
    assert restored_with_standby < changelog_records, (restored_with_standby, changelog_records)

    # without a standby, the same move restores every changelog record of the moved tasks
    c = kit.streams(build(t["events"]), kit.config("app2", state="c"))
    c.start()
    kit.wait_state(c, "RUNNING", 60)
    assert c.wait_until_caught_up(60)
    d = kit.streams(build(t["events"]), kit.config("app2", state="d"))
    d.start()
    deadline = time.monotonic() + 60
    while not (active(c) and active(d) and len(active(c) | active(d)) == 4):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert c.wait_until_caught_up(60) and d.wait_until_caught_up(60)
    moved = active(c)
    before = d.metrics()["restore-total"]
    assert c.close(30)
    deadline = time.monotonic() + 60
    while active(d) != {"0_0", "0_1", "0_2", "0_3"} or d.state != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert d.wait_until_caught_up(60)
    restored_without = d.metrics()["restore-total"] - before
    assert dict(d.store("sums").all()) == expected(t["events"], n)
    assert restored_without > restored_with_standby, (restored_without, restored_with_standby, moved)
