"""The declaration of a pipeline: what it is, not how it runs.

* :mod:`.pipeline`: :class:`~.pipeline.Pipeline` and its parts (:class:`~.pipeline.Source`,
  :class:`~.pipeline.View`, :class:`~.pipeline.Partitioning`, :class:`~.pipeline.Highlights`);
* :mod:`.sample_data`: :class:`~.sample_data.Sample` and :class:`~.sample_data.SourceRecord`,
  the sample data a pipeline declares;
* :mod:`.topology_reading`: what a ``Topology`` reads and writes (source topics, sinks,
  servable stores);
* :mod:`.resolve`: finding a pipeline from ``module:attribute``, ``$DUET_PIPELINE`` or a
  project's ``[tool.duet]``.

The bottom room of :mod:`pipelines` (with :mod:`pipelines.preflight` and
:mod:`pipelines.progress`): it imports no other room and nothing heavy (no Kafka client,
Spark or Dagster).
"""
