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

__all__ = ["Cancellable", "Change", "Processor", "ProcessorContext", "PunctuationType", "Record", "RecordMetadata"]
