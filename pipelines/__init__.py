"""duet's concrete pipelines, their orchestration and the ``duet`` CLI.

* ``topologies/``: one module per pipeline (the flagship: :mod:`pipelines.topologies.flights`),
  the single definition every layer runs.
* :mod:`pipelines.main_job`: the main job ``duet run`` as plain functions (phases in
  :mod:`pipelines.steps` and :mod:`pipelines.serving_steps`), called by the CLI and by the
  Dagster assets; :mod:`pipelines.replay` feeds the speed layer a live stream.
* :mod:`pipelines.definitions`: the one Dagster ``Definitions`` (assets, checks, resources,
  partitions, schedules, sensors in their own modules); ``workspace.yaml`` loads it.
* :mod:`pipelines.cli`: ``duet run | load | speed | batch | serve``.

Importing this package imports nothing heavy (no Dagster, Spark or Kafka client).
"""
