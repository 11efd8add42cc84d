"""Kafka -> Delta ingestion (``<lake>/raw/<topic>``)."""

from batch_layer.ingest.kafka_to_delta import (
    RAW_SCHEMA,
    IngestResult,
    archived_offsets,
    ingest_topic,
    ingest_topics,
    raw_table_path,
)

__all__ = ["RAW_SCHEMA", "IngestResult", "archived_offsets", "ingest_topic", "ingest_topics", "raw_table_path"]
