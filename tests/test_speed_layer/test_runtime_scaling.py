"""Two instances of one application share the tasks (consumer-group rebalances); when one
stops, the other takes its tasks over and restores their stores from the changelogs."""
from __future__ import annotations

import re
import time
from typing import Any

import pytest

from speed_layer import Consumed, Materialized, Serdes, StreamsBuilder, Topology
from speed_layer.testing import TopologyTestDriver

pytestmark = pytest.mark.broker


def build(t: dict[str, str]) -> Topology:
    b = StreamsBuilder()
    (b.stream(t["events"], Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON()))
     .group_by(lambda k, v: f"g{v % 9}")
     .aggregate(lambda: 0, lambda k, v, agg: agg + v, Materialized.as_("sums")))
    return b.build()


def expected(t: dict[str, str], n: int) -> dict[str, int]:
    with TopologyTestDriver(build(t)) as d:
        inp = d.create_input_topic(t["events"])
        for i in range(n):
            inp.pipe_input(f"k{i % 17}", i, 1000 + i)
        return dict(d.get_key_value_store("sums").all())


def test_two_instances_share_tasks_and_fail_over(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(events=4)
    kit.produce(t["events"], [(f"k{i % 17}", i, 1000 + i) for i in range(1000)])
    a = kit.run(build(t), kit.config("app", state="a"))
    b = kit.streams(build(t), kit.config("app", state="b"))
    b.start()
    deadline = time.monotonic() + 30
    while not any(th["active_tasks"] for th in b.local_thread_metadata()) or b.state != "RUNNING" or a.state != "RUNNING":
        assert time.monotonic() < deadline, (a.state, b.state, b.local_thread_metadata())
        time.sleep(0.05)
    kit.produce(t["events"], [(f"k{i % 17}", i, 1000 + i) for i in range(1000, 2000)])
    for s in (a, b):
        assert s.wait_until_caught_up(60)
        kit.wait_state(s, "RUNNING")
    tasks_a = {x for th in a.local_thread_metadata() for x in th["active_tasks"]}
    tasks_b = {x for th in b.local_thread_metadata() for x in th["active_tasks"]}
    assert tasks_a and tasks_b and not tasks_a & tasks_b
    assert len(tasks_a | tasks_b) == 8  # 2 sub-topologies x 4 partitions
    exp = expected(t, 2000)
    part_a, part_b = dict(a.store("sums").all()), dict(b.store("sums").all())
    assert not set(part_a) & set(part_b)
    assert {**part_a, **part_b} == exp

    assert b.close(30)  # leaves the group: a rebalance gives its tasks to a
    deadline = time.monotonic() + 30
    while len({x for th in a.local_thread_metadata() for x in th["active_tasks"]}) < 8 or a.state != "RUNNING":
        assert time.monotonic() < deadline, a.local_thread_metadata()
        time.sleep(0.05)
    assert a.wait_until_caught_up(60)
    assert dict(a.store("sums").all()) == exp
    assert a.metrics()["restore-total"] > 0  # b's updates were restored from the changelogs


def test_instances_run_the_subtopologies_they_are_given(runtime_kit: Any) -> None:
    """``instance.subtopologies``: each instance subscribes to its sub-topologies' lead topics
    only, so the group gives it only their tasks, whichever joins first; the results are
    those of one instance, and each task's active time is counted (``active-time-ns``)."""
    kit = runtime_kit
    t = kit.topics(events=4)
    kit.produce(t["events"], [(f"k{i % 17}", i, 1000 + i) for i in range(1000)])
    # alone, the downstream instance is never caught up: nobody reads the source topic
    downstream = kit.streams(build(t), kit.config("app", state="b", **{"instance.subtopologies": "1"}))
    downstream.start()
    assert not downstream.wait_until_caught_up(3)
    upstream = kit.run(build(t), kit.config("app", state="a", **{"instance.subtopologies": [0]}))
    assert downstream.wait_until_caught_up(60)
    tasks = {name: {x for th in s.local_thread_metadata() for x in th["active_tasks"]}
             for name, s in (("upstream", upstream), ("downstream", downstream))}
    assert tasks == {"upstream": {f"0_{p}" for p in range(4)}, "downstream": {f"1_{p}" for p in range(4)}}
    assert dict(downstream.store("sums").all()) == expected(t, 1000)
    for s, sub in ((upstream, "0"), (downstream, "1")):
        active = {task: c.get("active-time-ns", 0) for task, c in s.metrics()["tasks"].items()}
        assert active and all(task.startswith(sub + "_") and ns > 0 for task, ns in active.items()), active


@pytest.mark.parametrize("given, message", [
    ([2], "no sub-topology [2] with tasks in this topology; allowed ids: [0, 1]"),
    ([], "must name at least one sub-topology id"),
    ("x", "instance.subtopologies"),
])
def test_unknown_subtopologies_fail_at_start_up(given: Any, message: str) -> None:
    from speed_layer import KafkaStreams
    from speed_layer.errors import ConfigException

    t = {"events": "events"}
    with pytest.raises(ConfigException, match=re.escape(message)):
        KafkaStreams(build(t), {"application.id": "a", "bootstrap.servers": "127.0.0.1:1",
                                "instance.subtopologies": given})


def test_a_paused_client_joins_and_commits_but_processes_only_once_resumed(runtime_kit: Any) -> None:
    """KIP-834 (``KafkaStreams#pause``, ``#resume``, ``#isPaused``): paused before start, the
    client joins its group and gets its tasks (RUNNING) but processes nothing; resumed, it
    catches up with the same results as a client never paused."""
    kit = runtime_kit
    t = kit.topics(events=4)
    kit.produce(t["events"], [(f"k{i % 17}", i, 1000 + i) for i in range(500)])
    s = kit.streams(build(t), kit.config("app"))
    s.pause()
    assert s.is_paused()
    s.start()
    kit.wait_state(s, "RUNNING")
    assert not s.wait_until_caught_up(3)
    assert s.metrics()["process-total"] == 0
    assert {x for th in s.local_thread_metadata() for x in th["active_tasks"]}  # its tasks are assigned
    s.resume()
    assert not s.is_paused()
    assert s.wait_until_caught_up(60)
    assert dict(s.store("sums").all()) == expected(t, 500)
