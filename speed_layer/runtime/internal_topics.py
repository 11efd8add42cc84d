"""Internal topics and tasks of a topology on a real cluster.

What Kafka Streams' ``StreamsPartitionAssignor`` decides before it assigns tasks:

* partition counts of repartition topics (``RepartitionTopics``): the count given with
  ``Repartitioned``; else the maximum partition count of the source topics of the
  sub-topologies writing to the topic; then ``CopartitionedTopicsEnforcer``: user topics of
  one co-partition group must have equal counts (else ``TopologyException``) and the
  repartition topics of the group take that count (a fixed count that differs fails);
* the tasks: sub-topology ``s`` has ``max(partitions of its source topics)`` tasks
  ``<s>_<p>`` (``DefaultPartitionGrouper``);
* changelog topics ``<application.id>-<store>-changelog`` (``ChangelogTopics``): one
  partition per task of the store's sub-topology, ``cleanup.policy=compact``; window and
  session stores ``compact,delete``. Deviation from Kafka: their ``retention.ms`` is -1,
  not store retention + 1 day. The broker applies time retention to record (event)
  timestamps, so Kafka's setting deletes at once the changelog of any store fed with
  historical data (2013 flights) and a restart would silently restore nothing; the store
  still expires windows by stream time, and compaction bounds the topic. Set
  ``retention.ms`` in the store's ``log_config`` to get Kafka's behaviour back.

Also :func:`reset_application`, Kafka's application reset tool.
"""
from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Iterable

from ..errors import StreamsException, TopologyException
from ..graph.nodes import StoreSpec, SubTopology
from ..topology import Topology
from .admin import TopicSpec

__all__ = ["TopologyPlan", "plan_topology", "changelog_config", "REPARTITION_CONFIG", "reset_application"]

#: Kafka's ``windowstore.changelog.additional.retention.ms`` default (1 day, ms): added to a
#: versioned store's history for ``min.compaction.lag.ms``
ADDITIONAL_RETENTION_MS = 24 * 3600 * 1000
#: Kafka's ``RepartitionTopicConfig``: records are kept until the application purges them
#: (``retention.ms`` -1), in 50 MB segments so that a purge (``deleteRecords``) frees disk
#: segment by segment rather than once a 1 GB segment is behind the purged offset
REPARTITION_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": "52428800"}


def changelog_config(spec: StoreSpec) -> dict[str, str]:
    """Topic configs of a store's changelog (Kafka's ``ChangelogTopics``/``InternalTopicConfig``)."""
    if spec.kind in ("window", "session"):
        cfg = {"cleanup.policy": "compact,delete", "retention.ms": "-1"}  # see the module docstring
    elif spec.kind == "versioned":
        cfg = {"cleanup.policy": "compact", "min.compaction.lag.ms": str((spec.history_ms or 0) + ADDITIONAL_RETENTION_MS)}
    else:
        cfg = {"cleanup.policy": "compact"}
    cfg.update({k: str(v) for k, v in spec.log_config.items()})
    return cfg


@dataclass
class TopologyPlan:
    """Topic names are full names (repartition topics with the ``<application.id>-`` prefix).

    ``partitions``: every source topic's partition count; ``task_counts``: tasks per
    sub-topology id; ``repartition``/``changelogs``: internal topics to create;
    ``store_subtopology``: store name -> sub-topology id.
    """

    application_id: str
    subtopologies: list[SubTopology]
    partitions: dict[str, int]
    task_counts: dict[int, int]
    repartition: dict[str, int]
    changelogs: dict[str, TopicSpec]
    store_subtopology: dict[str, int]
    #: full source topic names per sub-topology id
    sources: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: topics that serve as a store's changelog although they are source topics
    source_changelogs: set[str] = field(default_factory=set)

    def topic_specs(self, replication_factor: int = -1) -> list[TopicSpec]:
        """Every internal topic to ensure (repartition, then changelogs)."""
        out = [TopicSpec(t, n, dict(REPARTITION_CONFIG), replication_factor) for t, n in sorted(self.repartition.items())]
        out += [TopicSpec(s.name, s.partitions, dict(s.config), replication_factor) for _, s in sorted(self.changelogs.items())]
        return out

    def tasks(self) -> list[tuple[str, int, int]]:
        """``[(task id, sub-topology id, partition)]`` of the whole application."""
        return [(f"{s}_{p}", s, p) for s, n in sorted(self.task_counts.items()) for p in range(n)]

    def task_for(self, topic: str, partition: int) -> str | None:
        """The task reading ``topic``-``partition`` (None if no sub-topology reads it)."""
        for sid, topics in self.sources.items():
            if topic in topics:
                return f"{sid}_{partition}"
        return None

    def lead_topic(self, subtopology_id: int) -> str:
        """The source topic that stands for the sub-topology's tasks in the consumer group:
        the one with the most partitions (the task count), the first by name among equals.
        Partition ``p`` of it is task ``<sub-topology>_<p>``."""
        topics = self.sources[subtopology_id]
        n = self.task_counts[subtopology_id]
        return min(t for t in topics if self.partitions.get(t) == n)

    def lead_topics(self, subtopologies: Iterable[int] | None = None) -> list[str]:
        """The topics the stream threads subscribe to: one lead topic per sub-topology
        (see :meth:`lead_topic`), of ``subtopologies`` only when given (the config
        ``instance.subtopologies``)."""
        wanted = None if subtopologies is None else set(subtopologies)
        return sorted(self.lead_topic(sid) for sid in self.sources
                      if sid in self.task_counts and (wanted is None or sid in wanted))

    def task_of_lead(self, topic: str, partition: int) -> str | None:
        """The task a partition of a lead topic stands for (None for another topic)."""
        for sid in self.sources:
            if sid in self.task_counts and self.lead_topic(sid) == topic:
                return f"{sid}_{partition}"
        return None

    def task_partitions(self, task_id: str) -> list[tuple[str, int]]:
        """Every source partition task ``<sub-topology>_<p>`` reads: partition ``p`` of each
        source topic of its sub-topology that has one (Kafka's ``PartitionGrouper``)."""
        sid, p = (int(x) for x in task_id.split("_"))
        return [(t, p) for t in sorted(self.sources[sid]) if p < self.partitions.get(t, 0)]

    def input_topics(self) -> list[str]:
        """Source topics read by tasks (user topics and repartition topics), full names."""
        return sorted({t for ts in self.sources.values() for t in ts})

    def user_source_topics(self) -> list[str]:
        return sorted(t for t in self.input_topics() if t not in self.repartition)


