"""HTTP API of the serving layer (FastAPI)."""

from serving.api.app import create_app, serve
from serving.api.times import ACCEPTED_TIME_FORMATS, ms_to_iso, parse_time_ms

__all__ = ["ACCEPTED_TIME_FORMATS", "create_app", "ms_to_iso", "parse_time_ms", "serve"]
