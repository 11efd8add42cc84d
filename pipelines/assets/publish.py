"""``serving_publish``: merge the batch views with the speed views into ``<lake>/serving``.

The speed views are the speed layer's view output topics (read to their end); when a topic
does not exist yet (no speed layer ran on this cluster), or no cluster is configured, the
view is published from the batch alone. ``speed_layer`` is the external asset the lag
sensor observes.
"""

import dagster as dg

from pipelines.assets.batch import VIEW_ASSET_KEYS
from pipelines.serving_steps import publish_views, read_batch_views
from pipelines.resources import KafkaResource, LakeResource
from pipelines.views import VIEW_NAMES, VIEW_SPECS

__all__ = ["serving_publish", "speed_layer", "SPEED_LAYER_KEY"]

SPEED_LAYER_KEY = dg.AssetKey("speed_layer")

#: The speed layer runs as a service (``duet speed --follow``); Dagster only observes it.
speed_layer = dg.AssetSpec(
    SPEED_LAYER_KEY,
    group_name="speed",
    kinds={"kafka"},
    description="The speed layer (KafkaStreams, flights topology): a long-running service writing "
    "one view topic per store. Observed by the `speed_layer_lag` sensor.",
)


@dg.asset(
    group_name="serving",
    kinds={"delta"},
    deps=[*VIEW_ASSET_KEYS.values(), SPEED_LAYER_KEY],
    description="Merged views `<lake>/serving/<view>`: batch for windows closed before the batch "
    "watermark, speed for the rest; each row says its source.",
)
def serving_publish(
    context: dg.AssetExecutionContext, kafka: KafkaResource, lake: LakeResource
) -> dg.MaterializeResult:
    """Publish every view (merge at the batch watermark)."""
    from serving.errors import SpeedSourceError
    from serving.views.batch import read_batch_watermark
    from serving.views.speed import read_view_topic

    root = lake.root()
    batch_frames = read_batch_views(root)
    speed_frames = {}
    servers = kafka.configured_bootstrap()  # a fresh embedded broker would hold no speed view
    for view in VIEW_NAMES if servers else ():
        try:
            speed_frames[view] = read_view_topic(servers, view, VIEW_SPECS[view].windowed, timeout_s=120)
        except SpeedSourceError as exc:
            context.log.warning(f"{view}: no speed view ({exc}); publishing the batch view alone")
    if not servers:
        context.log.info("no Kafka cluster configured: publishing the batch views alone")
    rows = publish_views(root, batch_frames, speed_frames)
    return dg.MaterializeResult(
        metadata={
            **{f"rows_{v}": dg.MetadataValue.int(n) for v, n in rows.items()},
            "speed_views": dg.MetadataValue.text(", ".join(sorted(speed_frames)) or "none"),
            "batch_watermark_ms": dg.MetadataValue.int(int(read_batch_watermark(root) or 0)),
            "path": dg.MetadataValue.path(str(root / "serving")),
        }
    )
