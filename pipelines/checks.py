"""Blocking asset checks: the Great Expectations suite of each batch view.

Each check runs :func:`pipelines.views.expectations` on ``<lake>/views/<store>`` through the
serving layer's quality module (GX 1.24, pandas), stores the result in
``<lake>/quality/<store>.json`` (served by ``GET /quality``) and returns it as metadata.
Blocking: when a suite fails, ``serving_publish`` is not materialized in the same run.
"""

import dagster as dg

from pipelines.assets.batch import VIEW_ASSET_KEYS
from pipelines.serving_steps import run_checks
from pipelines.resources import LakeResource
from pipelines.views import VIEW_NAMES

__all__ = ["gx_check", "VIEW_CHECKS"]


def gx_check(view: str) -> dg.AssetChecksDefinition:
    """The blocking GX asset check ``gx_suite`` of ``view_<view>``."""

    @dg.asset_check(
        asset=VIEW_ASSET_KEYS[view],
        name="gx_suite",
        blocking=True,
        description=f"Great Expectations suite of `{view}`: non-null keys, unique windows, window bounds "
        "aligned to the window size, values within physical limits.",
    )
    def _check(lake: LakeResource) -> dg.AssetCheckResult:
        result = run_checks(lake.root(), [view])[view]
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


#: One check per view.
VIEW_CHECKS: list[dg.AssetChecksDefinition] = [gx_check(v) for v in VIEW_NAMES]
