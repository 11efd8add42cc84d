"""Dagster software-defined assets of the flights pipeline.

* ``raw_<topic>`` (group ``ingest``): each Kafka topic archived into ``<lake>/raw/<topic>``.
* ``view_<store>`` (group ``batch``): each batch view ``<lake>/views/<store>``, daily
  partitioned over 2013 (see :mod:`pipelines.partitions` for what a partition means).
* ``serving_publish`` (group ``serving``): the merged views ``<lake>/serving/<view>``.
* ``speed_layer`` (group ``speed``): an external asset; the speed layer is a long-running
  service, not a Dagster op; :mod:`pipelines.sensors` observes its lag.

The assets hold no logic: they call the plain functions of :mod:`pipelines.main_job`.
"""

from pipelines.assets.batch import VIEW_ASSET_KEYS, batch_views
from pipelines.assets.ingest import RAW_ASSETS, raw_asset_key
from pipelines.assets.publish import serving_publish, speed_layer

__all__ = ["RAW_ASSETS", "VIEW_ASSET_KEYS", "batch_views", "raw_asset_key", "serving_publish", "speed_layer",
           "all_assets"]


def all_assets() -> list[object]:
    """Every asset definition and spec, for :class:`dagster.Definitions`."""
    return [*RAW_ASSETS, batch_views, serving_publish, speed_layer]
