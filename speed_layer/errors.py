"""Exceptions raised by the speed layer (one module, as Kafka Streams' ``errors`` package)."""
from __future__ import annotations


class StreamsException(Exception):
    """Base of every error the speed layer raises."""


class TopologyException(StreamsException):
    """The topology is invalid: unknown parent, duplicate name, missing store, cycle, or
    co-partitioned topics with different partition counts (as Kafka's TopologyException)."""


class ConfigException(StreamsException):
    """A configuration value is missing or not one of the allowed values."""


class SerializationException(StreamsException):
    """A key or value could not be serialized or deserialized."""


class InvalidTimestampException(StreamsException):
    """A record's extracted timestamp is negative (Kafka's FailOnInvalidTimestamp)."""


class InvalidStateStoreException(StreamsException):
    """A state store was queried that does not exist, or is not open (closed or restoring)."""


class TaskMigratedException(StreamsException):
    """The task was moved to another instance by a rebalance."""


class TaskTimeoutException(StreamsException):
    """A task made no progress within ``task.timeout.ms`` because a broker call kept failing
    with a retriable error (Kafka's ``StreamsException`` wrapping a ``TimeoutException``
    from ``AbstractTask.maybeInitTaskTimeoutOrThrow``, KIP-572). The stream thread dies
    of it and hands it to the uncaught exception handler."""


class TaskCorruptedException(StreamsException):
    """A send failed with a retriable error (e.g. a delivery timed out while the brokers
    were away): the stream thread closes its tasks dirty and re-initializes them from their
    last committed offsets (exactly-once: after aborting the transaction), and the records
    since are processed again (Kafka's ``TaskCorruptedException`` from
    ``RecordCollectorImpl#recordSendError``, the default production handler's RETRY)."""
