"""What a write of the lake outside Dagster tells Dagster's catalog (issue 41, item 6).

``duet run`` and ``duet batch`` write a pipeline's lake without a Dagster run; the catalog
(``duet ui``) would then show every daily partition of every view Missing and no check
result. :func:`record_lake_write` records what they wrote in the Dagster instance of duet's
``DAGSTER_HOME`` (:func:`pipelines.dagster.home.ensure_dagster_home`) as runless asset events
(``DagsterInstance.report_runless_asset_event``, Dagster's way to report materializations
made by another tool), under the asset keys and partitions of :mod:`pipelines.dagster`:

* ``[<p>, raw_<topic>]``: one ``AssetMaterialization`` per archived topic;
* ``[<p>, view_<store>]``: one ``AssetMaterialization`` per daily partition the view's rows
  fall on (``window_start``, else ``timestamp``; days outside the partitions are left out),
  with the day's row count;
* the ``gx_suite`` check of each view: one ``AssetCheckEvaluation`` (passed, the failed
  expectations);
* ``[<p>, serving_publish]``: one ``AssetMaterialization`` with the rows published per view.

Runs of the ``<p>_recompute`` job (``duet ui``, ``duet up``'s schedule and sensor) record
their own materializations as Dagster runs do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.dagster.keys import CHECK_NAME, publish_key, raw_key, slug, view_asset_key
from pipelines.dagster.partitions import count_per_day, partition_keys
from pipelines.declaration.pipeline import Pipeline

__all__ = ["record_lake_write", "lake_write_events"]


def lake_write_events(p: Pipeline, writer: str, batch_frames: Mapping[str, pd.DataFrame],
                      checks: Mapping[str, Any], published: Mapping[str, int] | None) -> list[Any]:
    """The runless events of a write of ``p``'s lake by ``writer`` (``"duet run"``...):
    ``batch_frames`` the batch views written (``{view: frame}``), ``checks`` their GX results
    (``{view: result}`` with ``success`` and ``results``), ``published`` the rows published
    per view (``None``: nothing published). See the module docstring."""
    days = set(partition_keys(p))
    events: list[Any] = [dg.AssetMaterialization(asset_key=raw_key(p, t), metadata={"written_by": writer})
                         for t in p.archived_topics]
    for view, df in batch_frames.items():
        spec = p.view_specs[view]
        column = "window_start" if spec.windowed else "timestamp"
        per_day = count_per_day(df[column].tolist()) if len(df) else {}
        what = "day_windows" if spec.windowed else "day_rows"
        for day in sorted(d for d in per_day if d in days):
            events.append(dg.AssetMaterialization(
                asset_key=view_asset_key(p, view), partition=day,
                metadata={what: dg.MetadataValue.int(per_day[day]), "written_by": dg.MetadataValue.text(writer)}))
    for view, result in checks.items():
        failed = [f"{c.type}({c.column})" for c in result.results if not c.success]
        events.append(dg.AssetCheckEvaluation(
            asset_key=view_asset_key(p, view), check_name=CHECK_NAME, passed=bool(result.success),
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"evaluated": dg.MetadataValue.int(len(result.results)),
                      "failed": dg.MetadataValue.text(", ".join(failed) or "none"),
                      "written_by": dg.MetadataValue.text(writer)}))
    if published is not None:
        events.append(dg.AssetMaterialization(
            asset_key=publish_key(p),
            metadata={**{f"rows_{slug(v)}": dg.MetadataValue.int(n) for v, n in published.items()},
                      "written_by": dg.MetadataValue.text(writer)}))
    return events


def record_lake_write(p: Pipeline, writer: str, batch_frames: Mapping[str, pd.DataFrame],
                      checks: Mapping[str, Any], published: Mapping[str, int] | None,
                      instance: dg.DagsterInstance | None = None, *, rebuilt: bool = False) -> int:
    """Report :func:`lake_write_events` to ``instance`` (default: the instance of duet's
    ``DAGSTER_HOME``, created if needed); the number of events reported. ``rebuilt``: the
    writer rebuilt the lake from scratch (``duet run``): the history of the assets it wrote
    is wiped first (``DagsterInstance.wipe_assets``), so that no day of an earlier lake still
    shows materialized.

    Raises:
        dagster's storage errors: the instance cannot be written (the caller says so; the
            lake itself is written already).
    """
    events = lake_write_events(p, writer, batch_frames, checks, published)
    if instance is None:
        from pipelines.dagster.home import ensure_dagster_home

        home = ensure_dagster_home(set_env=False)
        with dg.DagsterInstance.from_config(str(home)) as owned:
            return record_lake_write(p, writer, batch_frames, checks, published, owned, rebuilt=rebuilt)
    if rebuilt:
        instance.wipe_assets(sorted({e.asset_key for e in events}, key=lambda k: k.to_string()))
    for event in events:
        instance.report_runless_asset_event(event)
    return len(events)
