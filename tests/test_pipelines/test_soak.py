"""The soak's short version (issue 41, item 7): ``duet up`` on the flights at 100 events/s
for 75 s with the recomputes its new-data sensor starts. The served speed stream time trails
the feed by little once it runs (<= 15 s of feed in the last third, on a loaded 2-core host,
while Spark recomputes beside it), and at the end speed == batch on every closed window and
serving's live table keeps only the windows open at the last batch watermark. RSS staying flat is a memory target: it is
``bench/bench_soak.py``'s (``--seconds 1800 --rate 1000``), not this test's."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(900)]


def _bench_soak() -> object:
    path = Path(__file__).resolve().parents[2] / "bench" / "bench_soak.py"
    spec = importlib.util.spec_from_file_location("bench_soak", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_soak"] = module
    spec.loader.exec_module(module)
    return module


def test_duet_up_holds_freshness_and_ends_with_speed_equal_to_batch(tmp_path: Path) -> None:
    soak = _bench_soak()
    result = soak.run_soak(75.0, 100.0, tmp_path)  # type: ignore[attr-defined]
    summary = result.summary()
    print(json.dumps(summary, default=str))
    # held: in the soak's last third the served stream time trails the feed by little. The
    # first samples include the start (the ready line to the first fetch) and, on a 2-core host
    # running the suite's Spark cluster test beside it, were 11-16 s behind (fc1, 98031a9); a
    # speed layer that stops in the first two thirds is 25 s or more behind in the last, one
    # that stops later leaves windows unequal to batch (the agreement below)
    tail = result.freshness_s[2 * len(result.freshness_s) // 3:]
    assert tail and max(tail) <= 15.0, summary
    assert result.recomputes >= 1, summary
    # serving's live table holds the rows after the batch watermark, not the history: once the
    # feed's end is served from batch, what is left is the windows open at it
    assert result.live_rows_final is not None and result.live_rows_final < 0.25 * max(result.live_rows), summary
    assert result.agreement and all(r == 1.0 for r in result.agreement.values()), summary
    assert all(n > 0 for n in result.compared.values()), summary
    assert result.stopped_s is not None and result.stopped_s < 60, summary
