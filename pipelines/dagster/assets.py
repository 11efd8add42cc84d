"""The assets of one pipeline, from its declaration (keys: :mod:`pipelines.dagster.keys`).

* ``topic_<slug>`` (group ``<p>_kafka``, external): each source topic, so lineage starts at
  Kafka; the dead-letter topic is written by the speed layer (group ``<p>_speed``).
* ``raw_<slug>`` (group ``<p>_ingest``): each archived topic (sources, then the dead-letter
  topic) appended into ``<lake root>/<p>/raw/<topic>``, incremental by offset.
* ``view_<store>`` (group ``<p>_batch``): the batch views ``<lake root>/<p>/views/<store>``,
  one subsettable Spark job, daily partitioned (see :mod:`pipelines.dagster.partitions` for
  what a partition means).
* ``serving_publish`` (group ``<p>_serving``): the merged views ``<lake root>/<p>/serving/<view>``.
* ``speed_layer`` (group ``<p>_speed``, external): the speed layer is a long-running service
  (``duet speed --follow --server HOST:PORT``), not a Dagster op; the ``<p>_speed_layer_lag``
  sensor (:mod:`pipelines.dagster.sensors`) observes it (state, lag, process rate, last seen)
  and evaluates its ``speed_lag`` check (:mod:`pipelines.dagster.checks`).

The ingest, batch and publish assets (and the GX checks, which store their results) write
the pipeline's folder of the lake through ``LakeResource.writable``: the run holds that
folder's lake lock from its first writing step to its end (:mod:`pipelines.lake.lock`), and
a step fails naming the holder when a ``duet`` command (or another run) writes it.

The assets hold no layer logic: they call :mod:`pipelines.job.steps` and
:mod:`pipelines.job.serving_steps`.
"""

# no `from __future__ import annotations`: Dagster reads the context and resource annotations
from collections.abc import Iterator
from typing import Any

import dagster as dg

from pipelines.dagster.keys import group, publish_key, raw_key, slug, speed_key, topic_key, view_asset_key
from pipelines.dagster.new_data import OFFSETS_ADDED, days_of_run, describe
from pipelines.dagster.partitions import compact_days, count_per_day, partitions_def
from pipelines.dagster.resources import KafkaResource, LakeResource, SparkResource
from pipelines.dagster.speed_probe import SPEED_CHECK_NAME, max_lag_env, server_env
from pipelines.declaration.pipeline import Pipeline

__all__ = ["topic_specs", "speed_layer_spec", "raw_asset", "raw_assets", "batch_views", "serving_publish",
           "pipeline_assets"]

_KIND_TEXT = {"stream": "a KStream", "table": "a KTable (latest value per key)",
              "global_table": "a GlobalKTable (latest value per key, every partition on every instance)"}


def topic_specs(p: Pipeline) -> list[dg.AssetSpec]:
    """An external asset per archived topic of ``p``: the sources (group ``<p>_kafka``, with the
    kind and partitions declared), then the dead-letter topic (downstream of the speed layer,
    in its group ``<p>_speed``)."""
    specs = [
        dg.AssetSpec(
            topic_key(p, s.topic),
            group_name=group(p, "kafka"),
            kinds={"kafka"},
            description=f"Kafka topic `{s.topic}`, read as {_KIND_TEXT[s.kind]}"
            + (f": {s.description}." if s.description else "."),
            metadata={"topic": s.topic, "partitions": s.partitions, "kind": s.kind},
        )
        for s in p.sources
    ]
    if p.dlq_topic:
        specs.append(dg.AssetSpec(  # written by the speed layer: in its group, so groups stay acyclic
            topic_key(p, p.dlq_topic),
            group_name=group(p, "speed"),
            kinds={"kafka"},
            deps=[speed_key(p)],
            description=f"Dead-letter topic `{p.dlq_topic}`: records the speed layer could not deserialize or "
            "process, with the reason in their headers.",
            metadata={"topic": p.dlq_topic},
        ))
    return specs


def speed_layer_spec(p: Pipeline) -> dg.AssetSpec:
    """The speed layer of ``p`` (external): a service writing one topic per view."""
    return dg.AssetSpec(
        speed_key(p),
        group_name=group(p, "speed"),
        kinds={"kafka"},
        deps=[topic_key(p, t) for t in p.input_topics],
        description=f"The speed layer of `{p.name}` (KafkaStreams, `duet speed --follow --server HOST:PORT`, "
        f"application id `{p.service_app_id}`): a long-running service writing the view topics "
        f"{', '.join(f'`{v}`' for v in p.view_names)}, with interactive queries, `/health` and `/metrics`. "
        f"Observed by the `{p.name}_speed_layer_lag` sensor (its service at `${server_env(p)}`, else its consumer "
        f"group), which evaluates the `{SPEED_CHECK_NAME}` check (lag bound `${max_lag_env(p)}` records)."
        + (f"\n\n{p.description}" if p.description else ""),
        metadata={"application_id": p.service_app_id, "service_env": server_env(p), "max_lag_env": max_lag_env(p)},
    )


