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
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

__all__ = ["CommittedOffsetsReader"]

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
