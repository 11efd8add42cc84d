"""Waiting until a client has processed and committed its input as of now (the work of
:meth:`KafkaStreams.wait_until_caught_up <speed_layer.runtime.kafka_streams.KafkaStreams.wait_until_caught_up>`).

Source topics first, then the repartition topics, transitively, until their end offsets no
longer move. A partition of a local thread counts when the thread's committed offset
reached the target (the thread is asked to commit as soon as it has processed what it
fetched); a partition of another member counts when the group's committed offset reached
it and some member owns its task.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ..config import StreamsConfig
from .internal_topics import TopologyPlan
from .metadata import describe_members
from .task_timeout import retriable_broker_error

if TYPE_CHECKING:
    from .stream_thread import StreamThread

log = logging.getLogger("speed_layer.streams")

__all__ = ["CatchUpWaiter"]

#: the pause between two attempts to read an end offset, s
RETRY_S = 0.2


class CatchUpWaiter:
    """One wait of a client (see the module docstring): ``state`` and ``threads`` read the
    client's current state and stream threads, ``admin`` / ``reset_admin`` its shared admin
    client (reset after a failed request)."""

    def __init__(self, config: StreamsConfig, plan: TopologyPlan, state: Callable[[], str], threads: Callable[[], list["StreamThread"]],
                 admin: Callable[[], Any], reset_admin: Callable[[], None], logger: logging.Logger) -> None:
        self.config = config
        self.plan = plan
        self.state = state
        self.threads = threads
        self.admin = admin
        self.reset_admin = reset_admin
        self.logger = logger

    def wait(self, timeout_s: float) -> bool:
        """True once caught up; False on timeout or if the client stops or fails meanwhile
        (``timeout_s`` in seconds)."""
        deadline = time.monotonic() + timeout_s
        while self.state() != "RUNNING":
            if self.state() not in ("CREATED", "REBALANCING") or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        # high watermarks, not last stable offsets: right after a transaction commits its
        # markers may not be written yet, and the LSO would still hide its records
        probe = Consumer({"bootstrap.servers": self.config.bootstrap_servers, "group.id": self.config.application_id,
                          "enable.auto.commit": False, "logger": self.logger, "isolation.level": "read_uncommitted"})
        try:
            targets = self.end_offsets(probe, self.plan.user_source_topics(), deadline)
            if targets is None:
                return False
            log.debug("wait_until_caught_up: source end offsets %s", targets)
            if not self.wait_reached(probe, targets, deadline):
                return False
            previous: dict[tuple[str, int], int] | None = None
            while True:
                internal = self.end_offsets(probe, sorted(self.plan.repartition), deadline)
                if internal is None:
                    return False
                log.debug("wait_until_caught_up: repartition end offsets %s", internal)
                if internal == previous:
                    return True
                if not self.wait_reached(probe, internal, deadline):
                    return False
                previous = internal
        finally:
            probe.close()

    def end_offsets(self, probe: Consumer, topics: list[str], deadline: float) -> dict[tuple[str, int], int] | None:
        """High watermarks of every partition of ``topics``; None if ``deadline`` (monotonic
        s) passed first. A retriable error (:func:`.task_timeout.retriable_broker_error`: a
        broker restarting, its partitions without a leader, or unknown to the probe until
        its metadata is refreshed) is retried every ``RETRY_S`` after refreshing the probe's
        metadata of the topic (librdkafka may answer ``_UNKNOWN_PARTITION`` from its
        metadata cache until the next periodic refresh, minutes later).

        Raises:
            KafkaException: a non-retriable error.
        """
        out = {}
        for t in topics:
            for p in range(self.plan.partitions[t]):
                while True:
                    request_s = min(10.0, max(0.1, deadline - time.monotonic()))
                    try:
                        out[(t, p)] = int(probe.get_watermark_offsets(TopicPartition(t, p), timeout=request_s)[1])
                        break
                    except KafkaException as exc:
                        if not retriable_broker_error(exc):
                            raise
                        if time.monotonic() >= deadline:
                            log.info("wait_until_caught_up: no end offset of %s-%d before the timeout: %s", t, p, exc)
                            return None
                    time.sleep(RETRY_S)
                    try:
                        probe.list_topics(t, timeout=min(5.0, max(0.1, deadline - time.monotonic())))
                    except KafkaException as exc:  # the broker still away: the next attempt says so
                        log.debug("wait_until_caught_up: refreshing the metadata of %s: %s", t, exc)
        return out

    def wait_reached(self, probe: Consumer, targets: dict[tuple[str, int], int], deadline: float) -> bool:
        pending = {tp: end for tp, end in targets.items() if end > 0}
        while pending:
            if self.state() not in ("RUNNING", "REBALANCING"):
                return False
            remote = []
            for tp, end in list(pending.items()):
                progress = None
                for th in self.threads():
                    progress = th.progress(tp)
                    if progress is not None:
                        break
                if progress is None:
                    remote.append(tp)
                elif progress >= end:
                    log.debug("caught up (local thread): %s at %d >= %d", tp, progress, end)
                    del pending[tp]
                else:
                    th.request_commit_when_caught_up()
            if remote:
                # a partition of another member's task, or of a task moving between two
                # rounds of a cooperative rebalance (owned by nobody): it counts only once
                # some member owns the task again and its committed offset is at the end
                try:
                    owned = {tp for m in describe_members(self.admin(), self.config.application_id) for tp in m.partitions}
                    res = probe.committed([TopicPartition(t, p) for t, p in remote], timeout=10)
                except KafkaException as exc:  # e.g. NOT_COORDINATOR while the group coordinator loads
                    log.debug("committed offsets not available yet: %s", exc)
                    self.reset_admin()
                    owned, res = set(), []
                res = [r for r in res if self.lead_partition(r.topic, r.partition) in owned]
                for r in res:
                    if r.error is None and r.offset >= pending[(r.topic, r.partition)]:
                        log.debug("caught up (group offsets): %s-%d at %d >= %d", r.topic, r.partition, r.offset, pending[(r.topic, r.partition)])
                        del pending[(r.topic, r.partition)]
            if not pending:
                return True
            if time.monotonic() > deadline:
                log.info("not caught up: %s", dict(sorted(pending.items())[:10]))
                return False
            time.sleep(0.05)
        return True

    def lead_partition(self, topic: str, partition: int) -> tuple[str, int] | None:
        """The lead-topic partition of the task reading ``topic``-``partition``."""
        task = self.plan.task_for(topic, partition)
        return None if task is None else (self.plan.lead_topic(int(task.split("_")[0])), partition)
