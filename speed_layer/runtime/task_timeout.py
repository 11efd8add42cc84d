"""Kafka's timeout model for the runtime's broker calls (KIP-572, ``task.timeout.ms``).

A broker call that fails with a *retriable* error (the broker unreachable or restarting, a
request timeout, leader not available, a topic unknown while its metadata propagates, a
coordinator loading) is retried every ``retry.backoff.ms`` until ``task.timeout.ms`` has
passed since the call began, then :class:`~speed_layer.errors.TaskTimeoutException` (a
``StreamsException`` whose cause is the last broker error) is raised. ``task.timeout.ms``
0 raises at the first error; above 0 there is always at least one retry, even when the
first request took the whole timeout. One request waits at most ``max.block.ms`` (capped
by what is left of ``task.timeout.ms``). Non-retriable errors (authorization, an invalid
request) fail at once with a ``StreamsException``.

Kafka's sources of the semantic: ``AbstractTask#maybeInitTaskTimeoutOrThrow`` (active and
standby tasks: restore offsets, output topic metadata) and
``GlobalStateManagerImpl#retryUntilSuccessOrThrowOnTaskTimeout`` (the global stores'
bootstrap); both raise ``StreamsException(TimeoutException(...))`` naming ``task.timeout.ms``.

:func:`retry_broker_call` is the one retry loop; :func:`topic_partition_count` and
:func:`watermarks` are the calls the runtime makes through it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ..errors import StreamsException, TaskTimeoutException

if TYPE_CHECKING:
    from ..config import StreamsConfig

log = logging.getLogger("speed_layer.timeouts")

__all__ = ["WARN_AFTER_MS", "TaskTimeout", "NotYet", "ListOffsets", "retriable_broker_error", "retriable_error_code", "retry_broker_call",
           "topic_partition_count", "watermarks"]

T = TypeVar("T")

#: a broker call still retrying after this long (ms) logs one WARNING naming what it awaits
#: and the last error; its earlier retries (a topic's metadata propagating, a coordinator
#: loading: the usual first seconds of a fresh cluster or topic) are DEBUG
WARN_AFTER_MS = 5000

#: librdkafka error codes a broker call is retried on (besides ``KafkaError.retriable()``):
#: the broker is unreachable or restarting, the topic's metadata is still propagating, the
#: controller or a coordinator is moving or loading
RETRIABLE_ERROR_CODES = frozenset(
    getattr(KafkaError, name)
    for name in ("_TRANSPORT", "_TIMED_OUT", "_TIMED_OUT_QUEUE", "_ALL_BROKERS_DOWN", "_RESOLVE", "_WAIT_COORD", "_UNKNOWN_TOPIC",
                 "_UNKNOWN_PARTITION", "_NODE_UPDATE", "_DESTROY_BROKER", "LEADER_NOT_AVAILABLE",
                 "NOT_LEADER_FOR_PARTITION", "UNKNOWN_TOPIC_OR_PART", "REQUEST_TIMED_OUT", "BROKER_NOT_AVAILABLE",
                 "REPLICA_NOT_AVAILABLE", "NETWORK_EXCEPTION", "UNKNOWN_LEADER_EPOCH", "FENCED_LEADER_EPOCH",
                 "NOT_CONTROLLER", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR")
    if hasattr(KafkaError, name)
)


@dataclass(frozen=True)
class TaskTimeout:
    """The three keys of the model, in ms: ``task_timeout_ms`` (Kafka's ``task.timeout.ms``,
    default 300000), ``retry_backoff_ms`` (``retry.backoff.ms``, 100) and ``max_block_ms``
    (``max.block.ms``, 60000: the longest one request waits)."""

    task_timeout_ms: int = 300_000
    retry_backoff_ms: int = 100
    max_block_ms: int = 60_000

    @classmethod
    def of(cls, config: "StreamsConfig") -> "TaskTimeout":
        """The timeouts of a streams config."""
        return cls(config.task_timeout_ms, config.retry_backoff_ms, config.max_block_ms)


class NotYet(Exception):
    """Raised by an attempt of :func:`retry_broker_call` whose answer came without error but
    is not usable yet and is retried as a retriable error (e.g. a topic missing from the
    metadata while it propagates, partitions without a leader). Its message is the reason."""


def retriable_error_code(err: KafkaError) -> bool:
    """Whether Kafka's clients retry ``err`` (see :data:`RETRIABLE_ERROR_CODES`)."""
    return err.code() in RETRIABLE_ERROR_CODES or bool(err.retriable())


