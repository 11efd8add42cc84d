"""The broker paused (SIGSTOP), then SIGKILLed and restarted on its data, under load, with
exactly_once_v2: the instance recovers without a restart and its outputs (read_committed)
and store are exact (small version of ``bench/faults/broker_outage.py``). The broker is the
test's own: the session broker is left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.faults.broker_outage import run
from speed_layer.admin import EmbeddedKafka

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]


def test_exactly_once_survives_a_paused_and_a_restarted_broker(tmp_path: Path) -> None:
    with EmbeddedKafka(tmp_path / "kafka") as broker:
        report = run(broker, records=10_000, pause_s=10, state_dir=tmp_path / "state")
    assert report.errors == [], report
    assert report.state_at_end == "RUNNING", report
    assert (report.wrong_output_keys, report.wrong_store_keys) == (0, 0), report
