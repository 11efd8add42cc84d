"""At-least-once offset commits that never block the stream thread.

Kafka Streams commits the offsets of at-least-once tasks with ``commitSync``, which waits
at most ``default.api.timeout.ms`` (ms, Kafka's default 60000); on its
``TimeoutException`` ``TaskManager#commit`` leaves the outputs flushed and commits the
offsets at a later commit, so the thread never blocks for good. librdkafka's synchronous
commit has no timeout (it waits forever, and retries the coordinator lookup forever while
no broker answers: librdkafka issue #3740, open), and confluent-kafka blocks every other
call of the same consumer while it waits (measured with 2.16.1 against a paused broker:
``poll`` and even ``position`` wait for it). So duet sends the commit asynchronously and
the stream thread picks its result up (the consumer's ``on_commit`` callback, served by the
thread's own polls, or by ``consumer.close()``):

- at most one commit is in flight: while it is, later commits are deferred (logged at
  INFO) until it returns, so that an older commit landing late never moves the group's
  offsets back;
- a commit that has not returned ``default.api.timeout.ms`` + :data:`COMMIT_GRACE_S` after
  it was sent is logged once as a WARNING naming the thread and the partitions; the offsets
  stay uncommitted (``StreamThread.committed`` unchanged) until it returns, and the thread
  keeps polling and processing meanwhile;
- once it returns: success updates the committed offsets and writes the checkpoints (with
  the changelog offsets acknowledged when it was sent, i.e. those of the stores' flush); a
  rebalance, coordinator or retriable error defers the offsets to the next commit (INFO);
  any other error fails the thread (``StreamsException``), as before.

Difference from Kafka: the thread does not wait for the result of a commit before it
polls again (it is collected at the next loop); closing waits for it, bounded (see
``TaskCommitter.await_in_flight``).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

log = logging.getLogger("speed_layer.thread")

__all__ = ["COMMIT_GRACE_S", "COORDINATOR_ERRORS", "InFlightCommit", "OffsetCommits", "REBALANCE_ERRORS", "describe_offsets"]

TP = tuple[str, int]
#: errors of a group coordinator that is away, moving or loading (the request is retried later)
COORDINATOR_ERRORS = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
#: offset-commit errors of a group that is rebalancing (the commit is retried later)
REBALANCE_ERRORS = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID}

#: how much longer than ``default.api.timeout.ms`` a commit may take before it is reported
#: as not returned, s (librdkafka's own request timeouts are not bounded by that key)
COMMIT_GRACE_S = 1.0


@dataclass
class InFlightCommit:
    """One asynchronous offset commit and what the thread does once it succeeds."""

    #: the offsets sent (the next offset to read per partition)
    offsets: dict[TP, int]
    #: the tasks owning them when it was sent (their checkpoints are written on success)
    tasks: frozenset[str]
    #: the tasks whose processor metadata it carries (their flag is set again on failure)
    metadata_tasks: frozenset[str]
    #: the changelog offsets acknowledged when it was sent, after the stores' flush: the
    #: checkpoints written on success (later acknowledgements may be of unflushed writes)
    acked: dict[TP, int]
    #: ``time.monotonic()`` when it was sent, s
    sent: float
    #: set by the consumer's ``on_commit`` callback
    returned: bool = False
    #: its error (None: committed)
    error: KafkaError | None = None
    #: whether the "did not return" warning was logged
    warned: bool = False


class OffsetCommits:
    """The at-least-once commit in flight of one stream thread (see the module docstring).

    Args:
        owner: the thread's name, for the logs.
        api_timeout_ms: ``default.api.timeout.ms``, ms.
    """

    def __init__(self, owner: str, api_timeout_ms: int) -> None:
        self.owner = owner
        #: how long a commit may stay in flight before it is reported, s
        self.bound_s = api_timeout_ms / 1000 + COMMIT_GRACE_S
        self.pending: InFlightCommit | None = None
        # the callback may run in consumer.close()'s thread (see StreamThread._shutdown)
        self._lock = threading.Lock()

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition] | None) -> None:
        """The consumer's ``on_commit`` callback: record the result of the commit in flight
        (the first partition's error when the request itself succeeded)."""
        if err is None:
            err = next((tp.error for tp in partitions or [] if tp.error is not None), None)
        with self._lock:
            pending = self.pending
            if pending is not None and not pending.returned:
                pending.error, pending.returned = err, True

    def send(self, consumer: Any, committable: list[TopicPartition], commit: InFlightCommit) -> None:
        """Send ``commit`` asynchronously (``committable``: its offsets with their metadata).
        An error raised at once is kept as its result."""
        assert self.pending is None, "one commit in flight at most"
        self.pending = commit
        try:
            consumer.commit(offsets=committable, asynchronous=True)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else KafkaError(KafkaError._FAIL, str(exc))
            with self._lock:
                commit.error, commit.returned = err, True

    def in_flight(self) -> bool:
        """Whether a commit was sent and has not returned."""
        pending = self.pending
        return pending is not None and not pending.returned

    def overdue(self, now: float | None = None) -> bool:
        """Whether the commit in flight has been so for longer than :attr:`bound_s`."""
        pending = self.pending
        now = time.monotonic() if now is None else now
        return pending is not None and not pending.returned and now - pending.sent > self.bound_s

    def returned(self) -> InFlightCommit | None:
        """The commit sent, once it has returned (and forget it); None while none has."""
        with self._lock:
            pending = self.pending
            if pending is None or not pending.returned:
                return None
            self.pending = None
            return pending

    def warn_if_overdue(self) -> None:
        """Log once (WARNING) a commit that has not returned within :attr:`bound_s`."""
        pending = self.pending
        if pending is not None and not pending.warned and self.overdue():
            pending.warned = True
            log.warning("%s: the offset commit of %s has not returned %.1f s after it was sent (default.api.timeout.ms + "
                        "%.0f s): the offsets stay uncommitted and later commits wait until it returns",
                        self.owner, describe_offsets(pending.offsets), time.monotonic() - pending.sent, COMMIT_GRACE_S)

    def describe(self) -> str:
        """The partitions of the commit in flight and its age, for the logs."""
        pending = self.pending
        if pending is None:
            return "none"
        return f"{describe_offsets(pending.offsets)} (sent {time.monotonic() - pending.sent:.1f} s ago)"


def describe_offsets(offsets: dict[TP, int]) -> str:
    """``topic-partition@offset`` of each partition, sorted, for the logs."""
    return ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(offsets.items()))
