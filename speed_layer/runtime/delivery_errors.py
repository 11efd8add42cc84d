"""How a failed send is treated, as Kafka's ``RecordCollectorImpl#recordSendError``.

Kafka sorts a send's exception into (apache/kafka
``streams/src/main/java/org/apache/kafka/streams/processor/internals/RecordCollectorImpl.java``):

* **fatal** (``isFatalException``: authentication, authorization, security disabled,
  invalid topic, unknown server error, offset metadata too large, illegal state): a
  ``StreamsException`` at the next send/flush/commit whatever the handler says;
* **fenced** (``ProducerFencedException``, ``InvalidPidMappingException``,
  ``InvalidProducerEpochException``, ``OutOfOrderSequenceException``): a
  ``TaskMigratedException`` (duet replaces the producer and rewinds the tasks to their
  committed offsets, :meth:`StreamThread._recover_producer`);
* **aborted** (``TransactionAbortedException``: the records of a transaction being
  aborted): swallowed, the original error is already being handled;
* **retriable** (a ``RetriableException``, e.g. a delivery that timed out): the default
  handler answers RETRY, a ``TaskCorruptedException``: the tasks restart from their last
  committed offsets;
* anything else is a **record** error (``RecordTooLargeException``, an invalid record...):
  ``production.exception.handler`` decides (FAIL or CONTINUE).

:func:`send_error_kind` maps librdkafka's error codes onto these kinds;
:func:`record_batch_size` is the size of a one-record batch as the broker checks it
against the topic's ``max.message.bytes``; :func:`dead_letter_headers` are the KIP-1034
headers of a dead letter.
"""
from __future__ import annotations

import traceback
from typing import Literal

from confluent_kafka import KafkaError

from .task_timeout import RETRIABLE_ERROR_CODES

__all__ = ["SendErrorKind", "send_error_kind", "record_batch_size", "BATCH_OVERHEAD", "RECORD_OVERHEAD_MAX",
           "dead_letter_headers"]

SendErrorKind = Literal["fatal", "fenced", "aborted", "retriable", "record"]


def _codes(*names: str) -> frozenset[int]:
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


#: Kafka's ``isFatalException``: security errors and "communication" errors
FATAL_CODES = _codes("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                     "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION",
                     "SECURITY_DISABLED", "TOPIC_EXCEPTION", "UNKNOWN", "OFFSET_METADATA_TOO_LARGE", "_STATE")
#: the producer is fenced or lost its idempotent state (Kafka: ``TaskMigratedException``);
#: librdkafka's ``_FATAL``: the producer raised a fatal error (e.g. a sequence gap)
FENCED_CODES = _codes("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_PRODUCER_ID_MAPPING",
                      "OUT_OF_ORDER_SEQUENCE_NUMBER", "_FATAL")
#: the records of an aborted transaction or a purged producer (Kafka: ``TransactionAbortedException``)
ABORTED_CODES = _codes("_PURGE_QUEUE", "_PURGE_INFLIGHT")
#: retriable produce errors (Kafka's ``RetriableException`` s): the broker calls' ones, a
#: delivery that timed out (``delivery.timeout.ms``, librdkafka's ``message.timeout.ms``),
#: not enough in-sync replicas, a broker's storage error
RETRIABLE_SEND_CODES = RETRIABLE_ERROR_CODES | _codes(
    "_MSG_TIMED_OUT", "_TIMED_OUT_QUEUE", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "KAFKA_STORAGE_ERROR", "CORRUPT_MESSAGE")


def send_error_kind(err: KafkaError) -> SendErrorKind:
    """The kind of a failed send's error (see the module docstring)."""
    code = err.code()
    if code in ABORTED_CODES:
        return "aborted"
    if code in FENCED_CODES or err.fatal():
        return "fenced"
    if code in FATAL_CODES:
        return "fatal"
    if code in RETRIABLE_SEND_CODES or err.retriable():
        return "retriable"
    return "record"


#: bytes of a record batch's header (magic v2: base offset 8, length 4, leader epoch 4,
#: magic 1, crc 4, attributes 2, last offset delta 4, first/max timestamps 16, producer
#: id 8, epoch 2, base sequence 4, record count 4)
BATCH_OVERHEAD = 61
#: the most bytes a record without headers adds to its key and value: length varint (5),
#: attributes (1), timestamp and offset deltas (1 each in a one-record batch), key and
#: value length varints (5 each), header count (1)
RECORD_OVERHEAD_MAX = 19


def _varint_size(n: int) -> int:
    """Bytes of ``n`` as a zig-zag varint (Kafka's ``ByteUtils.sizeOfVarint``)."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def _sized(b: bytes | None) -> int:
    """A length-prefixed field: its varint length (-1 for null) and its bytes."""
    return _varint_size(-1) if b is None else _varint_size(len(b)) + len(b)


def record_batch_size(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None) -> int:
    """Bytes of an uncompressed batch holding this one record (magic v2), what the broker
    compares with the topic's ``max.message.bytes`` (Kafka's ``DefaultRecord#sizeInBytes``
    plus the batch header)."""
    body = 1 + 1 + 1 + _sized(key) + _sized(value) + _varint_size(len(headers or ()))
    for name, hv in headers or ():
        body += _sized(name.encode()) + _sized(hv)
    return BATCH_OVERHEAD + _varint_size(body) + body


def dead_letter_headers(kind: str, exc: BaseException, message: str) -> list[tuple[str, bytes]]:
    """The KIP-1034 headers naming an error (``__streams.errors.exception``, ``.message``,
    ``.stacktrace``) and duet's ``__streams.errors.kind``; ``message`` is the error's text."""
    return [
        ("__streams.errors.exception", type(exc).__name__.encode()),
        ("__streams.errors.message", message.encode()),
        ("__streams.errors.stacktrace", "".join(traceback.format_exception(exc)).encode()[:8000]),
        ("__streams.errors.kind", kind.encode()),
    ]
