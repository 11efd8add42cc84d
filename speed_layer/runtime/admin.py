"""Thin helpers over confluent-kafka's ``AdminClient``: create/verify/delete topics, offsets.

All timeouts are in seconds (``timeout_s``), except :class:`.task_timeout.TaskTimeout`'s (ms);
offsets are Kafka offsets (ints).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from .client_log import CLIENT_LOGGER  # librdkafka's messages: see client_log
from .task_timeout import NotYet, TaskTimeout, retriable_broker_error, retry_broker_call

__all__ = [
    "TopicSpec",
    "TopicError",
    "TopicMismatchError",
    "ensure_topics",
    "max_message_bytes",
    "delete_topics",
    "topic_partitions",
    "end_offsets",
    "admin_client",
    "client_config",
    "ActiveMember",
    "consumer_groups",
    "group_members",
]


class TopicError(RuntimeError):
    """A topic could not be created, found or deleted."""


class TopicMismatchError(TopicError):
    """An existing topic does not have the expected number of partitions."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic to ensure: name, partition count and topic configs (e.g. ``retention.ms``).

    ``replication_factor=-1`` takes the broker's ``default.replication.factor``.
    """

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = -1




def client_config(bootstrap: str, config: Mapping[str, object] | None = None) -> dict[str, object]:
    """The librdkafka configuration of a client of ``bootstrap`` (a consumer, producer or
    admin client) beside the streams runtime: ``config`` (librdkafka settings, e.g.
    ``group.id``) plus ``bootstrap.servers`` and ``logger``, so that librdkafka's own
    messages go to the ``speed_layer.kafka`` logger (:data:`CLIENT_LOGGER`) when the client
    is polled instead of to stderr, as the streams runtime's clients' do. A ``logger`` in
    ``config`` wins."""
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER}
    conf.update(config or {})
    return conf


#: librdkafka (since 2.1) postpones the next fetch of a partition by ``fetch.queue.backoff.ms``
#: (default 1000 ms) whenever the consumer's local queue holds more than its
#: ``queued.min.messages``: a reader that drains the queue in batches then waits a second per
#: fetch. 10 ms, as the Java consumer fetches again once its records were handed out.
FETCH_QUEUE_BACKOFF_MS = 10


def reader_config(bootstrap: str, config: Mapping[str, object] | None = None) -> dict[str, object]:
    """:func:`client_config` of a consumer that reads topics to their end with assigned
    partitions (the serving layer's view reader, the ingest, the new-data sensor): with
    ``fetch.queue.backoff.ms`` :data:`FETCH_QUEUE_BACKOFF_MS`, which reads a 2,000,000-record
    view topic in 5.9 s instead of 15.8 s on one broker (``bench/bench_view_read.py``: the
    default's wait per fetch dominated). ``config`` wins."""
    return client_config(bootstrap, {"fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS, **(config or {})})


def admin_client(bootstrap: str, config: Mapping[str, object] | None = None) -> AdminClient:
    """An ``AdminClient`` for ``bootstrap`` with optional extra librdkafka settings
    (:func:`client_config`): its librdkafka messages go to the ``speed_layer.kafka``
    logger, never to stderr; a failed request is the call's exception."""
    return AdminClient(client_config(bootstrap, config))


def _partition_counts(admin: AdminClient, timeout_s: float) -> dict[str, tuple[int, bool]]:
    """``{topic: (partitions, all partitions have a leader)}`` from a metadata request."""
    md = admin.list_topics(timeout=max(0.1, timeout_s))
    out: dict[str, tuple[int, bool]] = {}
    for name, t in md.topics.items():
        if t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            continue
        ready = t.error is None and all(
            p.leader >= 0 and p.error is None for p in t.partitions.values()
        )
        out[name] = (len(t.partitions), ready)
    return out


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], timeout_s: float = 30, *,
                  timeouts: TaskTimeout | None = None) -> None:
    """Create the missing topics of ``specs`` and wait until metadata shows all of them with
    a leader for every partition.

    Existing topics are left as they are (their configs are not altered) but their partition
    count must match the spec, else :class:`TopicMismatchError` is raised (delete the topic
    or fix the spec). Idempotent; safe against a concurrent creator.

    The metadata requests and the creation follow Kafka's timeout model
    (:mod:`.task_timeout`): retriable errors (the broker unreachable, a request timing out,
    the controller moving) and topics not ready yet are retried every ``retry.backoff.ms``
    until ``task.timeout.ms``. ``timeouts``: those keys (``KafkaStreams.start`` passes its
    config's); None: ``timeout_s`` seconds in all, 100 ms between retries, 5 s per request.

    Raises:
        TaskTimeoutException: the topics not ready within the timeout (at least one retry).
        TopicMismatchError: an existing topic with another partition count.
        TopicError: the broker refused to create a topic (non-retriable error).
        StreamsException: a non-retriable error of a metadata request.
    """
    specs = list(specs)
    if not specs:
        return
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate topic names in {names}")
    if timeouts is None:
        timeouts = TaskTimeout(task_timeout_ms=int(timeout_s * 1000), retry_backoff_ms=100, max_block_ms=5000)
    admin = admin_client(bootstrap)
    created: set[str] = set()

    def attempt(request_s: float) -> None:
        current = _partition_counts(admin, request_s)
        for spec in specs:
            count = current.get(spec.name, (0, False))[0]
            # a topic this call created may show fewer partitions while it propagates
            if spec.name in current and (count > spec.partitions or (count < spec.partitions and spec.name not in created)):
                raise TopicMismatchError(
                    f"topic {spec.name!r} exists with {count} partitions, expected "
                    f"{spec.partitions}: delete it (or use a new name) to recreate it"
                )
        missing = [s for s in specs if s.name not in current and s.name not in created]
        if missing:
            _create_topics(admin, missing, request_s)
            created.update(s.name for s in missing)
        pending = [s.name for s in specs if current.get(s.name) != (s.partitions, True)]
        if pending:
            raise NotYet(f"topics {pending} not ready")

    retry_broker_call(f"creating topics {names}", attempt, timeouts, hint="check the brokers")


def _create_topics(admin: AdminClient, specs: list[TopicSpec], request_s: float) -> None:
    """Ask for the creation of ``specs`` ("already exists": created concurrently, fine).

    Raises:
        KafkaException: a retriable error (retried by the caller's loop).
        TopicError: a non-retriable error (e.g. an invalid replication factor or config).
    """
    futures = admin.create_topics(
        [
            NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication_factor,
                     config={k: str(v) for k, v in s.config.items()})
            for s in specs
        ],
        operation_timeout=max(1.0, request_s),
        request_timeout=max(1.0, request_s),
    )
    for name, fut in futures.items():
        try:
            fut.result(timeout=max(1.0, request_s) + 1)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue  # created concurrently: its partitions are verified by the caller
            if retriable_broker_error(exc):
                raise
            raise TopicError(f"creating topic {name!r} failed: {exc}") from exc


def max_message_bytes(admin: AdminClient, topics: Iterable[str], request_s: float) -> dict[str, int]:
    """``{topic: max.message.bytes}`` (bytes) of ``topics``, from one ``DescribeConfigs``
    request that waits at most ``request_s`` seconds.

    Raises:
        KafkaException: the request failed (e.g. ``_TIMED_OUT``, ``TOPIC_AUTHORIZATION_FAILED``).
    """
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in sorted(set(topics))]
    if not resources:
        return {}
    futures = admin.describe_configs(resources, request_timeout=request_s)
    return {res.name: int(fut.result(timeout=request_s + 1)["max.message.bytes"].value) for res, fut in futures.items()}


