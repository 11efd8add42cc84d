"""The names a pipeline's Dagster objects get: asset keys, groups, jobs, schedules, sensors.

Every name starts with the pipeline's name, so that several pipelines load into one
``Definitions`` without a collision (``Pipeline.name`` is ``[a-z][a-z0-9_]*`` and unique
among the pipelines given to :func:`pipelines.dagster.definitions`):

* a Kafka source topic (external): ``[<p>, topic_<slug>]``, group ``<p>_kafka``; the
  dead-letter topic, written by the speed layer, in group ``<p>_speed``;
* an archived topic: ``[<p>, raw_<slug>]``, group ``<p>_ingest``;
* a batch view: ``[<p>, view_<store>]``, group ``<p>_batch`` (multi-asset ``<p>_batch_views``);
* the merged views: ``[<p>, serving_publish]``, group ``<p>_serving``;
* the speed layer (external): ``[<p>, speed_layer]``, group ``<p>_speed``;
* the GX check of a view: ``gx_suite`` on ``[<p>, view_<store>]``;
* the job and its schedule: ``<p>_recompute``, ``<p>_recompute_schedule``;
* the sensors: ``<p>_new_kafka_data``, ``<p>_speed_layer_lag``.

``<slug>`` is the topic with ``-`` and ``.`` replaced by ``_`` (``shop-dlq`` ->
``shop_dlq``). In the UI and ``dagster asset materialize --select`` a key reads
``shop/view_conversions_hourly``.
"""

from __future__ import annotations

import dagster as dg

from pipelines.declaration.pipeline import Pipeline

__all__ = [
    "slug",
    "topic_key",
    "raw_key",
    "view_asset_key",
    "publish_key",
    "speed_key",
    "group",
    "job_name",
    "schedule_name",
    "sensor_name",
    "CHECK_NAME",
]

#: The name of the blocking GX check of every batch view.
CHECK_NAME = "gx_suite"


def slug(topic: str) -> str:
    """``topic`` as a Dagster name part: ``-`` and ``.`` -> ``_`` (``flights-dlq`` -> ``flights_dlq``)."""
    return topic.replace("-", "_").replace(".", "_")


def topic_key(p: Pipeline, topic: str) -> dg.AssetKey:
    """``[<p>, topic_<slug>]``: the external asset of a Kafka topic of ``p``."""
    return dg.AssetKey([p.name, f"topic_{slug(topic)}"])


def raw_key(p: Pipeline, topic: str) -> dg.AssetKey:
    """``[<p>, raw_<slug>]``: ``topic`` archived into ``<lake root>/<p>/raw/<topic>``."""
    return dg.AssetKey([p.name, f"raw_{slug(topic)}"])


def view_asset_key(p: Pipeline, view: str) -> dg.AssetKey:
    """``[<p>, view_<store>]``: the batch view ``<lake root>/<p>/views/<store>``.

    Raises:
        KeyError: ``p`` has no view ``view``.
    """
    p.view(view)  # raises KeyError naming the views
    return dg.AssetKey([p.name, f"view_{view}"])


def publish_key(p: Pipeline) -> dg.AssetKey:
    """``[<p>, serving_publish]``: the merged views ``<lake root>/<p>/serving/<view>``."""
    return dg.AssetKey([p.name, "serving_publish"])


def speed_key(p: Pipeline) -> dg.AssetKey:
    """``[<p>, speed_layer]``: the speed layer service of ``p`` (external, observed)."""
    return dg.AssetKey([p.name, "speed_layer"])


def group(p: Pipeline, part: str) -> str:
    """``<p>_<part>``, ``part`` one of ``kafka``, ``ingest``, ``batch``, ``serving``, ``speed``."""
    return f"{p.name}_{part}"


def job_name(p: Pipeline) -> str:
    """``<p>_recompute``."""
    return f"{p.name}_recompute"


def schedule_name(p: Pipeline) -> str:
    """``<p>_recompute_schedule``."""
    return f"{p.name}_recompute_schedule"


def sensor_name(p: Pipeline, what: str) -> str:
    """``<p>_<what>`` (``new_kafka_data``, ``speed_layer_lag``)."""
    return f"{p.name}_{what}"
