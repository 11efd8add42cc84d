"""The configuration of an embedded KRaft node: its quorum, ports, ``server.properties``.

Every node is broker and controller (KRaft combined mode) on loopback, configured for
2013 data: ``log.retention.ms=-1``, no topic auto-creation, segments rolled by size only,
``group.initial.rebalance.delay.ms=0``. One node gets replication factors 1; three or more
get 3 with ``min.insync.replicas`` 2 (:class:`Quorum`).

Kafka's test harness splits the same way: ``TestKitNodes`` plans the nodes (ids, cluster
id, folders, per-node overrides) and ``KafkaClusterTestKit.Builder#createNodeConfig``
writes each node's ``KafkaConfig`` (roles, listeners, ``controller.quorum.voters`` from the
controllers' ports, the overrides last). Here :class:`Quorum` is the plan shared by the
nodes and :func:`server_properties` one node's config, ``extra`` applied last.
"""

from __future__ import annotations

import base64
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOG4J2", "Quorum", "server_properties", "free_ports", "port_in_use", "kafka_uuid"]

#: ``log4j2.properties`` of every Kafka JVM duet starts.
LOG4J2 = """\
# Written by duet's EmbeddedKafka: keep the embedded broker quiet.
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = STDOUT
# One line when the server is up or down, handy when reading broker.log.
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (each may be taken by someone else before use)."""
    ports: list[int] = []
    while len(ports) < n:
        port = _free_port()
        if port not in ports:
            ports.append(port)
    return ports


def port_in_use(port: int) -> bool:
    """True when ``port`` cannot be bound on ``127.0.0.1``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def kafka_uuid() -> str:
    """A random Kafka ``Uuid`` string (what ``StorageTool random-uuid`` prints).

    Kafka prints 16 random bytes as URL-safe base64 without padding and never hands out an
    id whose string starts with ``-``; generating it here saves one JVM start.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class Quorum:
    """The KRaft controller quorum a node belongs to: node id -> controller port, cluster id."""

    controller_ports: dict[int, int]
    cluster_id: str

    @property
    def voters(self) -> str:
        """``controller.quorum.voters``: ``1@127.0.0.1:<port>,2@...``."""
        return ",".join(f"{n}@127.0.0.1:{p}" for n, p in sorted(self.controller_ports.items()))

    @property
    def replication_factor(self) -> int:
        """Replication factor of every topic: the node count, at most 3."""
        return min(3, len(self.controller_ports))

    @property
    def min_insync_replicas(self) -> int:
        """``min.insync.replicas``: the node count, at most 2."""
        return min(2, len(self.controller_ports))


def server_properties(
    node_id: int, port: int, controller_port: int, data_dir: Path, quorum: Quorum, extra: dict[str, str]
) -> dict[str, str]:
    """``server.properties`` of node ``node_id`` of ``quorum``: its client listener on
    ``port``, its controller listener on ``controller_port``, its log dir ``data_dir``;
    ``extra`` is applied last (it overrides any key)."""
    replicas, min_isr = str(quorum.replication_factor), str(quorum.min_insync_replicas)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": quorum.voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        # One node: replication factor 1; three or more: 3 with min.insync.replicas 2.
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "8",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        # Fast groups in tests; clients may use short session timeouts.
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        # 2013 data must never be deleted by time retention.
        "log.retention.ms": "-1",
        "log.retention.bytes": "-1",
        # Roll segments by size only. A segment's time-based roll compares record
        # (event) timestamps: it rolls once an appended batch is log.roll.ms (7 days)
        # past the segment's first (KIP-33). A backfill of a year of 2013 flights thus
        # rolled a segment per week of event time in every partition (~1,000 rolls and
        # compactions per flagship run): the broker's CPU per flight fell from 0.036 to
        # 0.020 ms without them. 1,000 years, in ms.
        "log.roll.ms": str(1000 * 365 * 24 * 3600 * 1000),
        # Small machine: few threads, a small cleaner buffer (compacted changelogs).
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "4",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        "log.cleaner.io.buffer.size": str(1024 * 1024),
        "message.max.bytes": str(8 * 1024 * 1024),
    }
    props.update(extra)
    return props