def retriable_broker_error(exc: BaseException) -> bool:
    """Whether ``exc`` (a ``KafkaException``) is an error Kafka's clients retry: transport
    errors and timeouts, leader not available, unknown topic while metadata propagates."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and retriable_error_code(err)


def _reason(exc: BaseException) -> str:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return f"{err.str()} ({err.name()})" if isinstance(err, KafkaError) else str(exc)


def retry_broker_call(what: str, attempt: Callable[[float], T], timeout: TaskTimeout, *, hint: str = "") -> T:
    """``attempt(request_timeout_s)`` until it returns, under Kafka's timeout model (see the
    module docstring). ``what`` names the call in messages (e.g. "watermarks of
    changelog-0 (restore)"); ``hint`` is added to the timeout's message.

    ``attempt`` gets the seconds its one request may wait (``max_block_ms``, capped by what
    is left of ``task_timeout_ms``, at least 0.1) and raises a ``KafkaException`` (retried
    when :func:`retriable_broker_error`), :class:`NotYet` (retried), or any other exception
    (raised as it is).

    Raises:
        TaskTimeoutException: retriable errors for ``task_timeout_ms`` (at least one retry
            when it is above 0), naming ``what``, the attempts and ``task.timeout.ms``; its
            cause is the last broker error.
        StreamsException: a non-retriable ``KafkaException``, at once, naming ``what``.

    Logs each retry at DEBUG, and one WARNING (``speed_layer.timeouts``) once the call has
    been failing for :data:`WARN_AFTER_MS`.
    """
    started = time.monotonic()
    deadline = started + timeout.task_timeout_ms / 1000
    backoff_s = timeout.retry_backoff_ms / 1000
    attempts = 0
    warned = False
    cause: BaseException | None = None
    while True:
        attempts += 1
        request_s = max(0.1, min(timeout.max_block_ms / 1000, deadline - time.monotonic()))
        try:
            result = attempt(request_s)
        except NotYet as exc:
            cause = exc
        except KafkaException as exc:
            if not retriable_broker_error(exc):
                raise StreamsException(f"{what} failed: {_reason(exc)}") from exc
            cause = exc
        else:
            # the last retried error's traceback holds this frame, whose ``cause`` holds the
            # error: a reference cycle that would keep this frame and, through ``f_back``,
            # every caller's frame and locals (a producer...) alive until the cyclic
            # collector runs (rarely in a stream thread: ``python.gc.thresholds``)
            cause = None
            return result
        now = time.monotonic()
        if timeout.task_timeout_ms == 0 or (now >= deadline and attempts > 1):
            raise _timed_out(what, timeout, attempts, int((now - started) * 1000), cause, hint) from cause
        waited_ms = (now - started) * 1000
        if not warned and waited_ms >= WARN_AFTER_MS:  # still failing: say what is awaited, once
            warned = True
            log.warning("%s: still not done after %.1f s (%d attempts), last: %s: retrying every %d ms "
                        "(%.1f s of task.timeout.ms left)", what, waited_ms / 1000, attempts, _reason(cause),
                        timeout.retry_backoff_ms, max(0.0, deadline - now))
        else:
            log.debug("%s: %s: retrying every %d ms (%.1f s of task.timeout.ms left)", what, _reason(cause),
                      timeout.retry_backoff_ms, max(0.0, deadline - now))
        time.sleep(min(backoff_s, deadline - now) if now < deadline else backoff_s)


def _timed_out(what: str, timeout: TaskTimeout, attempts: int, elapsed_ms: int, cause: BaseException,
               hint: str) -> TaskTimeoutException:
    if timeout.task_timeout_ms == 0:
        tail = "retrying is disabled: set `task.timeout.ms` above 0 to retry (Kafka's default is 300000)"
    else:
        tail = f"adjust `task.timeout.ms` ({timeout.task_timeout_ms}) if needed"
    return TaskTimeoutException(f"{what} did not succeed within {elapsed_ms} ms ({attempts} attempt(s), last: "
                                f"{_reason(cause)}){'; ' + hint if hint else ''}: {tail}")


def topic_partition_count(client: Any, topic: str, timeout: TaskTimeout, *, what: str | None = None,
                          request_s: float | None = None) -> int:
    """The partition count of ``topic`` from the metadata of ``client`` (anything with
    ``list_topics``), under the model: a topic missing from the metadata, or with a
    retriable error (``LEADER_NOT_AVAILABLE``, ``UNKNOWN_TOPIC_OR_PART`` while it
    propagates), is retried. ``request_s``: the longest one request waits (default
    ``max_block_ms``).

    Raises:
        TaskTimeoutException: not known within ``task_timeout_ms``.
        StreamsException: a non-retriable error of the request or of the topic (e.g.
            ``TOPIC_AUTHORIZATION_FAILED``), at once.
    """

    def attempt(left_s: float) -> int:
        md = client.list_topics(topic, timeout=left_s if request_s is None else max(0.1, min(request_s, left_s)))
        t = md.topics.get(topic)
        if t is None:
            raise NotYet("not present in metadata")
        if t.error is not None:
            if not retriable_error_code(t.error):
                raise StreamsException(f"metadata of topic {topic}: {t.error.str()} ({t.error.name()})")
            raise NotYet(t.error.name())
        if not t.partitions:
            raise NotYet("no partitions in metadata")
        return len(t.partitions)

    return retry_broker_call(what or f"Partition count of topic {topic}", attempt, timeout,
                             hint="create the topic or check the brokers")


class ListOffsets:
    """Offsets of partitions through the Admin API's ListOffsets (KIP-396), one request for
    many partitions, as Kafka Streams' ``StoreChangelogReader`` asks its admin client for the
    end offsets of changelogs. Used for the watermarks of changelog and global-topic
    partitions (restore, standby, global bootstrap), ``KafkaStreams.records_lag`` and the
    application reset.

    ``client_config``: a librdkafka config (a consumer's, or just ``bootstrap.servers``); its
    connection and security keys are kept, and its ``isolation.level`` decides whether a
    partition's latest offset is the last stable offset (``read_committed``) or the high
    watermark. The admin client is made at the first request and again after a failed one:
    librdkafka 2.16's admin client can keep sending to a fenced leader epoch
    (``FENCED_LEADER_EPOCH`` for 300 s after a leader change, seen in the cluster soak)
    instead of refreshing its metadata.
    """

    #: librdkafka keys of a consumer's config an admin client takes too
    _SHARED = ("bootstrap.servers", "client.id", "logger", "security.protocol", "retry.backoff.ms",
               "retry.backoff.max.ms", "socket.connection.setup.timeout.ms")

    def __init__(self, client_config: dict[str, Any]) -> None:
        from confluent_kafka import IsolationLevel

        self._conf = {k: v for k, v in client_config.items()
                      if k in self._SHARED or k.startswith(("sasl.", "ssl.", "socket.", "reconnect."))}
        self._admin: Any = None  # made at the first request, again after a failed one
        committed = client_config.get("isolation.level") == "read_committed"
        self._isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED

    def watermarks(self, topic: str, partition: int, request_s: float) -> tuple[int, int]:
        """``(low, high)`` of ``topic``-``partition``, each request waiting at most
        ``request_s`` seconds.

        Raises:
            KafkaException: as :meth:`offsets`.
        """
        tp = (topic, partition)
        return self.offsets([tp], "earliest", request_s)[tp], self.offsets([tp], "latest", request_s)[tp]

    def offsets(self, tps: list[tuple[str, int]], which: str, request_s: float) -> dict[tuple[str, int], int]:
        """``{(topic, partition): offset}``: the ``"earliest"`` or ``"latest"`` offset of each
        of ``tps``, in one request waiting at most ``request_s`` seconds.

        Raises:
            KafkaException: the broker's error (e.g. ``NOT_LEADER_FOR_PARTITION``; librdkafka's
                "no leaders found" as ``LEADER_NOT_AVAILABLE``, retriable), or a
                ``_TIMED_OUT`` one when no answer came in time.
            ValueError: ``which`` is neither ``"earliest"`` nor ``"latest"``.
        """
        import concurrent.futures

        from confluent_kafka.admin import AdminClient, OffsetSpec

        if which not in ("earliest", "latest"):
            raise ValueError(f"which must be 'earliest' or 'latest', got {which!r}")
        if not tps:
            return {}
        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
        if self._admin is None:
            self._admin = AdminClient(self._conf)
        futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in tps}, isolation_level=self._isolation,
                                           request_timeout=max(0.1, request_s))
        out: dict[tuple[str, int], int] = {}
        try:
            for tp, future in futures.items():
                out[(tp.topic, tp.partition)] = int(future.result(timeout=request_s + 5).offset)
        except (concurrent.futures.TimeoutError, KafkaException) as exc:
            self._admin = None
            err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
            if not isinstance(err, KafkaError):
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"ListOffsets of {sorted(tps)}")) from exc
            if err.code() == KafkaError._NOENT:
                # librdkafka's "No leaders found": a partition without a known leader yet
                # (a new topic, a leader moving), retriable as LEADER_NOT_AVAILABLE
                raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE, err.str())) from exc
            raise
        return out


def watermarks(offsets: ListOffsets, topic: str, partition: int, timeout: TaskTimeout, what: str) -> tuple[int, int]:
    """``(low, high)`` offsets of ``topic``-``partition`` asked through ``offsets``, under
    the model (a new topic's leader may not be known yet: ``NOT_LEADER_FOR_PARTITION``...).
    ``what`` names the caller in messages, e.g. "restore".

    Raises:
        TaskTimeoutException: not answered within ``task_timeout_ms``.
        StreamsException: a non-retriable error, at once.
    """

    def attempt(request_s: float) -> tuple[int, int]:
        return offsets.watermarks(topic, partition, request_s)

    return retry_broker_call(f"watermarks of {topic}-{partition} ({what})", attempt, timeout)
