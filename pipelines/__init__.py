"""duet's orchestration product: declare a pipeline once, run it everywhere.

* :class:`Pipeline` (:mod:`pipelines.declaration.pipeline`): the one declaration of a pipeline (topology,
  Streams config, source topics, dead-letter topic, views and their checks, partitions,
  sample data). Every surface takes it.
* :mod:`pipelines.cli` (with :mod:`pipelines.cli.dagster_commands` and :mod:`pipelines.cli.support`):
  ``duet run | load | speed | batch | serve | query | ui | backfill | init``,
  each with ``--pipeline module:attribute`` (:mod:`pipelines.declaration.resolve`).
* :mod:`pipelines.job.main_job`: the main job ``duet run`` as plain functions (phases in
  :mod:`pipelines.job.steps` and :mod:`pipelines.job.serving_steps`), called by the CLI and the
  Dagster assets; :mod:`pipelines.produce.replay` feeds the speed layer a live stream.
* :mod:`pipelines.dagster`: ``definitions(*pipelines)``, the Dagster ``Definitions`` of one or
  several pipelines (assets, checks, resources, partitions, schedules, sensors).
* :mod:`pipelines.examples`: the flights and shop examples (the framework never imports them).

Importing this package imports nothing heavy (no Dagster, Spark or Kafka client).
"""

from pipelines.declaration.pipeline import Highlights, Partitioning, Pipeline, PipelineError, Sample, Source, SourceRecord, View

__all__ = ["Pipeline", "Source", "View", "Partitioning", "Sample", "SourceRecord", "Highlights", "PipelineError"]
