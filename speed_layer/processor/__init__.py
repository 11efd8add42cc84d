"""The Processor API (Kafka's ``org.apache.kafka.streams.processor.api``)."""
from .api import (
    Cancellable,
    Change,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)
from .timestamps import FailOnInvalidTimestamp, LogAndSkipOnInvalidTimestamp, UsePartitionTimeOnInvalidTimestamp

__all__ = ["Cancellable", "Change", "FailOnInvalidTimestamp", "LogAndSkipOnInvalidTimestamp", "Processor", "ProcessorContext",
           "PunctuationType", "Record", "RecordMetadata", "UsePartitionTimeOnInvalidTimestamp"]