def delete_topics(bootstrap: str, names: Iterable[str], timeout_s: float = 30) -> None:
    """Delete the named topics (missing ones are ignored) and wait until metadata drops them."""
    names = list(dict.fromkeys(names))
    if not names:
        return
    deadline = time.monotonic() + timeout_s
    admin = admin_client(bootstrap)
    futures = admin.delete_topics(names, operation_timeout=max(1.0, timeout_s))
    for name, fut in futures.items():
        try:
            fut.result(timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise TopicError(f"deleting topic {name!r} failed: {exc}") from exc
    while True:
        current = _partition_counts(admin, max(0.1, min(5.0, deadline - time.monotonic())))
        left = [n for n in names if n in current]
        if not left:
            return
        if time.monotonic() > deadline:
            raise TopicError(f"topics {left} still listed {timeout_s} s after deletion")
        time.sleep(0.1)


def topic_partitions(bootstrap: str, name: str, timeout_s: float = 10) -> int | None:
    """Number of partitions of topic ``name``, or ``None`` when it does not exist."""
    admin = admin_client(bootstrap)
    md = admin.list_topics(topic=None, timeout=timeout_s)
    t = md.topics.get(name)
    if t is None:
        return None
    if t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return None
    return len(t.partitions)


def end_offsets(
    bootstrap: str, topic: str, timeout_s: float = 10, *, committed_only: bool = False
) -> dict[int, int]:
    """``{partition: end offset}``: the high watermark (next offset to be written).

    With ``committed_only`` the last stable offset is returned instead (what a
    ``read_committed`` consumer can reach: open transactions excluded).
    Raises :class:`TopicError` when the topic does not exist.
    """
    count = topic_partitions(bootstrap, topic, timeout_s)
    if count is None:
        raise TopicError(f"topic {topic!r} does not exist")
    consumer = Consumer(client_config(bootstrap, {
        "group.id": f"duet-offsets-{uuid.uuid4().hex}",  # never joins: no commits made
        "enable.auto.commit": False,
        "isolation.level": "read_committed" if committed_only else "read_uncommitted",
    }))
    try:
        return {
            p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1])
            for p in range(count)
        }
    finally:
        consumer.close()


