"""Asset checks: the Great Expectations suite of each batch view, and the speed layer's lag.

Each check ``gx_suite`` of ``[<p>, view_<store>]`` runs ``p.expectations(store)`` (the
standard suite of the view's windows, the declared field limits, the declared expectations)
on ``<lake root>/<p>/views/<store>`` through :func:`pipelines.job.serving_steps.run_checks`
(GX 1.24, pandas), which stores the result in ``<lake root>/<p>/quality/<store>.json``
(served by ``GET /quality``); the check returns it as metadata (``gx``: the JSON result,
``evaluated``: expectations run, ``failed``: ``type(column)`` of each failure).
Blocking: when a suite fails, ``serving_publish`` is not materialized in the same run.

The check ``speed_lag`` of the external asset ``[<p>, speed_layer]`` reads the speed layer
(its service's ``/metrics``, else its consumer group: :mod:`pipelines.dagster.speed_probe`)
and fails when it is down or lags more than the bound (records). The ``<p>_speed_layer_lag``
sensor evaluates it every minute; it can also be run on demand (the check's "Execute" in the
UI, or any job selecting it).
"""

# no `from __future__ import annotations`: Dagster reads the context and resource annotations
import dagster as dg

from pipelines.dagster.keys import CHECK_NAME, speed_key, view_asset_key
from pipelines.dagster.resources import KafkaResource, LakeResource
from pipelines.dagster.speed_probe import (DEFAULT_MAX_LAG_RECORDS, SPEED_CHECK_NAME, lag_check, max_lag_env,
                                          max_lag_records, read_speed, server_env)
from pipelines.declaration.pipeline import Pipeline

__all__ = ["gx_check", "view_checks", "speed_lag_check"]


def _describe(p: Pipeline, view: str) -> str:
    kinds = sorted({e.type.removeprefix("expect_") for e in p.expectations(view)})
    return f"Great Expectations suite of {view} ({len(p.expectations(view))} expectations: {', '.join(kinds)})."


def gx_check(p: Pipeline, view: str) -> dg.AssetChecksDefinition:
    """The blocking GX asset check ``gx_suite`` of ``[<p>, view_<view>]``.

    Raises:
        KeyError: ``p`` has no view ``view``.
    """
    key = view_asset_key(p, view)

    @dg.asset_check(
        asset=key,
        name=CHECK_NAME,
        blocking=True,
        description=_describe(p, view),
    )
    def _check(lake: LakeResource) -> dg.AssetCheckResult:
        from pipelines.job.serving_steps import run_checks

        result = run_checks(p, lake.writable(p), [view])[view]
        failed = [f"{c.type}({c.column})" for c in result.results if not c.success]
        return dg.AssetCheckResult(
            passed=bool(result.success),
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={
                "gx": dg.MetadataValue.json(result.model_dump(mode="json")),
                "evaluated": dg.MetadataValue.int(len(result.results)),
                "failed": dg.MetadataValue.text(", ".join(failed) or "none"),
            },
        )

    return _check


def view_checks(p: Pipeline) -> list[dg.AssetChecksDefinition]:
    """One blocking check per view of ``p``."""
    return [gx_check(p, v) for v in p.view_names]


def speed_lag_check(p: Pipeline, max_lag: int | None = None) -> dg.AssetChecksDefinition:
    """The check ``speed_lag`` of ``[<p>, speed_layer]``: passes when the speed layer is
    RUNNING or REBALANCING and its total lag is at most ``$DUET_SPEED_MAX_LAG_<NAME>`` records
    (else ``max_lag``, else 10,000). Metadata: ``lag_total``, ``max_lag_records``, ``state``,
    ``source``.

    Run on demand it raises ``dagster.Failure`` when nothing is configured to read (no
    ``$DUET_SPEED_SERVER_<NAME>``, no cluster) or the bound is not an integer."""

    @dg.asset_check(
        asset=speed_key(p),
        name=SPEED_CHECK_NAME,
        description=f"The speed layer of `{p.name}` is up (RUNNING or REBALANCING) and lags at most "
        f"${max_lag_env(p)} records (default {max_lag if max_lag is not None else DEFAULT_MAX_LAG_RECORDS:,}): read from its "
        f"service (${server_env(p)}), else from its consumer group.",
    )
    def _speed_lag(kafka: KafkaResource) -> dg.AssetCheckResult:
        try:
            bound = max_lag_records(p, max_lag)
        except ValueError as exc:
            raise dg.Failure(description=str(exc)) from None
        reading = read_speed(p, kafka.configured_bootstrap())
        if reading is None:
            raise dg.Failure(description=f"nothing to read the speed layer of {p.name} from: set {server_env(p)} "
                             "or a Kafka cluster")
        passed, why, metadata = lag_check(reading, bound)
        return dg.AssetCheckResult(passed=passed, metadata=metadata, description=why)

    return _speed_lag
