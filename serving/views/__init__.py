"""Merged (batch + speed) views: model, sources, merge, publish, read index."""

from serving.views.batch import read_batch_info, read_batch_view, read_batch_watermark
from serving.views.frames import SERVED_COLUMNS, VIEW_COLUMNS, empty_view_frame, normalize_view_frame
from serving.views.index import ViewIndex, ViewSnapshot
from serving.views.merge import AgreementReport, agreement, merge_view, values_equal
from serving.views.model import ViewSpec, catalogue_path, load_catalogue, save_catalogue
from serving.views.publish import publish, served_view_path, write_served_view
from serving.views.speed import decode_view_key, read_view_topic

__all__ = [
    "AgreementReport",
    "SERVED_COLUMNS",
    "VIEW_COLUMNS",
    "ViewIndex",
    "ViewSnapshot",
    "ViewSpec",
    "agreement",
    "catalogue_path",
    "decode_view_key",
    "empty_view_frame",
    "load_catalogue",
    "merge_view",
    "normalize_view_frame",
    "publish",
    "read_batch_info",
    "read_batch_view",
    "read_batch_watermark",
    "read_view_topic",
    "save_catalogue",
    "served_view_path",
    "values_equal",
    "write_served_view",
]
