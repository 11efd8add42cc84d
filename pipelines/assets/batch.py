"""``view_<store>``: the batch views, computed together by one Spark job (subsettable).

Daily partitioned over 2013 with ``BackfillPolicy.single_run()``: a run for a partition
(or a range) recomputes the selected views from the whole raw history and reports, per
view, the windows that start within the selected days (see :mod:`pipelines.partitions`).
"""


from collections.abc import Iterator

import dagster as dg

from pipelines.assets.ingest import raw_asset_key
from pipelines.steps import run_batch_layer
from pipelines.serving_steps import read_batch_views
from pipelines.partitions import DAILY_2013, partition_range_ms
from pipelines.resources import LakeResource, SparkResource
from pipelines.topologies.flights import INPUT_TOPICS, VIEWS
from pipelines.views import VIEW_NAMES

__all__ = ["VIEW_ASSET_KEYS", "view_asset_key", "batch_views"]


def view_asset_key(view: str) -> dg.AssetKey:
    """``view_<store>``."""
    return dg.AssetKey(f"view_{view}")


#: ``{view: asset key}`` in the topology's order.
VIEW_ASSET_KEYS: dict[str, dg.AssetKey] = {v: view_asset_key(v) for v in VIEW_NAMES}
_VIEW_OF_KEY = {k: v for v, k in VIEW_ASSET_KEYS.items()}


@dg.multi_asset(
    name="batch_views",
    specs=[
        dg.AssetSpec(
            key,
            group_name="batch",
            kinds={"spark", "delta"},
            deps=[raw_asset_key(t) for t in INPUT_TOPICS],
            description=f"Batch view `<lake>/views/{view}`: {VIEWS[view].description}.",
            skippable=True,
        )
        for view, key in VIEW_ASSET_KEYS.items()
    ],
    partitions_def=DAILY_2013,
    backfill_policy=dg.BackfillPolicy.single_run(),
    can_subset=True,
)
def batch_views(
    context: dg.AssetExecutionContext, spark: SparkResource, lake: LakeResource
) -> Iterator[dg.MaterializeResult]:
    """Run the batch layer (the flights topology on PySpark) for the selected views."""
    views = [_VIEW_OF_KEY[k] for k in context.selected_asset_keys]
    views.sort(key=VIEW_NAMES.index)
    root = lake.root()
    stats = run_batch_layer(spark.session(), root, views=views)
    frames = read_batch_views(root, views)
    if context.has_partition_key_range:
        rng = context.partition_key_range
        lo, hi = partition_range_ms(rng.start, rng.end)
        days = f"{rng.start}..{rng.end}"
    else:
        lo, hi, days = 0, 2**62, "all"
    for view in views:
        df = frames[view]
        in_days = int(((df["window_start"] >= lo) & (df["window_start"] < hi)).sum()) if len(df) else 0
        yield dg.MaterializeResult(
            asset_key=VIEW_ASSET_KEYS[view],
            metadata={
                "rows": dg.MetadataValue.int(len(df)),
                "windows_in_partitions": dg.MetadataValue.int(in_days),
                "partitions": dg.MetadataValue.text(days),
                "batch_seconds": dg.MetadataValue.float(round(stats.seconds, 2)),
                "watermark_ms": dg.MetadataValue.int(int(stats.watermark_ms or 0)),
                "path": dg.MetadataValue.path(str(root / "views" / view)),
            },
        )
