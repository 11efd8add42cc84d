"""Blocking asset checks: the Great Expectations suite of each batch view.

Each check ``gx_suite`` of ``[<p>, view_<store>]`` runs ``p.expectations(store)`` (the
standard suite of the view's windows, the declared field limits, the declared expectations)
on ``<lake root>/<p>/views/<store>`` through :func:`pipelines.serving_steps.run_checks`
(GX 1.24, pandas), which stores the result in ``<lake root>/<p>/quality/<store>.json``
(served by ``GET /quality``); the check returns it as metadata (``gx``: the JSON result,
``evaluated``: expectations run, ``failed``: ``type(column)`` of each failure).
Blocking: when a suite fails, ``serving_publish`` is not materialized in the same run.
"""

# no `from __future__ import annotations`: Dagster reads the context and resource annotations
import dagster as dg

from pipelines.dagster.keys import CHECK_NAME, view_asset_key
from pipelines.dagster.resources import LakeResource
from pipelines.pipeline import Pipeline

__all__ = ["gx_check", "view_checks"]


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
        from pipelines.serving_steps import run_checks

        result = run_checks(p, p.lake(lake.root()), [view])[view]
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
