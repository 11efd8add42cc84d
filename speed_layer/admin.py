"""Kafka administration beside the speed layer: topics, offsets, consumer groups and the
embedded broker, for duet's commands, benches and tests.

As Kafka's ``Admin`` client sits beside Kafka Streams rather than inside it, this is the one
face of these helpers; their code lives in ``speed_layer.runtime`` (internal), which the
streams runtime uses too. All timeouts are in seconds (``timeout_s``); offsets are Kafka
offsets (ints).

* topics: :class:`TopicSpec`, :func:`ensure_topics` (create or verify; raises
  :class:`TopicError`, or :class:`TopicMismatchError` when a topic exists with another
  partition count), :func:`delete_topics`, :func:`topic_partitions`, :func:`end_offsets`;
* consumer groups: :func:`consumer_groups`, :func:`group_members` (:class:`ActiveMember`);
* :func:`admin_client`: a confluent-kafka ``AdminClient`` with duet's logger and timeouts;
  :func:`client_config`: the configuration of any other client with that logger;
  :func:`reader_config`: that of a consumer reading topics to their end (fetches not held back);
* the embedded broker: :class:`EmbeddedKafka` (one KRaft node: broker and controller),
  :class:`EmbeddedKafkaCluster` (several nodes on loopback) and :func:`kafka_cluster`
  (``$KAFKA_BOOTSTRAP_SERVERS`` when set, else an embedded broker for the block); they raise
  :class:`BrokerStartError` or :class:`KafkaJarsMissingError`.
"""
from __future__ import annotations

from .runtime.admin import (
    ActiveMember, TopicError, TopicMismatchError, TopicSpec, admin_client, client_config, consumer_groups, delete_topics,
    end_offsets, ensure_topics, group_members, reader_config, topic_partitions,
)
from .runtime.broker import BrokerStartError, EmbeddedKafka, KafkaJarsMissingError, kafka_cluster
from .runtime.cluster import EmbeddedKafkaCluster

__all__ = [
    "TopicSpec", "TopicError", "TopicMismatchError", "ensure_topics", "delete_topics", "topic_partitions", "end_offsets",
    "admin_client", "client_config", "reader_config", "ActiveMember", "consumer_groups", "group_members",
    "EmbeddedKafka", "EmbeddedKafkaCluster", "kafka_cluster", "BrokerStartError", "KafkaJarsMissingError",
]
