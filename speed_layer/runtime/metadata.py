"""Which instance of an application hosts which task, store and key (interactive queries
across instances), as Kafka Streams' ``StreamsMetadata`` / ``KeyQueryMetadata``.

Kafka Streams ships each instance's ``application.server`` in its consumer-group subscription
userdata, which confluent-kafka does not expose. duet puts it in the consumer's ``client.id``
instead (``<application.id>-<process id>-StreamThread-<n>-consumer@<host>:<port>``) and reads
the group's members and their assigned partitions with the admin API
(``describe_consumer_groups``): the group coordinator is the source of truth for who owns
which partition, as it is for Kafka's assignor.

A task ``<sub-topology>_<partition>`` reads partition ``p`` of each source topic of its
sub-topology, so the owner of a key of store ``s`` is the member assigned partition
``partition_for_key(key bytes, n)`` of the sub-topology of ``s`` (the default partitioner,
murmur2, as Kafka's ``DefaultStreamPartitioner``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .internal_topics import TopologyPlan

__all__ = ["HostInfo", "StreamsMetadata", "KeyQueryMetadata", "SERVER_SEPARATOR", "group_streams_metadata",
           "key_query_metadata"]

#: Between the client id and ``application.server`` in a stream thread consumer's ``client.id``.
SERVER_SEPARATOR = "@"


@dataclass(frozen=True, order=True)
class HostInfo:
    """``application.server`` of an instance (Kafka's ``HostInfo``); ``unavailable:-1`` when unknown."""

    host: str
    port: int

    @classmethod
    def parse(cls, server: str) -> HostInfo:
        """``"host:port"`` -> HostInfo.

        Raises:
            ValueError: not ``host:port`` with an integer port.
        """
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"application.server must be host:port, got {server!r}")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


UNAVAILABLE = HostInfo("unavailable", -1)


@dataclass(frozen=True)
class StreamsMetadata:
    """One instance of the application (Kafka's ``StreamsMetadata``).

    Attributes:
        host_info: its ``application.server``.
        state_store_names: the stores its active tasks host, global stores included.
        topic_partitions: the source partitions assigned to it, ``(topic, partition)``.
        client_ids: the consumer client ids of its stream threads.
    """

    host_info: HostInfo
    state_store_names: frozenset[str]
    topic_partitions: frozenset[tuple[str, int]]
    client_ids: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where a key of a store lives (Kafka's ``KeyQueryMetadata``): the active host, the
    standby hosts (none: duet has no standby replicas yet) and the partition."""

    active_host: HostInfo
    standby_hosts: frozenset[HostInfo]
    partition: int

    @property
    def available(self) -> bool:
        return self.active_host != UNAVAILABLE


KeyQueryMetadata.NOT_AVAILABLE = KeyQueryMetadata(UNAVAILABLE, frozenset(), -1)  # type: ignore[attr-defined]


def server_of(client_id: str) -> HostInfo | None:
    """The ``application.server`` encoded in a consumer's ``client.id``, if any."""
    _, sep, server = client_id.rpartition(SERVER_SEPARATOR)
    if not sep:
        return None
    try:
        return HostInfo.parse(server)
    except ValueError:
        return None


def stores_of(plan: TopologyPlan, partitions: Iterable[tuple[str, int]]) -> frozenset[str]:
    """Stores hosted by the tasks that read ``partitions``."""
    tasks = {(sid, p) for t, p in partitions for sid, topics in plan.sources.items() if t in topics}
    return frozenset(s for s, sid in plan.store_subtopology.items() if any(t_sid == sid for t_sid, _ in tasks))


def group_streams_metadata(admin: object, plan: TopologyPlan, global_stores: Iterable[str],
                           timeout_s: float = 10.0) -> list[StreamsMetadata]:
    """Every instance of the group ``plan.application_id`` that published an
    ``application.server``, sorted by host.

    Raises:
        confluent_kafka.KafkaException: the group cannot be described.
    """
    group = plan.application_id
    description = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result()  # type: ignore[attr-defined]
    by_host: dict[HostInfo, tuple[set[tuple[str, int]], list[str]]] = {}
    for member in description.members:
        host = server_of(member.client_id)
        if host is None:
            continue
        parts, ids = by_host.setdefault(host, (set(), []))
        ids.append(member.client_id)
        if member.assignment is not None:
            parts.update((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)
    globals_ = frozenset(global_stores)
    return [StreamsMetadata(host, stores_of(plan, parts) | globals_, frozenset(parts), tuple(sorted(ids)))
            for host, (parts, ids) in sorted(by_host.items())]


def key_query_metadata(plan: TopologyPlan, metadata: list[StreamsMetadata], store: str,
                       key_bytes: bytes) -> KeyQueryMetadata:
    """The instance hosting ``key_bytes`` of ``store`` among ``metadata``
    (``KeyQueryMetadata.NOT_AVAILABLE`` while no instance owns its partition, e.g. during a
    rebalance)."""
    from .partitioning import partition_for_key

    sid = plan.store_subtopology[store]
    topics = plan.sources[sid]
    n = plan.task_counts[sid]
    partition = partition_for_key(key_bytes, n)
    for md in metadata:
        if any((t, partition) in md.topic_partitions for t in topics):
            return KeyQueryMetadata(md.host_info, frozenset(), partition)
    return KeyQueryMetadata(UNAVAILABLE, frozenset(), partition)
