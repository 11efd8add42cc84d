"""Thin helpers over confluent-kafka's ``AdminClient``: create/verify/delete topics, offsets.

All timeouts are in seconds (``timeout_s``); offsets are Kafka offsets (ints).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = [
    "TopicSpec",
    "TopicError",
    "TopicMismatchError",
    "ensure_topics",
    "delete_topics",
    "topic_partitions",
    "end_offsets",
    "admin_client",
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


def admin_client(bootstrap: str, config: Mapping[str, str | int] | None = None) -> AdminClient:
    """An ``AdminClient`` for ``bootstrap`` with optional extra librdkafka settings."""
    conf: dict[str, str | int] = {"bootstrap.servers": bootstrap}
    conf.update(config or {})
    return AdminClient(conf)


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


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], timeout_s: float = 30) -> None:
    """Create the missing topics of ``specs`` and wait until metadata shows all of them.

    Existing topics are left as they are (their configs are not altered) but their partition
    count must match the spec, else :class:`TopicMismatchError` is raised (delete the topic
    or fix the spec). Idempotent; safe against a concurrent creator.
    """
    specs = list(specs)
    if not specs:
        return
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate topic names in {names}")
    deadline = time.monotonic() + timeout_s
    admin = admin_client(bootstrap)
    existing = _partition_counts(admin, timeout_s)

    def check(spec: TopicSpec, actual: int) -> None:
        if actual != spec.partitions:
            raise TopicMismatchError(
                f"topic {spec.name!r} exists with {actual} partitions, expected "
                f"{spec.partitions}: delete it (or use a new name) to recreate it"
            )

    missing: list[TopicSpec] = []
    for spec in specs:
        if spec.name in existing:
            check(spec, existing[spec.name][0])
        else:
            missing.append(spec)

    if missing:
        futures = admin.create_topics(
            [
                NewTopic(
                    s.name,
                    num_partitions=s.partitions,
                    replication_factor=s.replication_factor,
                    config={k: str(v) for k, v in s.config.items()},
                )
                for s in missing
            ],
            operation_timeout=max(1.0, timeout_s),
            request_timeout=max(1.0, timeout_s),
        )
        for name, fut in futures.items():
            try:
                fut.result(timeout=max(0.1, deadline - time.monotonic()))
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # created concurrently: its partitions are verified below
                raise TopicError(f"creating topic {name!r} failed: {exc}") from exc

    # Wait until metadata shows every topic with leaders for all its partitions.
    while True:
        current = _partition_counts(admin, max(0.1, min(5.0, deadline - time.monotonic())))
        pending = []
        for spec in specs:
            if spec.name not in current:
                pending.append(spec.name)
                continue
            count, ready = current[spec.name]
            if count >= spec.partitions:
                check(spec, count)
            if count != spec.partitions or not ready:
                pending.append(spec.name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TopicError(f"topics {pending} not ready after {timeout_s} s")
        time.sleep(0.1)


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
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"duet-offsets-{uuid.uuid4().hex}",  # never joins: no commits made
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
        }
    )
    try:
        return {
            p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1])
            for p in range(count)
        }
    finally:
        consumer.close()