def plan_topology(topology: Topology, application_id: str, user_partitions: dict[str, int | None]) -> TopologyPlan:
    """Decide repartition counts, tasks and changelogs from the user topics' counts.

    ``user_partitions``: partition count of every user source topic (None: missing).

    Raises:
        TopologyException: a missing source topic, co-partitioned topics with different
            partition counts, a ``Repartitioned`` count contradicting its co-partition group,
            or a repartition topic whose count cannot be derived.
    """
    internal = topology.internal_topics
    subs = topology.subtopologies()
    missing = sorted(t for sub in subs for t in sub.source_topics if t not in internal and user_partitions.get(t) is None)
    if missing:
        raise TopologyException(f"Missing source topic(s) {missing}: create them before starting the application (Kafka's MissingSourceTopicException)")
    user = {t: int(n) for t, n in user_partitions.items() if n is not None}
    writers: dict[str, list[SubTopology]] = {}
    for sub in subs:
        for t in sub.sink_topics:
            if t in internal:
                writers.setdefault(t, []).append(sub)
    fixed: dict[str, int] = {t: it.partitions for t, it in internal.items() if it.partitions}
    requested = dict(fixed)

    def resolve(pinned: dict[str, int]) -> dict[str, int]:
        # RepartitionTopics#setRepartitionSourceTopicPartitionCount: sub-topologies in order,
        # each unsized repartition source takes the max of the KNOWN counts of the sources of
        # the sub-topologies writing it (unsized upstream repartition topics are skipped, so
        # cycles such as a foreign-key join's subscription/response topics resolve)
        counts: dict[str, int] = {**user, **pinned}
        changed = True
        while changed:
            changed = False
            for reader in subs:
                for t in reader.source_topics:
                    if t not in internal or t in counts:
                        continue
                    vals = [counts[src] for sub in writers.get(t, []) for src in sub.source_topics if src in counts]
                    if vals:
                        counts[t] = max(vals)
                        changed = True
        unresolved = sorted(t for t in internal if t not in counts)
        if unresolved:
            raise TopologyException(f"Cannot derive the partition count of repartition topic(s) {unresolved}: no upstream source topic count")
        return counts

    pinned = dict(fixed)
    for _ in range(len(internal) + 2):
        counts = resolve(pinned)
        enforced = dict(pinned)
        for group in topology.copartition_groups:
            users = sorted(t for t in group if t not in internal)
            reps = sorted(t for t in group if t in internal)
            if users:
                ns = {t: counts[t] for t in users}
                if len(set(ns.values())) > 1:
                    raise TopologyException(f"Topics not co-partitioned: [{', '.join(f'{t} ({n} partitions)' for t, n in ns.items())}]")
                n = next(iter(ns.values()))
                for r in reps:
                    if r in requested and requested[r] != n:
                        raise TopologyException(
                            f"Number of partitions [{requested[r]}] of repartition topic [{r}] doesn't match number of partitions [{n}] of the source topic(s) {users}."
                        )
                    enforced[r] = n
            elif reps:
                fixed_ns = {requested[r] for r in reps if r in requested}
                if len(fixed_ns) > 1:
                    raise TopologyException(f"Repartition topics {reps} are co-partitioned but fixed to different partition counts {sorted(fixed_ns)}")
                n = fixed_ns.pop() if fixed_ns else max(counts[r] for r in reps)
                for r in reps:
                    enforced[r] = n
        if enforced == pinned:
            break
        pinned = enforced
    counts = resolve(pinned)

    def full(t: str) -> str:
        return f"{application_id}-{t}" if t in internal else t

    task_counts = {sub.id: max(counts[t] for t in sub.source_topics) for sub in subs if sub.source_topics}
    store_sub: dict[str, int] = {}
    changelogs: dict[str, TopicSpec] = {}
    source_changelogs: set[str] = set()
    for sub in subs:
        for s in sub.stores:
            store_sub[s] = sub.id
            spec = topology.stores[s]
            if spec.source_topic_changelog:
                source_changelogs.add(spec.source_topic_changelog)
                continue
            if not spec.logging or spec.global_topic or sub.id not in task_counts:
                continue
            name = spec.changelog_topic(application_id)
            changelogs[name] = TopicSpec(name, task_counts[sub.id], changelog_config(spec))
    return TopologyPlan(
        application_id=application_id,
        subtopologies=subs,
        partitions={full(t): n for t, n in counts.items()},
        task_counts=task_counts,
        repartition={full(t): counts[t] for t in internal},
        changelogs=changelogs,
        store_subtopology=store_sub,
        sources={sub.id: tuple(full(t) for t in sub.source_topics) for sub in subs},
        source_changelogs=source_changelogs,
    )


