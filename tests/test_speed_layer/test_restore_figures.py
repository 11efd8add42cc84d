"""Restoration figures, small version of ``bench/faults/restore.py``: a clean restart restores
nothing (checkpoints), a wiped state directory restores every changelog record, and both
answer interactive queries with the values written."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.faults.restore import run

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]


def test_clean_restart_restores_nothing_and_a_wiped_one_restores_everything(kafka_bootstrap: str,
                                                                            tmp_path: Path) -> None:
    report = run(kafka_bootstrap, 5000, tmp_path / "state", timeout_s=300)
    assert report.clean_restart_restored == 0
    assert report.wiped_restart_restored == 5000
    assert report.entries == [5000, 5000] and report.wrong_answers == 0
    assert report.exact and report.restore_rate > 0
