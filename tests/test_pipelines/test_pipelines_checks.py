"""The GX asset checks run in process on a tiny lake (no broker, no Spark).

The lakes here are lake ROOTS; the flights pipeline's tables are in ``<root>/flights``."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from pipelines_testkit import departures_rows, write_batch_view

from pipelines.dagster import LakeResource, view_asset_key
from pipelines.dagster.checks import gx_check
from pipelines.examples.flights import pipeline as flights


def _run_check(root: Path) -> dg.AssetCheckEvaluation:
    check = gx_check(flights, "departures_hourly")
    res = dg.materialize(
        [dg.AssetSpec(view_asset_key(flights, "departures_hourly")), check],
        selection=dg.AssetSelection.checks(check),
        resources={"lake": LakeResource(path=str(root))},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    (evaluation,) = res.get_asset_check_evaluations()
    return evaluation


def test_check_passes_on_a_valid_view(tiny_lake: Path) -> None:
    ev = _run_check(tiny_lake)
    assert ev.passed
    assert ev.check_name == "gx_suite"
    assert ev.asset_key == dg.AssetKey(["flights", "view_departures_hourly"])
    gx = ev.metadata["gx"].value
    assert gx["success"] is True and gx["statistics"]["unsuccessful_expectations"] == 0
    assert ev.metadata["evaluated"].value == len(flights.expectations("departures_hourly"))
    # the result is stored in the pipeline's folder for GET /quality
    assert json.loads((flights.lake(tiny_lake) / "quality" / "departures_hourly.json").read_text())["success"] is True


def test_check_fails_on_impossible_delays(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    write_batch_view(flights.lake(root), "departures_hourly", departures_rows(mean_delay=5000.0))
    ev = _run_check(root)
    assert not ev.passed
    assert "value.mean_dep_delay" in ev.metadata["failed"].value


def test_check_fails_on_misaligned_windows(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    rows = departures_rows()
    rows[0]["window_start"] = int(rows[0]["window_start"]) + 60_000  # type: ignore[call-overload]
    rows[0]["window_end"] = int(rows[0]["window_end"]) + 60_000  # type: ignore[call-overload]
    write_batch_view(flights.lake(root), "departures_hourly", rows)
    ev = _run_check(root)
    assert not ev.passed
    assert "_window_start_mod_3600000" in ev.metadata["failed"].value


@pytest.mark.parametrize("view", flights.view_names)
def test_every_view_has_a_suite(view: str) -> None:
    cols = {e.kwargs.get("column") for e in flights.expectations(view)}
    assert "key" in cols and "window_start" in cols
    (spec,) = gx_check(flights, view).check_specs
    assert spec.blocking and f"{len(flights.expectations(view))} expectations" in (spec.description or "")
