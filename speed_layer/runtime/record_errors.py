"""A task's answer to a record that fails: the configured exception handler, the
``dropped-records`` and ``dead-lettered`` counters and the dead-letter topic.

As Kafka Streams asks its handlers where a record fails (``RecordDeserializer`` for
``deserialization.exception.handler``, ``ProcessorNode#process`` for
``processing.exception.handler``, ``RecordCollectorImpl#send`` for a serializer's error to
``production.exception.handler``, KIP-399) and builds the dead letter as
``ExceptionHandlerUtils`` does (KIP-1034): the handler's ``log_and_fail`` raises a
``StreamsException``; ``log_and_continue`` logs, counts the record in ``dropped-records``
and goes on; ``dead_letter`` also sends the source record (or, without one, a null key and
value) to ``errors.dead.letter.queue.topic.name`` with the error headers. Failed sends of the
producer are :mod:`.delivery_errors`' and the record collector's.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..config import StreamsConfig
from ..errors import StreamsException
from ..processor.api import Record
from .delivery_errors import dead_letter_headers
from .partition_group import Headers, RawRecord

log = logging.getLogger("speed_layer.task")

__all__ = ["RecordErrors"]

#: ``send(topic, key, value, timestamp, headers, partition)`` of the task's record collector
Send = Callable[[str, "bytes | None", "bytes | None", int, Headers, "int | None"], None]


def _source_headers(raw: RawRecord) -> Headers:
    """The source record's own headers and where it was read (KIP-1034)."""
    return list(raw.headers) + [
        ("__streams.errors.topic", raw.topic.encode()),
        ("__streams.errors.partition", str(raw.partition).encode()),
        ("__streams.errors.offset", str(raw.offset).encode()),
    ]


class RecordErrors:
    """The handlers of one task (``task_id``), counting in ``count(name)`` and sending dead
    letters through ``send``."""

    def __init__(self, task_id: str, config: StreamsConfig, count: Callable[[str], None], send: Send) -> None:
        self.task_id = task_id
        self.config = config
        self.count = count
        self.send = send

    def _dead_letters(self, handler: str, exc: Exception, failure: str, skipping: str) -> bool:
        """Apply ``handler`` (Kafka's FAIL or CONTINUE) to ``exc``: whether a dead letter is
        to be sent. ``failure``: the ``StreamsException``'s text; ``skipping``: the warning
        of ``log_and_continue``.

        Raises:
            StreamsException: under ``log_and_fail``.
        """
        if handler == "log_and_fail":
            raise StreamsException(f"{failure}: {exc!r}") from exc
        self.count("dropped-records")
        if handler == "log_and_continue":
            log.warning("task %s: %s: %r", self.task_id, skipping, exc)
            return False
        return True

    def record_failed(self, kind: str, handler: str, raw: RawRecord, exc: Exception) -> None:
        """``handler`` for the source record ``raw`` that failed in step ``kind``
        (``deserialization``, ``timestamp_extraction`` or ``processing``).

        Raises:
            StreamsException: under ``log_and_fail``, or ``dead_letter`` without a topic.
        """
        where = f"{raw.topic}-{raw.partition}@{raw.offset}"
        if self._dead_letters(handler, exc, f"{kind} error in task {self.task_id} on record {where}",
                              f"skipping record {where} after {kind} error"):
            self.dead_letter(kind, exc, where, raw.key, raw.value, raw.timestamp, _source_headers(raw))

    def flushed_record_failed(self, node: str, record: Record[Any, Any], exc: Exception) -> None:
        """``processing.exception.handler`` for an exception raised downstream of ``node``
        by a record its store's cache flush forwarded: ``log_and_fail`` raises,
        ``log_and_continue`` drops the record (``dropped-records``), ``dead_letter`` sends a
        dead letter with a null key and value (a flushed record has no source record of its
        own: KIP-1034's ``sourceRawKey``/``sourceRawValue`` are null outside ``process``) and
        the error headers, ``__streams.errors.node`` naming ``node``.

        Raises:
            StreamsException: under ``log_and_fail``, or ``dead_letter`` without a topic.
        """
        handler = self.config.processing_exception_handler
        where = f"flushed from the cache of {node} (key {record.key!r}, timestamp {record.timestamp})"
        if self._dead_letters(handler, exc, f"processing error in task {self.task_id} on a record {where}",
                              f"skipping a record {where} after processing error"):
            self.dead_letter("processing", exc, where, None, None, record.timestamp, [("__streams.errors.node", node.encode())])

    def serialization_failed(self, node: str, topic: str, origin: str, record: Record[Any, Any], raw: RawRecord | None,
                             exc: Exception) -> None:
        """``production.exception.handler`` for a record the sink ``node``'s serializer of
        ``origin`` (``KEY`` or ``VALUE``) rejects, as Kafka's ``RecordCollectorImpl#send``
        hands a serialization exception to ``ProductionExceptionHandler#handleSerializationException``
        (KIP-399): ``log_and_fail`` (Kafka's DefaultProductionExceptionHandler: FAIL) raises
        "Unable to serialize record"; otherwise the record is not sent (CONTINUE) and is
        counted in ``dropped-records``, and ``dead_letter`` sends the source record being
        processed, ``raw`` (KIP-1034's ``sourceRawKey``/``sourceRawValue``: null for a
        record a cache flush or a punctuation forwarded, ``raw`` None) with the error
        headers, ``__streams.errors.node`` naming the sink and ``__streams.errors.origin``
        the origin. The other sinks of the record still get it (Kafka's CONTINUE drops this
        send only).

        Raises:
            StreamsException: under ``log_and_fail``, or ``dead_letter`` without a topic.
        """
        handler = self.config.production_exception_handler
        desc = f"ProducerRecord(topic=[{topic}], timestamp=[{record.timestamp}]), {origin.lower()} {record.key if origin == 'KEY' else record.value!r}"
        if not self._dead_letters(handler, exc, f"Unable to serialize record in task {self.task_id}. {desc}",
                                  f"unable to serialize record, continue processing. {desc}"):
            return
        extra = [("__streams.errors.node", node.encode()), ("__streams.errors.origin", origin.encode()),
                 ("__streams.errors.sink.topic", topic.encode())]
        if raw is None:
            self.dead_letter("serialization", exc, f"{desc} (no source record)", None, None, record.timestamp, extra)
            return
        self.dead_letter("serialization", exc, f"{raw.topic}-{raw.partition}@{raw.offset} ({desc})", raw.key, raw.value,
                         raw.timestamp, _source_headers(raw) + extra)

    def dead_letter(self, kind: str, exc: Exception, where: str, key: bytes | None, value: bytes | None, timestamp: int,
                    headers: Headers) -> None:
        """Send a dead letter (``timestamp`` ms) to ``errors.dead.letter.queue.topic.name``
        with the error headers (KIP-1034 names) after ``headers``; counts ``dead-lettered``.

        Raises:
            StreamsException: no dead-letter topic is configured.
        """
        dlq = self.config.dead_letter_queue_topic
        if not dlq:
            raise StreamsException("errors.dead.letter.queue.topic.name must be set when an exception handler is 'dead_letter'")
        self.count("dead-lettered")
        log.warning("task %s: record %s sent to %s after %s error: %r", self.task_id, where, dlq, kind, exc)
        self.send(dlq, key, value, timestamp, headers + dead_letter_headers(kind, exc, str(exc)), None)
