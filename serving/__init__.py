"""duet serving layer: merged lambda views, data-quality checks and the HTTP API.

``import serving`` is light: the public names below are imported on first access
(PEP 562), so neither pandas, deltalake, FastAPI nor Great Expectations is loaded until used
(Great Expectations only inside :func:`run_suite`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # errors
    "ServingError": "serving.errors",
    "UnknownViewError": "serving.errors",
    "UnknownKeyError": "serving.errors",
    "InvalidTimeError": "serving.errors",
    "CatalogueError": "serving.errors",
    "BatchViewNotFoundError": "serving.errors",
    "SpeedSourceError": "serving.errors",
    "QualityError": "serving.errors",
    # views
    "ViewSpec": "serving.views.model",
    "load_catalogue": "serving.views.model",
    "save_catalogue": "serving.views.model",
    "catalogue_path": "serving.views.model",
    "merge_view": "serving.views.merge",
    "agreement": "serving.views.merge",
    "AgreementReport": "serving.views.merge",
    "read_view_topic": "serving.views.speed",
    "read_batch_view": "serving.views.batch",
    "read_batch_watermark": "serving.views.batch",
    "read_batch_info": "serving.views.batch",
    "publish": "serving.views.publish",
    "served_view_path": "serving.views.publish",
    "ViewIndex": "serving.views.index",
    # quality
    "ExpectationSpec": "serving.quality.suite",
    "QualityCheck": "serving.quality.suite",
    "QualityResult": "serving.quality.suite",
    "run_suite": "serving.quality.suite",
    "standard_expectations": "serving.quality.suite",
    "save_result": "serving.quality.suite",
    "load_results": "serving.quality.suite",
    # api
    "create_app": "serving.api.app",
    "serve": "serving.api.app",
    "parse_time_ms": "serving.api.times",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'serving' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs
    from serving.api.app import create_app, serve
    from serving.api.times import parse_time_ms
    from serving.errors import (
        BatchViewNotFoundError,
        CatalogueError,
        InvalidTimeError,
        QualityError,
        ServingError,
        SpeedSourceError,
        UnknownKeyError,
        UnknownViewError,
    )
    from serving.quality.suite import (
        ExpectationSpec,
        QualityCheck,
        QualityResult,
        load_results,
        run_suite,
        save_result,
        standard_expectations,
    )
    from serving.views.batch import read_batch_info, read_batch_view, read_batch_watermark
    from serving.views.index import ViewIndex
    from serving.views.merge import AgreementReport, agreement, merge_view
    from serving.views.model import ViewSpec, catalogue_path, load_catalogue, save_catalogue
    from serving.views.publish import publish, served_view_path
    from serving.views.speed import read_view_topic
