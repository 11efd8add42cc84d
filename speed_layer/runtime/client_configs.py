"""The librdkafka configs of a streams client's Kafka clients, from its :class:`StreamsConfig`
(Kafka's ``StreamsConfig#getMainConsumerConfigs``, ``#getRestoreConsumerConfigs``,
``#getProducerConfigs`` and ``#getAdminConfigs`` with their ``consumer.``/``producer.``/
``admin.`` prefixes, and ``ClientUtils``), and the checks and derived values of a client's
config (Kafka's ``StreamsConfig`` constructor and ``postProcessParsedConfig``).

Every client logs librdkafka's own messages to the ``speed_layer.kafka`` logger
(:data:`.admin.CLIENT_LOGGER`, as :func:`.admin.client_config`), never to stderr. Times are
ms, as the librdkafka keys they set.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import StreamsConfig
from ..errors import ConfigException, TopologyException
from .admin import FETCH_QUEUE_BACKOFF_MS, client_config
from .metadata import SERVER_SEPARATOR
from .streams_producer import DEFAULT_TRANSACTION_TIMEOUT_MS

if TYPE_CHECKING:
    from ..topology import Topology

__all__ = ["validate", "commit_interval_ms", "client_overrides", "consumer_config", "restore_consumer_config",
           "producer_config", "offsets_reader_config"]


def validate(config: StreamsConfig, topology: Topology) -> None:
    """Check ``config`` for a client running ``topology``.

    Raises:
        ConfigException: ``bootstrap.servers`` empty; an exception handler set to
            ``dead_letter`` without ``errors.dead.letter.queue.topic.name``;
            ``instance.subtopologies`` naming a sub-topology without tasks (the message
            names the allowed ids).
        TopologyException: the topology has no source.
    """
    if not config.bootstrap_servers.strip():
        raise ConfigException("bootstrap.servers must be set: host:port[,host:port...] of the Kafka cluster")
    for key, handler in (("deserialization.exception.handler", config.deserialization_exception_handler),
                         ("processing.exception.handler", config.processing_exception_handler),
                         ("production.exception.handler", config.production_exception_handler)):
        if handler == "dead_letter" and not config.dead_letter_queue_topic:
            raise ConfigException(f"{key}=dead_letter requires errors.dead.letter.queue.topic.name (the dead-letter topic)")
    if not topology.source_topics():
        raise TopologyException("Topology has no stream threads and no global threads: add a source first")
    if config.instance_subtopologies is not None:
        task_subs = sorted(sub.id for sub in topology.task_subtopologies())
        unknown = sorted(set(config.instance_subtopologies) - set(task_subs))
        if unknown:
            raise ConfigException(f"instance.subtopologies={list(config.instance_subtopologies)}: no sub-topology {unknown} "
                                  f"with tasks in this topology; allowed ids: {task_subs}")


def commit_interval_ms(config: StreamsConfig) -> int:
    """The effective ``commit.interval.ms`` (ms): as set, else 100 under exactly-once and
    30000 otherwise (Kafka's ``StreamsConfig#postProcessParsedConfig``)."""
    return config.commit_interval_ms if ("commit_interval_ms" in config.model_fields_set or not config.exactly_once) else 100


def client_overrides(config: StreamsConfig, prefix: str) -> dict[str, Any]:
    """The ``<prefix>key`` entries of ``config`` (``"consumer."``, ``"producer."``,
    ``"admin."``) with the prefix stripped: the user's settings for that client."""
    return {k[len(prefix):]: v for k, v in config.client_overrides.items() if k.startswith(prefix)}


def _retry_backoff(config: StreamsConfig) -> dict[str, Any]:
    """``retry.backoff.ms`` for librdkafka (its range starts at 1; a backoff above its
    ``retry.backoff.max.ms``, 1000, raises that bound too: the backoff stays static)."""
    ms = max(1, config.retry_backoff_ms)
    return {"retry.backoff.ms": ms, **({"retry.backoff.max.ms": ms} if ms > 1000 else {})}


def consumer_config(config: StreamsConfig, client_id: str) -> dict[str, Any]:
    """A stream thread's (or the global, standby, restore consumer's) config, without the
    ``consumer.`` overrides (the caller adds them). With ``application.server`` set, the
    ``client.id`` carries it after :data:`.metadata.SERVER_SEPARATOR` (published to the
    other instances, see :mod:`.metadata`)."""
    if config.application_server:
        client_id = f"{client_id}{SERVER_SEPARATOR}{config.application_server}"
    return client_config(config.bootstrap_servers, {
        "client.id": client_id,
        "session.timeout.ms": config.session_timeout_ms,
        "heartbeat.interval.ms": max(100, min(3000, config.session_timeout_ms // 3)),
        "isolation.level": "read_committed" if config.exactly_once else "read_uncommitted",
        # an empty fetch answers after this long: it bounds how soon a caught-up
        # partition is known to be caught up (end-of-partition), on which tasks wait
        "fetch.wait.max.ms": 20,
        # librdkafka postpones the next fetch of a partition by fetch.queue.backoff.ms
        # (default 1 s) after its local queue was over its thresholds, e.g. when the
        # partition was paused (buffered.records.per.partition reached) and resumed: the
        # stream thread then waited in poll for that partition's next records most of the
        # time (the Java consumer fetches a resumed partition at once)
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        "auto.offset.reset": config.auto_offset_reset,
        **_retry_backoff(config),
    })


def restore_consumer_config(config: StreamsConfig, client_id: str) -> dict[str, Any]:
    """The config of the global and the standby consumer: :func:`consumer_config` with the
    ``consumer.`` overrides (Kafka's ``getGlobalConsumerConfigs``/``getRestoreConsumerConfigs``)."""
    return {**consumer_config(config, client_id), **client_overrides(config, "consumer.")}


def producer_config(config: StreamsConfig, client_id: str) -> dict[str, Any]:
    """A producer's config: idempotent, ``acks=all``, ``linger.ms`` 5, murmur2 partitioning
    (Kafka's default partitioner), ``transaction.timeout.ms`` 10000 under exactly-once (Kafka
    Streams' default), ``request.timeout.ms`` when set; the ``producer.`` overrides win."""
    conf = client_config(config.bootstrap_servers, {
        "client.id": client_id,
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        **_retry_backoff(config),
    })
    if config.request_timeout_ms is not None:
        conf["request.timeout.ms"] = config.request_timeout_ms
    if config.exactly_once:
        conf["transaction.timeout.ms"] = DEFAULT_TRANSACTION_TIMEOUT_MS  # Kafka Streams' default under EOS
    conf.update(client_overrides(config, "producer."))
    return conf


def offsets_reader_config(config: StreamsConfig) -> dict[str, Any]:
    """The config of the admin client that reads end offsets for ``records-lag``: the
    ``admin.`` overrides and the ``isolation.level`` of the stream threads' consumers (the
    last stable offset under exactly-once, what a ``read_committed`` consumer reaches)."""
    return client_config(config.bootstrap_servers, {
        "isolation.level": "read_committed" if config.exactly_once else "read_uncommitted",
        **client_overrides(config, "admin.")})
