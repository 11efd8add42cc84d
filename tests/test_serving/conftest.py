"""Fixtures of the serving tests: a small published lake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.quality import run_suite, save_result, standard_expectations
from serving.views import publish
from serving_testkit import SESSION, TABLE, TUMBLING, WATERMARK, lake_frames


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A lake with three published views (tumbling, session, table) and a batch watermark."""
    root = tmp_path / "lake"
    batch, speed = lake_frames()
    publish(root, [TUMBLING, SESSION, TABLE], batch, speed, WATERMARK)
    (root / "views").mkdir(parents=True, exist_ok=True)
    (root / "views" / "_batch.json").write_text(json.dumps({
        "watermark_ms": WATERMARK,
        "finished_at": "2013-01-01T05:00:00Z",
        "views": {k: {"rows": len(v)} for k, v in batch.items()},
    }))
    return root


@pytest.fixture
def lake_with_quality(lake: Path) -> Path:
    """``lake`` plus ``quality/dep_counts.json`` (passing) and ``quality/dep_counts_bad.json``
    (failing: a negative count)."""
    from deltalake import DeltaTable

    df = DeltaTable(str(lake / "serving" / "dep_counts")).to_pyarrow_table().to_pandas()
    save_result(lake, run_suite("dep_counts", df, standard_expectations(TUMBLING, {"count": (0, None)})))
    bad = df.copy()
    bad.loc[0, "value"] = json.dumps({"count": -1})
    save_result(lake, run_suite("dep_counts_bad", bad, standard_expectations(TUMBLING, {"count": (0, None)})))
    return lake
