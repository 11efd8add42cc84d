"""The Dagster definitions of duet (loaded by ``workspace.yaml``)."""

import dagster as dg

from pipelines.assets import all_assets
from pipelines.checks import VIEW_CHECKS
from pipelines.resources import default_resources
from pipelines.schedules import hourly_recompute, recompute_job
from pipelines.sensors import new_kafka_data, speed_layer_lag

defs = dg.Definitions(
    assets=all_assets(),
    asset_checks=VIEW_CHECKS,
    jobs=[recompute_job],
    schedules=[hourly_recompute],
    sensors=[new_kafka_data, speed_layer_lag],
    resources=default_resources(),
    executor=dg.in_process_executor,
)
