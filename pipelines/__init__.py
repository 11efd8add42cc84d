"""duet's orchestration product: declare a pipeline once, run it everywhere.

``from pipelines import Pipeline, Source, View, Partitioning, Sample, SourceRecord,
Highlights, PipelineError``: the declaration, all a pipeline module needs.

The package's rooms, bottom up (each imports only the rooms below it;
``tests/test_pipelines/test_pipelines_package_shape.py`` checks it):

* :mod:`pipelines.preflight` (``UserError``, the checks a command makes first) and
  :mod:`pipelines.progress` (the ``Reporter`` of the progress bars);
* :mod:`pipelines.declaration`: :class:`Pipeline` and its parts, sample data, resolving
  ``--pipeline module:attribute``, reading a topology;
* :mod:`pipelines.lake`: the lake root, its lock, what was loaded;
* :mod:`pipelines.produce`: the topics a pipeline declares, loading and replaying its sample
  data into them;
* :mod:`pipelines.speed`: the speed service (the topology on ``speed_layer.KafkaStreams``, as
  one or N instances, and its HTTP server);
* :mod:`pipelines.job`: the main job ``duet run`` and its phases, plain functions the CLI
  and the Dagster assets call;
* :mod:`pipelines.dagster`: ``definitions(*pipelines)``, the Dagster ``Definitions`` of one or
  several pipelines, with the client and home of ``duet backfill`` and ``duet ui``;
* :mod:`pipelines.cli`: the ``duet`` commands and ``duet init``'s scaffold;
* :mod:`pipelines.examples`: the flights and shop examples (the framework never imports them).

Importing this package imports nothing heavy (no Dagster, Spark or Kafka client).
"""

from pipelines.declaration.parts import Highlights, Partitioning, PipelineError, Source, View
from pipelines.declaration.pipeline import Pipeline
from pipelines.declaration.sample_data import Sample, SourceRecord

__all__ = ["Pipeline", "Source", "View", "Partitioning", "Sample", "SourceRecord", "Highlights", "PipelineError"]
