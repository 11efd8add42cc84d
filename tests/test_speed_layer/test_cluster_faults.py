"""Three KRaft brokers on loopback: the cluster fails over, and the speed layer holds its
guarantees through broker faults under load (small versions of
``bench/faults/cluster_faults.py``).

* exactly_once_v2: SIGKILL of the leader of the input and the changelog partition
  mid-transaction, and an instance SIGKILLed while a broker is down: nothing lost, nothing
  counted twice, no instance lost, as a read_committed consumer sees it (the bench also
  kills the output's leader);
* at_least_once runs in the bench only (``--guarantee at_least_once``, its soak): its paused
  coordinator and rolling restarts took 140-220 s of a make test that must stay under 30
  minutes; the coordinator moving is covered by the committed-offsets test below;
* committed offsets stay readable while the group coordinator restarts (the SIGSEGV of
  librdkafka's admin OffsetFetch, see ``speed_layer.runtime.committed_offsets``).

Kafka's own suite does the same on its ``EmbeddedKafkaCluster`` (e.g.
``EosIntegrationTest``, ``KTableKTableForeignKeyJoinIntegrationTest`` under broker
bounces). The cluster is this module's own: the session's single broker is left alone.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from bench.faults.cluster_faults import describe, run
from speed_layer.admin import TopicSpec, ensure_topics
from speed_layer.admin import EmbeddedKafkaCluster

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafkaCluster]:
    with EmbeddedKafkaCluster(3, tmp_path_factory.mktemp("cluster")) as c:
        yield c


def test_three_nodes_replicate_and_elect_a_new_leader(cluster: EmbeddedKafkaCluster) -> None:
    ensure_topics(cluster.bootstrap_servers, [TopicSpec("replicated", 3)])
    cluster.wait_in_sync()
    assert len(cluster.bootstrap_servers.split(",")) == 3
    leader = cluster.leader_of("replicated", 0)
    cluster.kill(leader)
    try:
        # The controller fences the dead node (broker.session.timeout.ms, 9 s) and moves
        # the leadership to an in-sync replica.
        deadline = time.monotonic() + 60
        while cluster.leader_of("replicated", 0) == leader:
            assert time.monotonic() < deadline, "leadership did not move off a killed node in 60 s"
            time.sleep(0.5)
        assert cluster.under_replicated(), "a partition of a killed node must be under-replicated"
    finally:
        cluster.restart(leader)
    cluster.wait_in_sync()
    assert cluster.under_replicated() == []


def test_committed_offsets_stay_readable_while_the_group_coordinator_restarts(cluster: EmbeddedKafkaCluster) -> None:
    """A stream thread reads its group's committed offsets without joining the group
    (:mod:`speed_layer.runtime.committed_offsets`). With the Admin API's
    ``list_consumer_group_offsets`` instead, the reading process died by SIGSEGV (exit -11)
    at the first restart of the coordinator in this same loop (librdkafka 2.16); a soak's
    instances died so."""
    ensure_topics(cluster.bootstrap_servers, [TopicSpec("committed-read", 3)])
    committer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "committed-read"})
    committer.commit(offsets=[TopicPartition("committed-read", p, o) for p, o in enumerate((10, 20, 30))],
                     asynchronous=False)
    committer.close()
    cluster.wait_in_sync()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.test_speed_layer.committed_reader_loop", cluster.bootstrap_servers,
         "committed-read", "committed-read", "10,20,30"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(2):
            node = cluster.coordinator_of("committed-read")
            cluster.terminate(node)
            time.sleep(1)
            cluster.restart(node)
            assert proc.poll() is None, f"the reader died with exit code {proc.returncode}"
            cluster.wait_in_sync()
        out, _ = proc.communicate("", timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, f"the reader exited with {proc.returncode}"
    counts = dict(item.split("=") for item in out.split())
    assert int(counts["ok"]) > 10 and counts["wrong"] == "0", out


def test_exactly_once_through_leader_kills_and_an_instance_kill_with_a_broker_down(
    cluster: EmbeddedKafkaCluster, tmp_path: Path
) -> None:
    report = run(cluster, "exactly_once_v2", tmp_path,
                 faults=("leader-input", "leader-changelog", "instance-kill-broker-down"),
                 rate=300.0, down_s=4.0, gap_s=(2.0, 3.0), seed=3)
    assert report.records > 2000, describe(report)
    assert all(f.recovery_s >= 0 for f in report.faults), describe(report)
    assert report.errors == [], describe(report)
    assert (report.lost_keys, report.duplicated_keys, report.repeated_counts, report.instances_died) == (0, 0, 0, 0), \
        describe(report)
