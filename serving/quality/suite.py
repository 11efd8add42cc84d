"""Great Expectations (1.24) suites over view frames, and their stored results.

Great Expectations is imported lazily inside :func:`run_suite` (its import takes seconds).

Derived columns. Expectations may name columns that :func:`prepare_frame` computes before
validation when they are missing from the frame:

* ``value.<field>``: a field of the JSON ``value`` (nested objects flattened with ``.``, e.g.
  ``value.delay.mean``); ``value.$`` is the whole value when it is not a JSON object (e.g. a
  plain count). Columns whose non-null values are all numbers become numeric; a field absent
  from a row is null. A field absent from every row of a non-empty frame is not created, so
  its expectations fail with "column does not exist".
* ``_window_length``: ``window_end - window_start`` (ms).
* ``_window_start_mod_<n>``: ``window_start % n`` (``n`` in ms), e.g.
  ``_window_start_mod_3600000``.

Stored results: ``<lake>/quality/<view>.json`` holds :class:`QualityResult` as JSON
(``view, success, statistics, results, evaluated_at``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from batch_layer.delta.layout import LakeLayout
from serving.errors import QualityError
from serving._jsonio import atomic_write_json
from serving.views.model import ViewSpec

__all__ = [
    "ExpectationSpec",
    "QualityCheck",
    "QualityResult",
    "run_suite",
    "prepare_frame",
    "value_column",
    "standard_expectations",
    "save_result",
    "load_results",
    "quality_path",
]

log = logging.getLogger(__name__)

_MOD_RE = re.compile(r"^_window_start_mod_(\d+)$")
_COLUMN_KWARGS = ("column", "column_A", "column_B")


class ExpectationSpec(BaseModel):
    """One expectation: a GX expectation type name and its keyword arguments.

    Example: ``ExpectationSpec(type="expect_column_values_to_be_between",
    kwargs={"column": "value.count", "min_value": 0})``.
    """

    model_config = ConfigDict(frozen=True)

    type: str
    kwargs: dict[str, Any] = Field(default_factory=dict)

    def columns(self) -> list[str]:
        """The columns this expectation reads (``column``, ``column_A/B``, ``column_list``)."""
        cols = [self.kwargs[k] for k in _COLUMN_KWARGS if isinstance(self.kwargs.get(k), str)]
        cols.extend(self.kwargs.get("column_list") or [])
        return cols


class QualityCheck(BaseModel):
    """The outcome of one expectation.

    Attributes:
        type: expectation type name.
        column: the column (``column_A,column_B`` / joined ``column_list`` for multi-column
            expectations, ``None`` for table expectations).
        success: whether it passed.
        observed_value: GX's observed value (aggregate expectations), else ``None``.
        unexpected_count: number of failing rows (map expectations), else ``None``.
        exception: the error message when GX could not evaluate it (e.g. missing column).
    """

    type: str
    column: str | None = None
    success: bool
    observed_value: Any = None
    unexpected_count: int | None = None
    exception: str | None = None


class QualityResult(BaseModel):
    """The result of a suite over one view.

    Attributes:
        view: view name.
        success: all expectations passed.
        statistics: GX statistics (``evaluated_expectations``, ``successful_expectations``,
            ``unsuccessful_expectations``, ``success_percent``).
        results: one :class:`QualityCheck` per expectation, sorted by ``(column, type)``.
        evaluated_at: ISO-8601 UTC time of the run.
    """

    view: str
    success: bool
    statistics: dict[str, Any]
    results: list[QualityCheck]
    evaluated_at: str | None = None

    def check(self, type_: str, column: str | None = None) -> QualityCheck:
        """The first result of expectation ``type_`` on ``column``.

        Raises:
            KeyError: if there is none.
        """
        for r in self.results:
            if r.type == type_ and r.column == column:
                return r
        raise KeyError((type_, column))

    @classmethod
    def from_gx_json(cls, view: str, doc: dict[str, Any], evaluated_at: str | None = None) -> QualityResult:
        """Build from GX's ``ExpectationSuiteValidationResult.to_json_dict()`` (or from a
        stored :class:`QualityResult`)."""
        results = []
        for r in doc.get("results", []):
            if "expectation_config" not in r:  # already in our shape
                results.append(QualityCheck.model_validate(r))
                continue
            cfg = r["expectation_config"]
            kwargs = cfg.get("kwargs", {})
            column = kwargs.get("column")
            if column is None and kwargs.get("column_A") is not None:
                column = f"{kwargs['column_A']},{kwargs['column_B']}"
            if column is None and kwargs.get("column_list"):
                column = ",".join(kwargs["column_list"])
            res = r.get("result") or {}
            exc = None
            info = r.get("exception_info") or {}
            if info.get("raised_exception"):
                exc = info.get("exception_message")
            else:
                for sub in info.values():
                    if isinstance(sub, dict) and sub.get("raised_exception"):
                        exc = sub.get("exception_message")
                        break
            results.append(
                QualityCheck(
                    type=cfg.get("type", "?"),
                    column=column,
                    success=bool(r.get("success")),
                    observed_value=_json_safe(res.get("observed_value")),
                    unexpected_count=res.get("unexpected_count"),
                    exception=exc,
                )
            )
        results.sort(key=lambda c: (c.column or "", c.type))
        return cls(
            view=doc.get("view", view),
            success=bool(doc.get("success")),
            statistics=doc.get("statistics", {}),
            results=results,
            evaluated_at=doc.get("evaluated_at", evaluated_at),
        )


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def value_column(field: str) -> str:
    """The derived column name of a value field: ``""`` or ``"$"`` -> ``value.$``, else
    ``value.<field>``."""
    return "value.$" if field in ("", "$") else f"value.{field}"


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}", out)
    else:
        out[prefix] = obj


def _flatten_values(values: pd.Series) -> pd.DataFrame:
    fast = _flatten_objects_arrow(values)
    if fast is not None:
        return fast
    rows = []
    for raw in values:
        flat: dict[str, Any] = {}
        if raw is not None and not (isinstance(raw, float) and math.isnan(raw)):
            doc = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
            if isinstance(doc, dict):
                _flatten(doc, "value", flat)
            else:
                flat["value.$"] = doc
        rows.append(flat)
    out = pd.DataFrame(rows, index=values.index)
    for col in out.columns:
        non_null = [v for v in out[col] if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in non_null):
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("float64")
    return out


def _flatten_objects_arrow(values: pd.Series) -> pd.DataFrame | None:
    """``value.<path>`` columns of a column of JSON objects, parsed by Arrow's JSON reader
    (one block, so each column's type is inferred over every row); numeric columns as
    float64. None when a value is null or not an object (the generic path handles those)."""
    import pyarrow as pa
    import pyarrow.json as pj

    texts = values.tolist()
    if not texts or not all(isinstance(v, str) and v.startswith("{") and "\n" not in v for v in texts):
        return None
    data = "\n".join(texts).encode("utf-8")
    try:
        table = pj.read_json(pa.BufferReader(data), read_options=pj.ReadOptions(block_size=len(data) + 1))
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(texts):
        return None
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()  # nested objects: "a.b" columns
    out = pd.DataFrame(index=values.index)
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_null(col.type):
            out[f"value.{name}"] = pd.Series(col.to_numpy(zero_copy_only=False), index=values.index).astype("float64")
        else:
            out[f"value.{name}"] = pd.Series(col.to_pylist(), index=values.index, dtype="object")
    return out


def prepare_frame(df: pd.DataFrame, expectations: list[ExpectationSpec]) -> pd.DataFrame:
    """Return ``df`` with the derived columns (module docstring) that ``expectations`` need.

    Raises:
        QualityError: if ``value`` holds text that is not JSON.
    """
    needed = {c for e in expectations for c in e.columns()} - set(df.columns)
    if not needed:
        return df
    out = df.copy()
    if any(c.startswith("value.") for c in needed) and "value" in df.columns:
        try:
            flat = _flatten_values(df["value"])
        except (json.JSONDecodeError, TypeError) as exc:
            raise QualityError(f"value column is not JSON: {exc}") from exc
        for col in sorted(c for c in needed if c.startswith("value.")):
            if col in flat.columns:
                out[col] = flat[col]
            elif len(df) == 0:
                out[col] = pd.Series(dtype="float64")
    for col in needed:
        if col == "_window_length" and {"window_start", "window_end"} <= set(df.columns):
            out[col] = (pd.to_numeric(df["window_end"]) - pd.to_numeric(df["window_start"])).astype("float64")
        elif (m := _MOD_RE.match(col)) and "window_start" in df.columns:
            out[col] = (pd.to_numeric(df["window_start"]) % int(m.group(1))).astype("float64")
    return out


def standard_expectations(
    spec: ViewSpec,
    value_columns: dict[str, tuple[float | None, float | None]] | None = None,
) -> list[ExpectationSpec]:
    """The standard suite of a view.

    * ``key`` not null; for tables ``key`` unique, for windowed views
      ``(key, window_start)`` unique;
    * windowed: ``window_start`` / ``window_end`` not null;
    * tumbling / hopping: ``_window_start_mod_<advance_ms>`` in ``[0, 0]`` (aligned starts)
      and ``_window_length`` in ``[size_ms, size_ms]``;
    * session: ``_window_length >= 0``;
    * each ``value_columns`` entry ``field -> (min, max)``: ``value.<field>`` within
      ``[min, max]`` (``None`` = unbounded; both ``None``: the column must exist).
      Use ``""`` or ``"$"`` as field for a scalar value.
    """
    exps = [ExpectationSpec(type="expect_column_values_to_not_be_null", kwargs={"column": "key"})]
    if not spec.windowed:
        exps.append(ExpectationSpec(type="expect_column_values_to_be_unique", kwargs={"column": "key"}))
    else:
        exps.append(ExpectationSpec(type="expect_compound_columns_to_be_unique",
                                    kwargs={"column_list": ["key", "window_start"]}))
        for col in ("window_start", "window_end"):
            exps.append(ExpectationSpec(type="expect_column_values_to_not_be_null", kwargs={"column": col}))
        if spec.window_kind == "session":
            exps.append(ExpectationSpec(type="expect_column_values_to_be_between",
                                        kwargs={"column": "_window_length", "min_value": 0}))
        else:
            exps.append(ExpectationSpec(
                type="expect_column_values_to_be_between",
                kwargs={"column": f"_window_start_mod_{spec.advance_ms}", "min_value": 0, "max_value": 0}))
            exps.append(ExpectationSpec(
                type="expect_column_values_to_be_between",
                kwargs={"column": "_window_length", "min_value": spec.size_ms, "max_value": spec.size_ms}))
    for field, (lo, hi) in (value_columns or {}).items():
        col = value_column(field)
        if lo is None and hi is None:
            exps.append(ExpectationSpec(type="expect_column_to_exist", kwargs={"column": col}))
        else:
            exps.append(ExpectationSpec(type="expect_column_values_to_be_between",
                                        kwargs={"column": col, "min_value": lo, "max_value": hi}))
    return exps


def run_suite(view: str, df: pd.DataFrame, expectations: list[ExpectationSpec]) -> QualityResult:
    """Validate ``df`` against ``expectations`` with a GX 1.24 ephemeral context (pandas).

    Derived columns are added first (:func:`prepare_frame`). Progress bars and analytics are
    off. An expectation GX cannot evaluate (e.g. missing column) fails with ``exception`` set.

    Raises:
        QualityError: on an unknown expectation type or invalid kwargs.
    """
    os.environ["GX_ANALYTICS_ENABLED"] = "False"
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.registry import get_expectation_impl

    built = []
    for e in expectations:
        try:
            impl = get_expectation_impl(e.type)
        except ExpectationNotFoundError as exc:
            raise QualityError(f"unknown expectation type {e.type!r}") from exc
        try:
            built.append(impl(**e.kwargs))
        except Exception as exc:  # pydantic(v1) validation errors of GX
            raise QualityError(f"invalid kwargs for {e.type}: {exc}") from exc

    frame = prepare_frame(df, expectations).reset_index(drop=True)
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = ctx.data_sources.add_pandas(name=f"duet_{view}")
    asset = source.add_dataframe_asset(name=view)
    batch_def = asset.add_batch_definition_whole_dataframe("whole")
    batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
    suite = ctx.suites.add(gx.ExpectationSuite(name=f"{view}_suite"))
    for exp in built:
        suite.add_expectation(exp)
    res = batch.validate(suite)
    doc = res.to_json_dict()
    when = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return QualityResult.from_gx_json(view, doc, evaluated_at=when)


def quality_path(lake: Path | str, view: str) -> Path | str:
    """``<lake>/quality/<view>.json`` (a ``Path``, or ``s3://...`` on an object store)."""
    return LakeLayout(lake).quality_result(view)


def save_result(lake: Path | str, result: QualityResult) -> Path | str:
    """Write ``result`` atomically to ``<lake>/quality/<view>.json``; returns the path."""
    path = quality_path(lake, result.view)
    atomic_write_json(path, result.model_dump(mode="json"))
    return path


def load_results(lake: Path | str) -> dict[str, QualityResult]:
    """All stored results by view (file stem). Unreadable files are skipped with a warning;
    raw GX ``to_json_dict()`` documents are converted."""
    from batch_layer.delta.io import join_location
    from batch_layer.delta.storage import list_names, read_text

    folder = LakeLayout(lake).quality_folder
    out: dict[str, QualityResult] = {}
    for name in list_names(folder):
        if not name.endswith(".json"):
            continue
        path, stem = join_location(folder, name), name[: -len(".json")]
        try:
            doc = json.loads(read_text(path) or "")
            out[stem] = QualityResult.from_gx_json(stem, doc)
        except Exception as exc:
            log.warning("skipping unreadable quality result %s: %s", path, exc)
    return out