def raw_asset(p: Pipeline, topic: str) -> dg.AssetsDefinition:
    """The ingest asset of ``topic``: appends the records not yet archived (idempotent by
    offset range: a second materialization adds nothing new). Metadata: records added, their
    offsets (``offsets_added``: ``{partition: [first, last]}``, which the batch views read to
    know the days this run's data falls on) and records archived, the Delta version and path."""
    source = next((s for s in p.sources if s.topic == topic), None)
    about = f": {source.description}" if source is not None and source.description else ""

    @dg.asset(
        key=raw_key(p, topic),
        group_name=group(p, "ingest"),
        kinds={"kafka", "delta"},
        deps=[topic_key(p, topic)],
        description=f"Kafka topic `{topic}` archived into `<lake>/{p.name}/raw/{topic}` (one row per record, "
        f"incremental by offset){about}.",
    )
    def _raw(context: dg.AssetExecutionContext, kafka: KafkaResource, lake: LakeResource) -> dg.MaterializeResult:
        from batch_layer.delta.layout import LakeLayout
        from batch_layer.delta.storage import delta_uri, storage_options
        from batch_layer.ingest import ingest_topic
        from deltalake import DeltaTable

        folder = lake.writable(p)
        result = ingest_topic(None, kafka.bootstrap(p), topic, folder)
        path = LakeLayout(folder).raw_table(topic)
        table = DeltaTable(delta_uri(path), storage_options=storage_options(path))
        rows = table.to_pyarrow_dataset().count_rows()
        context.log.info(f"{topic}: {result.records_added} records added, {rows} archived")
        return dg.MaterializeResult(
            metadata={
                "records_added": dg.MetadataValue.int(result.records_added),
                OFFSETS_ADDED: dg.MetadataValue.json({str(q): list(r) for q, r in result.offset_ranges.items()}),
                "records": dg.MetadataValue.int(int(rows)),
                "delta_version": dg.MetadataValue.int(table.version()),
                "path": dg.MetadataValue.path(str(path)),
            }
        )

    return _raw


def raw_assets(p: Pipeline) -> list[dg.AssetsDefinition]:
    """One ingest asset per archived topic (``p.archived_topics``)."""
    return [raw_asset(p, t) for t in p.archived_topics]


def batch_views(p: Pipeline) -> dg.AssetsDefinition:
    """The multi-asset ``<p>_batch_views``: every batch view of ``p``, computed together by one
    Spark job (subsettable), daily partitioned with ``BackfillPolicy.single_run()``.

    A run recomputes the selected views from the whole raw history and materializes the days
    it targets and the days its new records fall on (:mod:`pipelines.dagster.partitions`);
    each day's materialization says, per view: ``rows``, ``recomputed``, ``partitions`` (the
    run's target), ``days_with_new_data``, ``batch_seconds``, ``watermark_ms``, ``path``, and
    for that day ``day_windows`` (windows starting that day; for a KTable view
    ``day_rows_updated``, by record timestamp), ``day_new_records`` and
    ``materialized_because``.
    """
    keys = {v: view_asset_key(p, v) for v in p.view_names}
    view_of_key = {k: v for v, k in keys.items()}
    deps = [raw_key(p, t) for t in p.input_topics]

    @dg.multi_asset(
        name=f"{p.name}_batch_views",
        specs=[
            dg.AssetSpec(
                key,
                group_name=group(p, "batch"),
                kinds={"spark", "delta"},
                deps=deps,
                description=f"Batch view `<lake>/{p.name}/views/{view}` ({_window_text(p, view)})"
                + (f": {p.view(view).description}." if p.view(view).description else "."),
                metadata={"view": view},
                skippable=True,
            )
            for view, key in keys.items()
        ],
        partitions_def=partitions_def(p),
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=True,
    )
    def _views(context: dg.AssetExecutionContext, spark: SparkResource,
               lake: LakeResource) -> Iterator[dg.MaterializeResult]:
        from batch_layer.delta.layout import LakeLayout
        from pipelines.job.serving_steps import read_batch_views
        from pipelines.job.steps import run_batch_layer

        views = sorted((view_of_key[k] for k in context.selected_asset_keys), key=p.view_names.index)
        folder = lake.writable(p)
        stats = run_batch_layer(p, spark.session(), folder, views=views)
        frames = read_batch_views(p, folder, views)
        days = days_of_run(p, context, folder)
        context.log.info(f"{p.name} batch views: {describe(days)}")
        for view in views:
            df = frames[view]
            windowed = p.view_specs[view].windowed
            per_day = count_per_day(df["window_start" if windowed else "timestamp"].tolist()) if len(df) else {}
            run_md = {
                "rows": dg.MetadataValue.int(len(df)),
                "recomputed": dg.MetadataValue.text("every day: the whole raw history"),
                "partitions": dg.MetadataValue.text(days.label),
                "days_with_new_data": dg.MetadataValue.text(compact_days(days.new) or "none"),
                "batch_seconds": dg.MetadataValue.float(round(stats.seconds, 2)),
                "watermark_ms": dg.MetadataValue.int(int(stats.watermark_ms or 0)),
                "path": dg.MetadataValue.path(str(LakeLayout(folder).batch_view(view))),
            }

            def day_md(day: str) -> dict[str, Any]:
                return {
                    ("day_windows" if windowed else "day_rows_updated"): dg.MetadataValue.int(per_day.get(day, 0)),
                    "day_new_records": dg.MetadataValue.int(days.new.get(day, 0)),
                    "materialized_because": dg.MetadataValue.text(days.reason(day)),
                }

            for day in days.target:
                context.add_asset_metadata(day_md(day), asset_key=keys[view], partition_key=day)
            yield dg.MaterializeResult(asset_key=keys[view], metadata=run_md)
            for day in days.extra:  # days this run's data falls on, beyond its target
                context.log_event(dg.AssetMaterialization(asset_key=keys[view], partition=day,
                                                          metadata={**run_md, **day_md(day)}))

    return _views


