"""Kafka's built-in timestamp extractors (``org.apache.kafka.streams.processor``).

Each is a :data:`~speed_layer.options.TimestampExtractor`:
``extractor(key, value, record_timestamp_ms, partition_time_ms) -> ms``, usable per source
(``Consumed(timestamp_extractor=LogAndSkipOnInvalidTimestamp())``) or for every source
through ``default.timestamp.extractor`` (``fail_on_invalid``, ``log_and_skip_on_invalid``,
``use_partition_time_on_invalid``, or Kafka's class names).

As Kafka's ``ExtractRecordMetadataTimestamp``: a non-negative record timestamp is returned
as is; a negative one goes to ``on_invalid_timestamp``:

* :class:`FailOnInvalidTimestamp` (Kafka's default) raises
  :class:`~speed_layer.errors.InvalidTimestampException` (a StreamsException: fatal, as in
  Kafka, where ``RecordQueue`` rethrows an extractor's StreamsException).
* :class:`LogAndSkipOnInvalidTimestamp` logs and returns the negative timestamp, so the
  task drops the record and counts it in ``dropped-records`` (Kafka's ``RecordQueue``:
  "Skipping record due to negative extracted timestamp").
* :class:`UsePartitionTimeOnInvalidTimestamp` returns the partition time (duet: the task's
  stream time), or raises a StreamsException while it is unknown (negative).

Any extractor (a user's included) that returns a negative timestamp makes the task drop
the record (``dropped-records``), as Kafka's ``RecordQueue`` does.
"""
from __future__ import annotations

import logging
from typing import Any

from ..errors import InvalidTimestampException, StreamsException

log = logging.getLogger("speed_layer.timestamps")

__all__ = [
    "BUILTIN_EXTRACTORS",
    "FailOnInvalidTimestamp",
    "LogAndSkipOnInvalidTimestamp",
    "UsePartitionTimeOnInvalidTimestamp",
]


class FailOnInvalidTimestamp:
    """Kafka's ``FailOnInvalidTimestamp``: the record's timestamp; a negative one fails."""

    def __call__(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        if record_timestamp is not None and record_timestamp >= 0:
            return record_timestamp
        return self.on_invalid_timestamp(key, value, record_timestamp, partition_time)

    def on_invalid_timestamp(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        """Raises:
            InvalidTimestampException: always."""
        raise InvalidTimestampException(
            f"Input record with key {key!r} has invalid (negative) timestamp {record_timestamp}. Possibly because a "
            "pre-0.10 producer client was used to write this record to Kafka without embedding a timestamp, or because "
            "the input topic was created before upgrading the Kafka cluster to 0.10+. Use a different TimestampExtractor "
            "to process this data (default.timestamp.extractor=log_and_skip_on_invalid skips such records)."
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LogAndSkipOnInvalidTimestamp(FailOnInvalidTimestamp):
    """Kafka's ``LogAndSkipOnInvalidTimestamp``: a negative timestamp is logged and
    returned, so the record is dropped (``dropped-records``)."""

    def on_invalid_timestamp(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        log.warning("Input record with key %r will be dropped because it has an invalid (negative) timestamp %s.",
                    key, record_timestamp)
        return record_timestamp


class UsePartitionTimeOnInvalidTimestamp(FailOnInvalidTimestamp):
    """Kafka's ``UsePartitionTimeOnInvalidTimestamp``: a negative timestamp is replaced by
    the partition time (the highest timestamp seen so far)."""

    def on_invalid_timestamp(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        """Raises:
            StreamsException: while the partition time is unknown (negative)."""
        if partition_time is None or partition_time < 0:
            raise StreamsException(
                f"Could not infer new timestamp for input record with key {key!r} because partition time is unknown."
            )
        return partition_time


#: ``default.timestamp.extractor`` values (duet's names) -> the extractor
BUILTIN_EXTRACTORS: dict[str, FailOnInvalidTimestamp] = {
    "record": FailOnInvalidTimestamp(),
    "fail_on_invalid": FailOnInvalidTimestamp(),
    "log_and_skip_on_invalid": LogAndSkipOnInvalidTimestamp(),
    "use_partition_time_on_invalid": UsePartitionTimeOnInvalidTimestamp(),
}
