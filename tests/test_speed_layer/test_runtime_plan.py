"""Runtime pieces without a broker: murmur2 partitioning, internal topic planning,
checkpoint files, the state directory lock."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from speed_layer import Materialized, Repartitioned, StreamsBuilder, StreamsException, TimeWindows, TopologyException
from speed_layer.runtime.internal_topics import plan_topology
from speed_layer.runtime.partitioning import RoundRobin, murmur2, partition_for_key, to_positive
from speed_layer.runtime.restore import StateDirectory, delete_checkpoint, read_checkpoint, write_checkpoint


@pytest.mark.parametrize(
    "data, expected",
    [  # Kafka's UtilsTest#testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_is_javas(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_for_key_uses_to_positive_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert partition_for_key(b"21", 6) == (-973932308 & 0x7FFFFFFF) % 6
    with pytest.raises(ValueError):
        partition_for_key(b"x", 0)
    rr = RoundRobin()
    assert [rr.next("t", 3) for _ in range(4)] == [0, 1, 2, 0]


def flights_like() -> StreamsBuilder:
    """orders(3) x users(3) table, repartition by item, x items(6) table, windowed count."""
    b = StreamsBuilder()
    users = b.table("users")
    items = b.table("items")
    (b.stream("orders").left_join(users, lambda o, u: o)
     .select_key(lambda k, v: v["item"]).repartition(Repartitioned.as_("by-item"))
     .left_join(items, lambda o, i: o)
     .group_by(lambda k, v: v["origin"]).windowed_by(TimeWindows.of_size_with_no_grace(3_600_000))
     .count(Materialized.as_("hourly")))
    return b


def test_plan_follows_kafkas_partition_rules() -> None:
    plan = plan_topology(flights_like().build(), "app", {"orders": 3, "users": 3, "items": 6})
    # co-partitioned with items (6), not the upstream max (3)
    assert plan.repartition["app-by-item-repartition"] == 6
    # the next repartition topic takes its upstream sub-topology's max (6)
    assert plan.repartition["app-hourly-repartition"] == 6
    assert sorted(plan.task_counts.values()) == [3, 6, 6]
    cl = plan.changelogs["app-hourly-changelog"]
    assert cl.partitions == 6 and cl.config["cleanup.policy"] == "compact,delete"
    assert cl.config["retention.ms"] == "-1"  # never deleted by event-time retention
    assert plan.source_changelogs == {"users", "items"}  # KTable sources restore from their topic
    assert "app-users-changelog" not in plan.changelogs
    assert plan.task_for("items", 5) is not None and plan.task_for("nope", 0) is None
    specs = {s.name: s for s in plan.topic_specs(1)}
    assert specs["app-by-item-repartition"].config == {"cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": "52428800"}


def test_plan_rejects_bad_partition_counts() -> None:
    with pytest.raises(TopologyException, match="not co-partitioned"):
        plan_topology(flights_like().build(), "app", {"orders": 3, "users": 4, "items": 6})
    with pytest.raises(TopologyException, match="Missing source topic"):
        plan_topology(flights_like().build(), "app", {"orders": 3, "users": 3, "items": None})
    b = StreamsBuilder()
    items = b.table("items")
    b.stream("orders").select_key(lambda k, v: v).repartition(Repartitioned.as_("r").with_number_of_partitions(2)).join(items, lambda a, c: a)
    with pytest.raises(TopologyException, match="doesn't match number of partitions"):
        plan_topology(b.build(), "app", {"orders": 3, "items": 6})


def test_repartitioned_count_is_used() -> None:
    b = StreamsBuilder()
    b.stream("in").repartition(Repartitioned.as_("r").with_number_of_partitions(5)).group_by_key().count(Materialized.as_("c"))
    plan = plan_topology(b.build(), "app", {"in": 2})
    assert plan.repartition == {"app-r-repartition": 5}
    assert plan.changelogs["app-c-changelog"].partitions == 5
    assert plan.changelogs["app-c-changelog"].config == {"cleanup.policy": "compact"}


def test_checkpoint_roundtrip(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path) is None
    offsets = {("app-store-changelog", 3): 42, ("topic-with-dashes", 0): 7}
    write_checkpoint(tmp_path / "0_3", offsets)
    assert read_checkpoint(tmp_path / "0_3") == offsets
    delete_checkpoint(tmp_path / "0_3")
    assert read_checkpoint(tmp_path / "0_3") is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / ".checkpoint").write_text("{oops")
    assert read_checkpoint(tmp_path / "bad") is None


def test_state_directory_lock_and_process_id(tmp_path: Path) -> None:
    a = StateDirectory(tmp_path, "app")
    assert a.holder() is None  # no state directory yet
    a.lock()
    with pytest.raises(StreamsException, match="used by another instance"):
        StateDirectory(tmp_path, "app").lock()
    assert StateDirectory(tmp_path, "app").holder() == f"this process (pid {os.getpid()})"
    pid = a.process_id()
    assert StateDirectory(tmp_path, "app").process_id() == pid  # stable across restarts
    (a.task_dir("0_0") / "rocksdb").mkdir(parents=True)
    a.cleanup()
    assert not a.task_dir("0_0").exists() and a.process_id() == pid
    a.unlock()
    assert a.holder() is None
