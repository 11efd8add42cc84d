"""Data-quality checks of served views with Great Expectations (imported lazily)."""

from serving.quality.suite import (
    ExpectationSpec,
    QualityCheck,
    QualityResult,
    load_results,
    prepare_frame,
    quality_path,
    run_suite,
    save_result,
    standard_expectations,
    value_column,
)

__all__ = [
    "ExpectationSpec",
    "QualityCheck",
    "QualityResult",
    "load_results",
    "prepare_frame",
    "quality_path",
    "run_suite",
    "save_result",
    "standard_expectations",
    "value_column",
]
