"""What a stream thread gets from its client: the fixed context it runs in and the hooks it
reports through (Kafka's ``StreamThread#create`` gets the configs, the topology metadata,
the state directory and the client suppliers, and a ``StreamThread.StateListener``; not the
``KafkaStreams`` instance).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..config import StreamsConfig
    from ..topology import Topology
    from .internal_topics import TopologyPlan
    from .record_collector import PartitionCounts
    from .restore import StateDirectory
    from .stream_thread import StreamThread

__all__ = ["ThreadContext", "ThreadHooks"]


@dataclass(frozen=True)
class ThreadContext:
    """What a stream thread needs of its client, fixed when the client starts (Kafka's
    ``StreamThread#create`` gets the configs, the topology metadata, the state directory
    and the client suppliers, not the ``KafkaStreams`` instance)."""

    config: "StreamsConfig"
    plan: "TopologyPlan"
    topology: "Topology"
    #: the instance's id (from its state directory): part of the clients' and the transactional ids
    process_id: str
    state_directory: "StateDirectory"
    #: the instance's global stores (read by the tasks)
    global_stores: dict[str, Any]
    #: topic -> partitions, of the topics the thread's producer writes
    partition_counts: "PartitionCounts"
    #: the effective ``commit.interval.ms`` (100 under exactly-once unless set)
    commit_interval_ms: int
    #: client id -> the consumer config (Kafka's ``getMainConsumerConfigs``)
    consumer_config: Callable[[str], dict[str, Any]]
    #: client id -> the producer config
    producer_config: Callable[[str], dict[str, Any]]
    #: prefix (``"consumer."``, ``"admin."``) -> the user's overrides for that client
    client_overrides: Callable[[str], dict[str, Any]]
    #: set while the client is paused (``KafkaStreams.pause``, KIP-834): the thread polls
    #: and commits but neither processes nor punctuates
    paused: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class ThreadHooks:
    """What a stream thread reports to its client and asks of the instance's standby
    updater (Kafka's ``StreamThread.StateListener``, the uncaught exception handler, and
    the standby task hand-over), so the thread holds callables instead of reaching into
    ``KafkaStreams``."""

    #: after every state change of ``thread``
    on_state_change: Callable[["StreamThread"], None]
    #: when ``thread`` dies of ``exc`` (the client's uncaught exception handler)
    on_error: Callable[["StreamThread", BaseException], None]
    #: a warm standby of ``task_id`` on this instance hands its stores over (before the task opens them)
    standby_claim: Callable[[str], None]
    #: the closed active task ``task_id`` may be kept as a standby again
    standby_release: Callable[[str], None]
    #: the group's assignment changed: re-read which standbys this instance keeps
    standby_refresh: Callable[[], None]
