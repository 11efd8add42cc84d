"""Reading a group's committed offsets with a consumer that never joins the group.

A stream thread reads its group's committed offsets (and their metadata, KIP-825) when it
rewinds tasks to them and when new tasks start. It reads them with a second consumer of the
group that never subscribes, so never joins the group nor takes part in a rebalance: after a
broker was away the member's own group coordinator may stay unanswered for longer than a
session timeout (seen with librdkafka 2.16 in ``bench/faults/broker_outage.py``), while a new
handle looks the coordinator up again and answers.

Not the Admin API's ``list_consumer_group_offsets``: in librdkafka 2.15 and 2.16 (and its
master as of this writing) an admin client's OffsetFetch answered by ``NOT_COORDINATOR`` or
``COORDINATOR_NOT_AVAILABLE`` (the coordinator moved: a broker died or restarted) makes
``rd_kafka_handle_OffsetFetch`` call ``rd_kafka_cgrp_op`` with the admin handle's consumer
group, which is NULL: the process dies by SIGSEGV in librdkafka's main thread. A core dump of a
``bench/faults/cluster_faults.py`` soak showed that stack, and
``tests/test_speed_layer/test_cluster_faults.py`` reproduces it. A consumer handle has a
consumer group, so the same answer only makes it look the coordinator up again.

:class:`CommittedOffsets` is where a stream thread's input partitions start (Kafka's
``ClientUtils#fetchCommittedOffsets`` and ``StreamThread#resetOffsets``): the committed
offsets, read with retries until ``task.timeout.ms``, else the topic's offset reset policy.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from ..errors import StreamsException
from .offset_commits import COORDINATOR_ERRORS

if TYPE_CHECKING:
    from ..config import StreamsConfig
    from ..topology import Topology
    from .internal_topics import TopologyPlan

log = logging.getLogger("speed_layer.thread")

__all__ = ["CommittedOffsets", "CommittedOffsetsReader"]

TP = tuple[str, int]


class CommittedOffsetsReader:
    """Reads the committed offsets of one consumer group without joining it.

    ``conf`` is a confluent-kafka consumer configuration (``bootstrap.servers`` and whatever
    else the application's consumers use); ``group.id`` is set to ``group_id`` and automatic
    commits are off. The consumer is made at the first read and again after a failed one.
    """

    def __init__(self, conf: dict[str, Any], group_id: str) -> None:
        self._conf = {**conf, "group.id": group_id, "enable.auto.commit": False}
        self._consumer: Consumer | None = None

    def read(self, tps: list[TP], timeout_s: float = 10.0) -> list[TopicPartition]:
        """The committed offset and metadata of each of ``tps``, in order (offset < 0: none
        committed).

        Raises:
            KafkaException: not answered within ``timeout_s`` seconds or an error from the
                group coordinator; the caller decides whether to retry (Kafka's
                ``task.timeout.ms``), and the next read uses a new consumer.
        """
        if self._consumer is None:
            self._consumer = Consumer(self._conf)
        try:
            return list(self._consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=timeout_s))
        except KafkaException:
            self.close()
            raise

    def close(self) -> None:
        """Close the consumer (a later :meth:`read` makes a new one). Errors while closing
        are raised: the consumer never joined the group, so closing has nothing to leave."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


class CommittedOffsets:
    """Where a stream thread's input partitions start: the group's committed offsets, read
    by the thread's consumer or by a :class:`CommittedOffsetsReader` of its own (Kafka's
    ``ClientUtils#fetchCommittedOffsets``), else the topic's offset reset policy (Kafka's
    ``StreamThread#resetOffsets`` with ``InternalTopologyBuilder#offsetResetStrategy``).

    Args:
        config: the streams config (``application.id``, ``task.timeout.ms``,
            ``auto.offset.reset``).
        plan: the topology plan (which topics are repartition topics).
        topology: the topology (the per-source ``offset_reset``).
        consumer: the thread's consumer now (None before it is created).
        reader_config: the consumer config of the reader (made at the first fresh read).
    """

    def __init__(self, config: "StreamsConfig", plan: "TopologyPlan", topology: "Topology",
                 consumer: Callable[[], Consumer | None], reader_config: Callable[[], dict[str, Any]]) -> None:
        self.config = config
        self.plan = plan
        self.topology = topology
        self._consumer = consumer
        self._reader_config = reader_config
        self._reader: CommittedOffsetsReader | None = None

    def offsets(self, tps: list[TP], fresh: bool = False) -> dict[TP, int]:
        """The group's committed offsets of ``tps`` (absent: none committed); see
        :meth:`read`.

        Raises:
            StreamsException: not readable within ``task.timeout.ms``.
        """
        return {(r.topic, r.partition): r.offset for r in self.read(tps, fresh) if r.offset >= 0}

    def read(self, tps: list[TP], fresh: bool = False) -> list[TopicPartition]:
        """The group's committed offsets and metadata of ``tps``, read by the stream
        thread's consumer, or with ``fresh`` by a consumer of the group that never joins it
        (:class:`CommittedOffsetsReader`; the module docstring says why not the Admin API).
        Retriable and coordinator errors are retried until ``task.timeout.ms`` (ms).

        Raises:
            StreamsException: not readable within ``task.timeout.ms``.
        """
        if not tps:
            return []
        consumer = self._consumer()
        assert consumer is not None
        deadline = time.monotonic() + self.config.task_timeout_ms / 1000
        while True:
            try:
                if fresh:
                    return self._offsets_reader().read(tps)
                return list(consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10))
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                # the group coordinator may still be loading (a new broker): retry
                if time.monotonic() > deadline or not isinstance(err, KafkaError) or not (err.retriable() or err.code() in COORDINATOR_ERRORS):
                    raise StreamsException(f"cannot read the committed offsets of {self.config.application_id}: {exc}") from exc
                time.sleep(0.2)

    def start_positions(self, tps: list[TP], committed: dict[TP, int]) -> list[TopicPartition]:
        """Where each of ``tps`` starts: its ``committed`` offset, else the beginning or
        the end by the topic's offset reset policy (repartition topics: the beginning)."""
        out = []
        for t, p in tps:
            off = committed.get((t, p))
            if off is None:
                off = OFFSET_BEGINNING if self._reset_policy(t) == "earliest" else OFFSET_END
            out.append(TopicPartition(t, p, off))
        return out

    def _reset_policy(self, topic: str) -> str:
        if topic in self.plan.repartition:
            return "earliest"  # internal topics are always read from the beginning
        node = self.topology.nodes.get(self.topology.source_topics().get(topic, ""))
        policy = getattr(getattr(node, "op", None), "offset_reset", None)
        return str(policy or self.config.auto_offset_reset).lower()

    def _offsets_reader(self) -> CommittedOffsetsReader:
        if self._reader is None:
            self._reader = CommittedOffsetsReader(self._reader_config(), self.config.application_id)
        return self._reader

    def close(self) -> None:
        """Close the reader, if one was made. Never raises: a failure is logged (ERROR)."""
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception:  # noqa: BLE001 - closing the thread anyway
                log.exception("closing the committed-offsets reader failed")
            self._reader = None
