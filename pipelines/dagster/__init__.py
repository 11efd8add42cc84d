"""Dagster from the declaration: one or several :class:`~pipelines.declaration.pipeline.Pipeline` s as
ONE ``dagster.Definitions``.

``definitions(flights, shop)`` gives, per pipeline ``p`` (names in :mod:`.keys`, all
prefixed by ``p.name`` so pipelines never collide):

* assets (:mod:`.assets`): the Kafka topics (external), ``raw_<topic>`` (ingest),
  ``view_<store>`` (batch, daily partitions of :mod:`.partitions`), ``serving_publish``,
  and the speed layer (external);
* blocking Great Expectations checks per view (:mod:`.checks`);
* the ``<p>_recompute`` job and its schedule (:mod:`.schedules`);
* the ``<p>_new_kafka_data`` and ``<p>_speed_layer_lag`` sensors (:mod:`.sensors`); the sensor and
  the schedule ask for the days new data falls on (:mod:`.new_data`), and a run materializes
  the days it targets and the days its new records fall on (:mod:`.partitions`);

and one set of resources ``lake``, ``spark``, ``kafka`` (:mod:`.resources`). Beside them,
:mod:`.client` (the GraphQL client of a running UI, ``duet backfill``) and :mod:`.home`
(the ``DAGSTER_HOME`` of ``duet ui``).

Load it: ``dagster dev -m pipelines.dagster.workspace`` (the pipelines named by
``$DUET_PIPELINES``, see :mod:`.workspace`) or ``-m pipelines.examples.definitions`` (the
examples, what ``workspace.yaml`` loads). The modules hold no layer logic: assets, checks
and sensors call :mod:`pipelines.job.steps` and :mod:`pipelines.job.serving_steps`.
"""

from __future__ import annotations

import lazy_loader

# Loaded on first use: ``import pipelines.dagster.client`` (``duet backfill``) or ``.home``
# (``duet ui``) imports no Dagster.
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "factory": ["definitions"],
        "keys": ["view_asset_key"],
        "partitions": ["partitions_def"],
        "resources": ["KafkaResource", "LakeResource", "SparkResource", "default_resources"],
    },
)