def _window_text(p: Pipeline, view: str) -> str:
    spec = p.view_specs[view]
    if not spec.windowed:
        return "a KTable: one row per key"
    if spec.window_kind == "session":
        return f"session windows, gap {_duration(p.windows_of(view).gap_ms)}"
    if spec.window_kind == "hopping":
        return f"hopping windows of {_duration(spec.size_ms)} advancing {_duration(spec.advance_ms)}"
    return f"tumbling windows of {_duration(spec.size_ms)}"


def _duration(ms: int) -> str:
    """``3600000`` -> ``1 h``, ``300000`` -> ``5 min``, else ``<ms> ms``."""
    if ms % 3_600_000 == 0:
        return f"{ms // 3_600_000} h"
    if ms % 60_000 == 0:
        return f"{ms // 60_000} min"
    return f"{ms} ms"


def serving_publish(p: Pipeline) -> dg.AssetsDefinition:
    """``[<p>, serving_publish]``: merge the batch views with the speed views at the batch
    watermark into ``<lake root>/<p>/serving``.

    The speed views are the speed layer's view output topics (read to their end, from where
    the merge at the batch watermark needs them: ``speed_read_start``); when a
    topic does not exist yet (no speed layer ran on this cluster), or no cluster is
    configured, the view is published from the batch alone. Metadata: ``rows_<view>``,
    ``speed_views``, ``batch_watermark_ms``, ``path``.
    """

    @dg.asset(
        key=publish_key(p),
        group_name=group(p, "serving"),
        kinds={"delta"},
        deps=[*(view_asset_key(p, v) for v in p.view_names), speed_key(p)],
        description=f"Merged views `<lake>/{p.name}/serving/<view>` of `{p.name}`: batch for windows closed "
        "before the batch watermark, speed for the rest; each row says its source.",
    )
    def _publish(context: dg.AssetExecutionContext, kafka: KafkaResource, lake: LakeResource) -> dg.MaterializeResult:
        from batch_layer.delta.layout import LakeLayout
        from pipelines.job.serving_steps import publish_views, read_batch_views, read_speed_views
        from serving.errors import SpeedSourceError
        from serving.views.batch import read_batch_watermark

        folder = lake.writable(p)
        batch_frames = read_batch_views(p, folder)
        watermark = read_batch_watermark(folder)
        speed_frames: dict[str, Any] = {}
        servers = kafka.configured_bootstrap()  # a fresh embedded broker would hold no speed view
        for view in p.view_names if servers else ():
            try:  # the fresh edge only: what the merge at the watermark keeps
                speed_frames.update(read_speed_views(p, servers, [view], timeout_s=120, merge_at_ms=watermark))
            except SpeedSourceError as exc:
                context.log.warning(f"{view}: no speed view ({exc}); publishing the batch view alone")
        if not servers:
            context.log.info("no Kafka cluster configured: publishing the batch views alone")
        rows = publish_views(p, folder, batch_frames, speed_frames, watermark_ms=watermark)
        return dg.MaterializeResult(
            metadata={
                **{f"rows_{slug(v)}": dg.MetadataValue.int(n) for v, n in rows.items()},
                "speed_views": dg.MetadataValue.text(", ".join(sorted(speed_frames)) or "none"),
                "batch_watermark_ms": dg.MetadataValue.int(int(watermark or 0)),
                "path": dg.MetadataValue.path(str(LakeLayout(folder).serving_folder)),
            }
        )

    return _publish


def pipeline_assets(p: Pipeline) -> list[dg.AssetSpec | dg.AssetsDefinition]:
    """Every asset of ``p``: topic specs, the speed layer, ingest, batch views, publish."""
    return [*topic_specs(p), speed_layer_spec(p), *raw_assets(p), batch_views(p), serving_publish(p)]
