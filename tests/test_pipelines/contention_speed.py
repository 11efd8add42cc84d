"""Run the speed layer of a pipeline on what its topics hold (loaded by the test) and write
its views, late drops, expired join drops and enforced waits as JSON: the process the
contention test (``test_contention.py``) starts, so that it can stop it with SIGSTOP.

Usage: ``python contention_speed.py BOOTSTRAP MODULE:ATTR OUT.json [INSTANCES]`` (default 1;
with more, as the speed phase of ``duet run --instances N``).
"""
from __future__ import annotations

import importlib
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

from pipelines.job.serving_steps import read_speed_views
from pipelines.job.steps import ensure_pipeline_topics, reset_pipeline, run_speed


def main(bootstrap: str, ref: str, out: str, instances: str = "1") -> None:
    module, attr = ref.split(":")
    pipeline = getattr(importlib.import_module(module), attr)
    reset_pipeline(pipeline, bootstrap, Path(tempfile.mkdtemp()), inputs=False)
    ensure_pipeline_topics(pipeline, bootstrap)
    stats = run_speed(pipeline, bootstrap, timeout_s=900, instances=int(instances))
    views = {}
    for view, df in read_speed_views(pipeline, bootstrap).items():
        df = df.drop_duplicates(subset=["key", "window_start"], keep="last")
        views[view] = sorted([str(k), None if pd.isna(s) else int(s), str(v)]
                             for k, s, v in zip(df["key"], df["window_start"], df["value"]))
    metrics = stats.metrics
    Path(out).write_text(json.dumps({
        "views": views, "dropped_late": stats.dropped_late, "expired_join_drops": stats.expired_join_drops,
        "late_windows": {s: sorted(map(list, w)) for s, w in stats.late_windows.items()},
        "enforced": int(metrics.get("enforced-processing-total", 0)),
    }))


if __name__ == "__main__":
    main(*sys.argv[1:5])
