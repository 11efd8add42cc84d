"""duet serving layer: merged lambda views, data-quality checks and the HTTP API.

``import serving`` is light: the public names below are imported on first access
(PEP 562), so neither pandas, deltalake, FastAPI nor Great Expectations is loaded until used
(Great Expectations only inside :func:`run_suite`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "errors": ["ServingError", "UnknownViewError", "UnknownKeyError", "InvalidTimeError", "CatalogueError",
                   "BatchViewNotFoundError", "SpeedSourceError", "QualityError"],
        "views.model": ["ViewSpec", "load_catalogue", "save_catalogue", "catalogue_path"],
        "views.merge": ["merge_view", "agreement", "AgreementReport"],
        "views.speed": ["read_view_topic"],
        "views.batch": ["read_batch_view", "read_batch_watermark", "read_batch_info"],
        "views.publish": ["publish", "served_view_path"],
        "views.index": ["ViewIndex"],
        "quality.suite": ["ExpectationSpec", "QualityCheck", "QualityResult", "run_suite", "standard_expectations",
                          "save_result", "load_results"],
        "api.app": ["create_app", "serve"],
        "api.times": ["parse_time_ms"],
    },
)

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
