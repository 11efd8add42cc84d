"""``raw_<topic>``: one asset per Kafka topic, archived into ``<lake>/raw/<topic>``."""

import dagster as dg

from pipelines.steps import ALL_TOPICS, ingest
from pipelines.resources import KafkaResource, LakeResource

__all__ = ["RAW_ASSETS", "raw_asset_key", "raw_asset"]


def raw_asset_key(topic: str) -> dg.AssetKey:
    """``raw_<topic>`` with ``-`` replaced by ``_`` (``flights-dlq`` -> ``raw_flights_dlq``)."""
    return dg.AssetKey(f"raw_{topic.replace('-', '_').replace('.', '_')}")


def raw_asset(topic: str) -> dg.AssetsDefinition:
    """The ingest asset of ``topic``: appends the records not yet archived (idempotent by
    offset range: a second materialization adds nothing new)."""

    @dg.asset(
        key=raw_asset_key(topic),
        group_name="ingest",
        kinds={"kafka", "delta"},
        description=f"Kafka topic `{topic}` archived into `<lake>/raw/{topic}` (one row per record).",
    )
    def _raw(context: dg.AssetExecutionContext, kafka: KafkaResource, lake: LakeResource) -> dg.MaterializeResult:
        from deltalake import DeltaTable

        root = lake.root()
        added = ingest(kafka.bootstrap(), root, [topic])[topic]
        path = root / "raw" / topic
        table = DeltaTable(str(path))
        rows = table.to_pyarrow_dataset().count_rows()
        context.log.info(f"{topic}: {added} records added, {rows} archived")
        return dg.MaterializeResult(
            metadata={
                "records_added": dg.MetadataValue.int(added),
                "records": dg.MetadataValue.int(int(rows)),
                "delta_version": dg.MetadataValue.int(table.version()),
                "path": dg.MetadataValue.path(str(path)),
            }
        )

    return _raw


#: One ingest asset per topic (inputs and the dead-letter topic).
RAW_ASSETS: list[dg.AssetsDefinition] = [raw_asset(t) for t in ALL_TOPICS]
