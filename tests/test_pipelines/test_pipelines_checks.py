"""The GX asset checks run in process on a tiny lake (no broker, no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from pipelines_testkit import departures_rows, write_batch_view

from pipelines.checks import gx_check
from pipelines.resources import LakeResource


def _run_check(lake: Path) -> dg.AssetCheckEvaluation:
    check = gx_check("departures_hourly")
    res = dg.materialize(
        [dg.AssetSpec("view_departures_hourly"), check],
        selection=dg.AssetSelection.checks(check),
        resources={"lake": LakeResource(path=str(lake))},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    (evaluation,) = res.get_asset_check_evaluations()
    return evaluation


def test_check_passes_on_a_valid_view(tiny_lake: Path) -> None:
    ev = _run_check(tiny_lake)
    assert ev.passed
    assert ev.check_name == "gx_suite"
    gx = ev.metadata["gx"].value
    assert gx["success"] is True and gx["statistics"]["unsuccessful_expectations"] == 0
    # the result is stored for GET /quality
    assert json.loads((tiny_lake / "quality" / "departures_hourly.json").read_text())["success"] is True


def test_check_fails_on_impossible_delays(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_batch_view(lake, "departures_hourly", departures_rows(mean_delay=5000.0))
    ev = _run_check(lake)
    assert not ev.passed
    assert "value.mean_dep_delay" in ev.metadata["failed"].value


def test_check_fails_on_misaligned_windows(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    rows = departures_rows()
    rows[0]["window_start"] = int(rows[0]["window_start"]) + 60_000  # type: ignore[call-overload]
    rows[0]["window_end"] = int(rows[0]["window_end"]) + 60_000  # type: ignore[call-overload]
    write_batch_view(lake, "departures_hourly", rows)
    ev = _run_check(lake)
    assert not ev.passed
    assert "_window_start_mod_3600000" in ev.metadata["failed"].value


@pytest.mark.parametrize("view", ["departures_hourly", "same_tz_hourly", "seats_by_dest_daily",
                                  "plane_duty_sessions"])
def test_every_view_has_a_suite(view: str) -> None:
    from pipelines.views import expectations

    cols = {e.kwargs.get("column") for e in expectations(view)}
    assert "key" in cols and "window_start" in cols
