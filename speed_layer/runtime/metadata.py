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

:class:`StreamsMetadataState` answers a client's metadata queries from the group
(Kafka's ``StreamsMetadataState``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from confluent_kafka import KafkaException

from ..errors import InvalidStateStoreException, StreamsException

if TYPE_CHECKING:
    from ..config import StreamsConfig
    from ..topology import Topology
    from .internal_topics import TopologyPlan

__all__ = ["HostInfo", "StreamsMetadata", "KeyQueryMetadata", "SERVER_SEPARATOR", "GroupMember", "describe_members",
           "group_streams_metadata", "key_query_metadata", "standby_assignment", "standby_hosts_of", "StreamsMetadataState"]

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
    hosts keeping a standby of its task (``num.standby.replicas``) and the partition."""

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


@dataclass(frozen=True)
class GroupMember:
    """A stream thread's consumer in the application's group.

    Attributes:
        client_id: its ``client.id``.
        process_id: the instance's process id (from the client id), shared by its threads.
        host: its ``application.server``, None when not set.
        partitions: the lead-topic partitions assigned to it, ``(topic, partition)``: one per
            active task (see ``TopologyPlan.lead_topic``).
    """

    client_id: str
    process_id: str
    host: HostInfo | None
    partitions: frozenset[tuple[str, int]]


def process_of(application_id: str, client_id: str) -> str | None:
    """The process id in a stream thread consumer's ``client.id``
    (``<application.id>-<process id>-StreamThread-<n>-consumer[@host:port]``), else None."""
    base = client_id.rpartition(SERVER_SEPARATOR)[0] or client_id
    prefix = f"{application_id}-"
    if not base.startswith(prefix) or "-StreamThread-" not in base:
        return None
    return base[len(prefix):].rpartition("-StreamThread-")[0] or None


def describe_members(admin: object, application_id: str, timeout_s: float = 10.0) -> list[GroupMember]:
    """The stream-thread members of group ``application_id`` and their assignments, sorted
    by client id (``describe_consumer_groups``: the group coordinator's view).

    Raises:
        confluent_kafka.KafkaException: the group cannot be described.
    """
    description = admin.describe_consumer_groups([application_id], request_timeout=timeout_s)[application_id].result()  # type: ignore[attr-defined]
    out = []
    for member in description.members:
        process = process_of(application_id, member.client_id)
        if process is None:
            continue
        parts = frozenset((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) if member.assignment else frozenset()
        out.append(GroupMember(member.client_id, process, server_of(member.client_id), parts))
    return sorted(out, key=lambda m: m.client_id)


def standby_assignment(plan: TopologyPlan, members: Iterable[GroupMember], num_standby_replicas: int) -> dict[str, tuple[str, ...]]:
    """Task id -> the process ids that keep a standby of it (Kafka's ``num.standby.replicas``).

    Every instance computes the same answer from the group's assignment: the candidates of
    a task are the processes other than its active one, sorted; the task takes
    ``num.standby.replicas`` of them (fewer when there are not enough), starting at
    ``index of the task mod candidates``, so standbys spread evenly. Tasks without an
    active owner (mid-rebalance) get none. As Kafka's assignor, a standby never sits on
    the instance of the active task.
    """
    members = list(members)
    processes = sorted({m.process_id for m in members})
    active: dict[str, str] = {}
    for m in members:
        for t, p in m.partitions:
            tid = plan.task_of_lead(t, p)
            if tid is not None:
                active[tid] = m.process_id
    out: dict[str, tuple[str, ...]] = {}
    if num_standby_replicas <= 0:
        return out
    for i, (tid, _, _) in enumerate(plan.tasks()):
        owner = active.get(tid)
        if owner is None:
            continue
        candidates = [p for p in processes if p != owner]
        k = min(num_standby_replicas, len(candidates))
        if k:
            out[tid] = tuple(candidates[(i + j) % len(candidates)] for j in range(k))
    return out


def group_streams_metadata(admin: object, plan: TopologyPlan, global_stores: Iterable[str],
                           timeout_s: float = 10.0, members: list[GroupMember] | None = None) -> list[StreamsMetadata]:
    """Every instance of the group ``plan.application_id`` that published an
    ``application.server``, sorted by host (``members``: an already read
    :func:`describe_members`).

    Raises:
        confluent_kafka.KafkaException: the group cannot be described.
    """
    if members is None:
        members = describe_members(admin, plan.application_id, timeout_s)
    by_host: dict[HostInfo, tuple[set[tuple[str, int]], list[str]]] = {}
    for member in members:
        if member.host is None:
            continue
        parts, ids = by_host.setdefault(member.host, (set(), []))
        ids.append(member.client_id)
        parts.update(member.partitions)
    globals_ = frozenset(global_stores)
    return [StreamsMetadata(host, stores_of(plan, parts) | globals_, frozenset(parts), tuple(sorted(ids)))
            for host, (parts, ids) in sorted(by_host.items())]


def key_query_metadata(plan: TopologyPlan, metadata: list[StreamsMetadata], store: str,
                       key_bytes: bytes, standby_hosts: dict[str, frozenset[HostInfo]] | None = None) -> KeyQueryMetadata:
    """The instance hosting ``key_bytes`` of ``store`` among ``metadata``
    (``KeyQueryMetadata.NOT_AVAILABLE`` while no instance owns its partition, e.g. during a
    rebalance); ``standby_hosts``: task id -> the hosts of its standbys."""
    from .partitioning import partition_for_key

    sid = plan.store_subtopology[store]
    topics = plan.sources[sid]
    n = plan.task_counts[sid]
    partition = partition_for_key(key_bytes, n)
    standbys = (standby_hosts or {}).get(f"{sid}_{partition}", frozenset())
    for md in metadata:
        if any((t, partition) in md.topic_partitions for t in topics):
            return KeyQueryMetadata(md.host_info, standbys, partition)
    return KeyQueryMetadata(UNAVAILABLE, standbys, partition)


def standby_hosts_of(plan: TopologyPlan, members: list[GroupMember], num_standby_replicas: int) -> dict[str, frozenset[HostInfo]]:
    """Task id -> the ``application.server`` of the instances keeping a standby of it."""
    hosts = {m.process_id: m.host for m in members if m.host is not None}
    return {tid: frozenset(hosts[p] for p in procs if p in hosts)
            for tid, procs in standby_assignment(plan, members, num_standby_replicas).items()}


class StreamsMetadataState:
    """Which instance of a client's application hosts which store and key (Kafka's
    ``StreamsMetadataState``), read from the consumer group at each call (the group
    coordinator's current assignment, see the module docstring).

    Args:
        config: the client's config.
        topology: the client's topology.
        state: the client's state (``KafkaStreams.state``).
        plan: the client's topology plan, None before it starts.
        global_stores: the client's global stores, by name.
        admin: the client's admin client; ``reset_admin`` drops it after a failed request.
    """

    def __init__(self, config: StreamsConfig, topology: Topology, state: Callable[[], str],
                 plan: Callable[[], TopologyPlan | None], global_stores: Callable[[], Mapping[str, Any]],
                 admin: Callable[[], Any], reset_admin: Callable[[], None]) -> None:
        self.config, self.topology = config, topology
        self._state, self._plan, self._global_stores = state, plan, global_stores
        self._admin, self._reset_admin = admin, reset_admin

    def known_store(self, store: str) -> None:
        """Check that ``store`` is a store of the topology.

        Raises:
            InvalidStateStoreException: it is not.
        """
        if store not in self.topology.stores:
            raise InvalidStateStoreException(f"Cannot get state store {store} because no such store is registered in the topology.")

    def _running_plan(self) -> TopologyPlan:
        """The plan of the running client (Kafka's ``validateIsRunningOrRebalancing``).

        Raises:
            StreamsException: the client is not RUNNING or REBALANCING.
        """
        state, plan = self._state(), self._plan()
        if state not in ("RUNNING", "REBALANCING") or plan is None:
            raise StreamsException(f"KafkaStreams is not running. State is {state}.")
        return plan

    def _group_error(self, exc: KafkaException) -> StreamsException:
        self._reset_admin()
        return StreamsException(f"cannot describe consumer group {self.config.application_id!r}: {exc}")

    def all_metadata(self) -> list[StreamsMetadata]:
        """``KafkaStreams.streams_metadata()``.

        Raises:
            StreamsException: the client is not RUNNING/REBALANCING, or the group cannot be
                described (the message says why).
        """
        plan = self._running_plan()
        try:
            return group_streams_metadata(self._admin(), plan, self._global_stores())
        except KafkaException as exc:
            raise self._group_error(exc) from exc

    def all_metadata_for_store(self, store: str) -> list[StreamsMetadata]:
        """``KafkaStreams.streams_metadata_for_store(store)``.

        Raises:
            InvalidStateStoreException: unknown store.
            StreamsException: as :meth:`all_metadata`.
        """
        self.known_store(store)
        return [m for m in self.all_metadata() if store in m.state_store_names]

    def key_query_metadata(self, store: str, key: Any, serializer: Any = None) -> KeyQueryMetadata:
        """``KafkaStreams.query_metadata_for_key(store, key, serializer)``.

        Raises:
            InvalidStateStoreException: unknown store, or a global store.
            StreamsException: as :meth:`all_metadata`.
        """
        self.known_store(store)
        global_stores = self._global_stores()
        if store in global_stores:
            raise InvalidStateStoreException(f"{store} is a global store: every instance hosts all of it")
        if serializer is None:
            serializer = self.topology.stores[store].key_serde or self.config.default_key_serde
        key_bytes = serializer.serialize(key) if hasattr(serializer, "serialize") else serializer(key)
        plan = self._running_plan()
        try:
            members = describe_members(self._admin(), self.config.application_id)
        except KafkaException as exc:
            raise self._group_error(exc) from exc
        metadata = group_streams_metadata(None, plan, global_stores, members=members)
        standbys = standby_hosts_of(plan, members, self.config.num_standby_replicas)
        return key_query_metadata(plan, metadata, store, key_bytes, standbys)