_FK_JOIN_TOPIC = re.compile(r".+-KTABLE-FK-JOIN-SUBSCRIPTION-(REGISTRATION|RESPONSE)-\d+-topic")


def matches_internal_topic_format(topic: str) -> bool:
    """Whether ``topic`` is named like an internal topic (Kafka's
    ``StreamsResetter#matchesInternalTopicFormat``): a changelog, a repartition topic, or a
    foreign-key join's subscription registration or response topic."""
    return (topic.endswith(("-changelog", "-repartition", "-subscription-registration-topic",
                            "-subscription-response-topic"))
            or _FK_JOIN_TOPIC.fullmatch(topic) is not None)


def reset_application(
    bootstrap: str,
    application_id: str,
    input_topics: Iterable[str],
    *,
    intermediate_topics: Iterable[str] = (),
    timeout_s: float = 30.0,
) -> list[str]:
    """Kafka's ``kafka-streams-application-reset``: reset ``input_topics`` to their
    beginning, ``intermediate_topics`` to their end, and delete the internal topics
    (``<application.id>-...-repartition`` / ``-changelog``). Local state is not touched:
    call :meth:`KafkaStreams.cleanup` on every instance too. Returns the deleted topics.

    Raises:
        StreamsException: if the consumer group ``application_id`` still has active
            members (stop every instance first) or Kafka refuses a step.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from .admin import admin_client, delete_topics, group_members
    from .task_timeout import ListOffsets

    admin = admin_client(bootstrap)
    members = group_members(bootstrap, [application_id], timeout_s)
    if members:
        raise StreamsException(
            f"Consumer group {application_id} has {len(members)} active member(s): stop every instance before resetting the application"
        )
    md = admin.list_topics(timeout=timeout_s)
    prefix = f"{application_id}-"
    internal = sorted(t for t in md.topics if t.startswith(prefix) and matches_internal_topic_format(t))
    # forget every committed offset (internal topics included), then set the wanted ones
    try:
        admin.delete_consumer_groups([application_id], request_timeout=timeout_s)[application_id].result(timeout=timeout_s)
    except KafkaException as exc:
        if "GROUP_ID_NOT_FOUND" not in str(exc) and "NOT_FOUND" not in str(exc):
            raise StreamsException(f"cannot reset the offsets of group {application_id}: {exc}") from exc
    wanted: dict[str, list[tuple[str, int]]] = {"earliest": [], "latest": []}
    for t, which in [(t, "earliest") for t in input_topics] + [(t, "latest") for t in intermediate_topics]:
        meta = md.topics.get(t)
        if meta is None or meta.error is not None:
            raise StreamsException(f"cannot reset topic {t}: it does not exist")
        wanted[which].extend((t, p) for p in meta.partitions)
    offsets = ListOffsets({"bootstrap.servers": bootstrap})
    tps = [TopicPartition(t, p, off) for which, todo in wanted.items() for (t, p), off in offsets.offsets(todo, which, timeout_s).items()]
    if tps:
        res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(application_id, tps)], request_timeout=timeout_s)
        for fut in res.values():
            fut.result(timeout=timeout_s)
    delete_topics(bootstrap, internal, timeout_s=timeout_s)
    return internal
