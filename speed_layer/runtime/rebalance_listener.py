"""StreamsRebalanceListener: what a stream thread does when the group assigns, revokes or
loses its partitions (Kafka's
``org.apache.kafka.streams.processor.internals.StreamsRebalanceListener``).

Assignment (see ``docs/instances.md``): Kafka Streams assigns *tasks* with its own
assignor, which librdkafka cannot load. duet lets the group assign one partition per task:
the threads subscribe only to each sub-topology's *lead topic* (its source topic with the
most partitions, :meth:`TopologyPlan.lead_topic`), so partition ``p`` of it is task
``<sub-topology>_<p>``, and the thread then fetches partition ``p`` of every source topic of
that sub-topology too (``incremental_assign``), so a task's co-partitioned inputs are always
owned together. The assignor is ``cooperative-sticky`` (KIP-429, as Kafka Streams' own
protocol since 2.4): assignments are balanced by task count over the group's threads and
sticky, and a rebalance revokes only the tasks that move. On revocation the thread commits
and closes those tasks cleanly (checkpoints written); on assignment it restores the new
tasks from their changelogs (from a standby's checkpoint when this instance kept one warm)
before processing them.

The callbacks run inside the consumer's ``poll``; an error they catch is kept and raised by
the thread's loop after the poll returns (:meth:`StreamsRebalanceListener.raise_error`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ..errors import StreamsException

if TYPE_CHECKING:
    from .committed_offsets import CommittedOffsets
    from .internal_topics import TopologyPlan
    from .task_committer import TaskCommitter
    from .task_manager import TaskManager

log = logging.getLogger("speed_layer.thread")

__all__ = ["StreamsRebalanceListener"]

TP = tuple[str, int]


class StreamsRebalanceListener:
    """The rebalance callbacks of one stream thread (see the module docstring), passed to
    ``Consumer.subscribe`` as ``on_assign``, ``on_revoke`` and ``on_lost``.

    Args:
        name: the thread's name, for the logs.
        plan: the topology plan (lead topics and the partitions of each task).
        task_manager: creates the tasks gained.
        offsets: where the partitions of the tasks gained start.
        committer: its commit interval restarts with new tasks.
        set_state: sets the thread's state (``PARTITIONS_ASSIGNED``, ``RUNNING``,
            ``PARTITIONS_REVOKED``).
        close_tasks: closes the thread's tasks of these ids, clean (after a commit) or not.
        standby_refresh: the group's assignment changed: re-read which standbys this
            instance keeps.
    """

    def __init__(self, name: str, plan: "TopologyPlan", task_manager: "TaskManager", offsets: "CommittedOffsets",
                 committer: "TaskCommitter", set_state: Callable[[str], None],
                 close_tasks: Callable[[list[str], bool], None], standby_refresh: Callable[[], None]) -> None:
        self.name = name
        self.plan = plan
        self.task_manager = task_manager
        self.tasks = task_manager.tasks
        self.offsets = offsets
        self.committer = committer
        self._set_state = set_state
        self._close_tasks = close_tasks
        self._standby_refresh = standby_refresh
        #: the first error a callback caught, until the thread's loop raises it
        self.error: BaseException | None = None

    def raise_error(self) -> None:
        """Raise (once) the error a callback caught during the last poll, if any.

        Raises:
            BaseException: that error.
        """
        if self.error is not None:
            exc, self.error = self.error, None
            raise exc

    def expand(self, partitions: list[TopicPartition]) -> dict[str, list[TP]]:
        """Lead-topic partitions -> {task id: every source partition of the task}.

        Raises:
            StreamsException: a partition is no sub-topology's lead topic's.
        """
        out: dict[str, list[TP]] = {}
        for tp in partitions:
            tid = self.plan.task_of_lead(tp.topic, tp.partition)
            if tid is None:
                raise StreamsException(f"{tp.topic}-{tp.partition} is assigned but is no sub-topology's lead topic")
            out[tid] = self.plan.task_partitions(tid)
        return out

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Incremental (cooperative) assignment: ``partitions`` are the lead partitions of
        the tasks this thread gains (often none). Never raises: an error is kept for
        :meth:`raise_error`."""
        try:
            self._set_state("PARTITIONS_ASSIGNED")
            tasks = self.expand(partitions)
            tps = [tp for task_tps in tasks.values() for tp in task_tps]
            committed = self.offsets.offsets(tps)
            assignment = self.offsets.start_positions(tps, committed)
            if assignment:
                consumer.incremental_assign(assignment)
            self.task_manager.create_tasks(tps, committed)
            self.committer.restart_interval()
            self._set_state("RUNNING")
            self._standby_refresh()
        except BaseException as exc:  # noqa: BLE001 - re-raised from the poll loop
            self.error = exc

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Cooperative revocation of the tasks whose lead partitions are in ``partitions``:
        commit, close them cleanly (dirty when that fails), stop fetching their partitions.

        Raises:
            StreamsException: a partition is no lead partition (:meth:`expand`); any other
                error is kept for :meth:`raise_error`.
        """
        tasks = self.expand(partitions)
        try:
            if tasks:
                self._set_state("PARTITIONS_REVOKED")
                self._close_tasks([t for t in tasks if t in self.tasks], True)
        except BaseException as exc:  # noqa: BLE001
            self._close_tasks([t for t in tasks if t in self.tasks], False)
            self.error = exc
        finally:
            self._unassign(consumer, tasks)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The partitions were lost (the session timed out): close their tasks dirty and
        stop fetching their partitions.

        Raises:
            StreamsException: a partition is no lead partition (:meth:`expand`); any other
                error is kept for :meth:`raise_error`.
        """
        log.warning("stream thread %s lost its partitions (session timed out): closing tasks dirty", self.name)
        tasks = self.expand(partitions)
        try:
            self._close_tasks([t for t in tasks if t in self.tasks], False)
        except BaseException as exc:  # noqa: BLE001
            self.error = exc
        finally:
            self._unassign(consumer, tasks)

    def _unassign(self, consumer: Consumer, tasks: dict[str, list[TP]]) -> None:
        tps = [TopicPartition(t, p) for task_tps in tasks.values() for t, p in task_tps]
        if tps:
            try:
                consumer.incremental_unassign(tps)
            except KafkaException as exc:
                if self.error is None:
                    self.error = exc
