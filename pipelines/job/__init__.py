"""The main job (``duet run``) and its phases, as plain functions the CLI and the Dagster
assets call.

* :mod:`.main_job`: ``run_main_job``, the phases in order (load, speed, ingest, batch, merge,
  checks, agreement) and its :class:`~.main_job.RunSummary`;
* :mod:`.steps`: the phases that touch Kafka, the speed layer and the batch layer;
* :mod:`.serving_steps`: the phases of the serving layer (read, publish, check, compare);
* :mod:`.summary`: the summary ``duet run`` prints.

Imports every room below it (declaration, lake, produce, speed); Dagster and the CLI import it.
"""
