"""``duet run``'s verdict counts the differences nothing names (issue 42): a view whose
``unexplained`` count is not 0 fails the run, shows in red in the summary table and is in
``--json`` (``RunSummary``, ``pipelines/job/summary.py``)."""
from __future__ import annotations

from rich.console import Console

from pipelines.job.main_job import RunSummary
from pipelines.speed.service import SpeedStats
from pipelines.job.steps import BatchStats
from pipelines.job.summary import print_summary

DIFF = {"key": "p0396", "window_start": 1769079600000, "window_end": 1769083200000, "batch": {"conversions": 1},
        "speed": None, "reason": "missing_in_speed", "explained": False}


def _summary(agreement: float, unexplained: int) -> RunSummary:
    return RunSummary(
        pipeline="shop", records_in=10, records_in_by_topic={"clicks": 10}, speed=SpeedStats(application_id="app"),
        batch=BatchStats(), windows={"conversions_hourly": 3}, checks={"conversions_hourly": True}, check_failures={},
        agreement={"conversions_hourly": agreement}, compared={"conversions_hourly": 3},
        excluded={"conversions_hourly": 0}, differences={"conversions_hourly": [DIFF]} if unexplained else {},
        highlights=None, phase_seconds={}, lake="/lake", unexplained={"conversions_hourly": unexplained})


def _printed(summary: RunSummary) -> str:
    console = Console(record=True, width=250)
    print_summary(summary, console)
    return console.export_text()


def test_an_unexplained_difference_fails_the_run_and_is_reported() -> None:
    bad = _summary(2 / 3, 1)
    assert not bad.ok
    assert bad.to_json()["unexplained"] == {"conversions_hourly": 1}
    text = _printed(bad)
    assert "unexplained" in text and "differences no counted drop names: ['conversions_hourly']" in text
    # an explained difference still fails on agreement, but names its cause
    explained = _summary(2 / 3, 0)
    explained.differences = {"conversions_hourly": [{**DIFF, "explained": True}]}
    assert not explained.ok and explained.to_json()["unexplained"] == {"conversions_hourly": 0}
    assert "expired join" in _printed(explained)
    good = _summary(1.0, 0)
    assert good.ok and "OK" in _printed(good)
