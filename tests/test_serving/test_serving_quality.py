"""Great Expectations suites over view frames (real GX 1.24, pandas)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from serving.errors import QualityError
from serving.quality import (
    ExpectationSpec,
    QualityResult,
    load_results,
    prepare_frame,
    quality_path,
    run_suite,
    save_result,
    standard_expectations,
)
from serving.views import ViewSpec, merge_view
from serving_testkit import HOUR, MIN, T0, TUMBLING, frame

NULL = "expect_column_values_to_not_be_null"
BETWEEN = "expect_column_values_to_be_between"


def good_counts() -> pd.DataFrame:
    return merge_view(TUMBLING, frame([
        ("EWR", T0, T0 + HOUR, {"count": 3, "delay": {"mean": 1.5}}, T0 + 1),
        ("JFK", T0 + HOUR, T0 + 2 * HOUR, {"count": 0, "delay": {"mean": -2.0}}, T0 + HOUR + 1),
    ]), None, T0 + 3 * HOUR)


def test_standard_expectations_shape() -> None:
    exps = standard_expectations(TUMBLING, {"count": (0, None), "": (None, None)})
    kinds = {(e.type, e.kwargs.get("column")) for e in exps}
    assert (NULL, "key") in kinds and (NULL, "window_start") in kinds and (NULL, "window_end") in kinds
    assert (BETWEEN, "_window_start_mod_3600000") in kinds and (BETWEEN, "_window_length") in kinds
    assert (BETWEEN, "value.count") in kinds and ("expect_column_to_exist", "value.$") in kinds
    table = standard_expectations(ViewSpec.table("t"))
    assert {e.type for e in table} == {NULL, "expect_column_values_to_be_unique"}
    sess = standard_expectations(ViewSpec.session("s", 5 * MIN))
    assert {e.kwargs.get("column") for e in sess if e.type == BETWEEN} == {"_window_length"}


def test_prepare_frame_derives_columns() -> None:
    exps = standard_expectations(TUMBLING, {"count": (0, 10), "delay.mean": (-60, 600)})
    out = prepare_frame(good_counts(), exps)
    assert out["value.count"].tolist() == [3.0, 0.0]
    assert out["value.delay.mean"].tolist() == [1.5, -2.0]
    assert out["_window_length"].tolist() == [HOUR, HOUR]
    assert out["_window_start_mod_3600000"].tolist() == [0, 0]
    scalar = prepare_frame(frame([("a", None, None, 5, 0)]), [ExpectationSpec(type=NULL, kwargs={"column": "value.$"})])
    assert scalar["value.$"].tolist() == [5.0]


def test_run_suite_passes() -> None:
    exps = standard_expectations(TUMBLING, {"count": (0, None), "delay.mean": (-60, 600)})
    res = run_suite("dep_counts", good_counts(), exps)
    assert res.success, res
    assert res.view == "dep_counts"
    assert res.statistics["evaluated_expectations"] == len(exps)
    assert all(r.success for r in res.results)
    assert res.check(BETWEEN, "value.count").unexpected_count == 0


def test_run_suite_fails_on_negative_count_and_misalignment() -> None:
    df = good_counts()
    df.loc[1, "value"] = json.dumps({"count": -4, "delay": {"mean": 0}})
    df.loc[0, "window_start"] = T0 + 5 * MIN  # not aligned, wrong length
    res = run_suite("dep_counts", df, standard_expectations(TUMBLING, {"count": (0, None)}))
    assert not res.success
    failed = {(r.type, r.column) for r in res.results if not r.success}
    assert failed == {(BETWEEN, "value.count"), (BETWEEN, "_window_start_mod_3600000"),
                      (BETWEEN, "_window_length")}
    assert res.check(BETWEEN, "value.count").unexpected_count == 1
    assert res.statistics["unsuccessful_expectations"] == 3


def test_run_suite_missing_column_and_bad_specs() -> None:
    res = run_suite("v", good_counts(), [
        ExpectationSpec(type=BETWEEN, kwargs={"column": "value.seats", "min_value": 0}),
        ExpectationSpec(type="expect_table_row_count_to_be_between", kwargs={"min_value": 1}),
    ])
    assert not res.success
    missing = res.check(BETWEEN, "value.seats")
    assert not missing.success and "does not exist" in (missing.exception or "")
    assert res.check("expect_table_row_count_to_be_between").observed_value == 2
    with pytest.raises(QualityError, match="unknown expectation"):
        run_suite("v", good_counts(), [ExpectationSpec(type="expect_the_unexpected")])
    with pytest.raises(QualityError, match="invalid kwargs"):
        run_suite("v", good_counts(), [ExpectationSpec(type=BETWEEN, kwargs={"colum": "x"})])


def test_run_suite_empty_frame() -> None:
    empty = merge_view(TUMBLING, None, None, None)
    res = run_suite("empty", empty, standard_expectations(TUMBLING, {"count": (0, None)}))
    assert res.success


def test_save_and_load_results(tmp_path: Path) -> None:
    res = run_suite("dep_counts", good_counts(), standard_expectations(TUMBLING, {"count": (0, None)}))
    path = save_result(tmp_path, res)
    assert path == quality_path(tmp_path, "dep_counts") == tmp_path / "quality" / "dep_counts.json"
    doc = json.loads(path.read_text())
    assert {"success", "statistics", "results"} <= set(doc)
    # a raw GX document written by another tool is converted; garbage is skipped
    (tmp_path / "quality" / "raw.json").write_text(json.dumps({
        "success": False,
        "statistics": {"evaluated_expectations": 1},
        "results": [{"success": False, "expectation_config": {"type": NULL, "kwargs": {"column": "key"}},
                     "result": {"unexpected_count": 2}, "exception_info": {"raised_exception": False}}],
    }))
    (tmp_path / "quality" / "broken.json").write_text("{")
    loaded = load_results(tmp_path)
    assert set(loaded) == {"dep_counts", "raw"}
    assert loaded["dep_counts"] == res
    assert loaded["raw"].results[0].unexpected_count == 2 and loaded["raw"].view == "raw"
    assert load_results(tmp_path / "nothing") == {}
    assert isinstance(loaded["raw"], QualityResult)


def test_import_serving_is_light() -> None:
    code = (
        "import sys, serving, serving.quality, serving.views, serving.api\n"
        "from serving import *\n"
        "assert 'great_expectations' not in sys.modules, 'GX imported'\n"
        "assert 'pyspark' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    import serving

    assert set(serving.__all__) >= {"merge_view", "ViewIndex", "run_suite", "create_app", "ViewSpec"}
    for name in serving.__all__:
        assert getattr(serving, name) is not None
