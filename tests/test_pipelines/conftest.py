from __future__ import annotations

from pathlib import Path

import pytest

from pipelines_testkit import departures_rows, write_batch_view  # noqa: F401


@pytest.fixture
def tiny_lake(tmp_path: Path) -> Path:
    """A lake ROOT whose flights folder holds a valid ``flights/views/departures_hourly``."""
    root = tmp_path / "lake"
    write_batch_view(root / "flights", "departures_hourly", departures_rows())
    return root