@dataclass(frozen=True)
class ActiveMember:
    """A member of a consumer group as its coordinator describes it: the group, the member's
    ``client.id`` and the host it connects from (``/127.0.0.1``)."""

    group_id: str
    client_id: str
    host: str


def _group_timeout(timeout_s: float) -> TaskTimeout:
    """``timeout_s`` seconds in all, 100 ms between retries, 10 s per request."""
    return TaskTimeout(task_timeout_ms=int(timeout_s * 1000), retry_backoff_ms=100, max_block_ms=10_000)


def consumer_groups(bootstrap: str, timeout_s: float = 30) -> list[str]:
    """The ids of the consumer groups on the cluster, sorted (``list_consumer_groups``);
    retriable errors are retried for ``timeout_s`` seconds (as :func:`ensure_topics`).

    Raises:
        TaskTimeoutException: no answer within ``timeout_s``.
        StreamsException: a non-retriable error (e.g. not authorized to list groups).
    """
    admin = admin_client(bootstrap)

    def attempt(request_s: float) -> list[str]:
        try:
            listed = admin.list_consumer_groups(request_timeout=request_s).result(timeout=request_s + 1)
        except FutureTimeout:
            raise NotYet("no answer") from None
        return sorted(g.group_id for g in listed.valid)

    return retry_broker_call("listing the consumer groups", attempt, _group_timeout(timeout_s), hint="check the brokers")


def group_members(bootstrap: str, group_ids: Iterable[str], timeout_s: float = 30) -> list[ActiveMember]:
    """The members of the consumer groups ``group_ids`` (``describe_consumer_groups``: the
    group coordinator's view), sorted by group and client id; a group that does not exist
    has none. Kafka's ``kafka-streams-application-reset`` refuses while its group has one.
    Retriable errors (a coordinator loading or moving) are retried for ``timeout_s`` seconds.

    Raises:
        TaskTimeoutException: no answer within ``timeout_s``.
        StreamsException: a non-retriable error describing a group.
    """
    ids = list(dict.fromkeys(group_ids))
    if not ids:
        return []
    admin = admin_client(bootstrap)

    def attempt(request_s: float) -> list[ActiveMember]:
        found = []
        for group_id, fut in admin.describe_consumer_groups(ids, request_timeout=request_s).items():
            try:
                description = fut.result(timeout=request_s + 1)
            except FutureTimeout:
                raise NotYet(f"no answer for group {group_id}") from None
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                    continue
                raise
            found.extend(ActiveMember(group_id, m.client_id, m.host) for m in description.members)
        return sorted(found, key=lambda m: (m.group_id, m.client_id))

    return retry_broker_call(f"describing the consumer groups {ids}", attempt, _group_timeout(timeout_s),
                             hint="check the brokers")
