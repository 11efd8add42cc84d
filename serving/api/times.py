"""Time bounds accepted by the HTTP API: ISO-8601 or integer epoch milliseconds."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from serving.errors import InvalidTimeError

__all__ = ["ACCEPTED_TIME_FORMATS", "parse_time_ms", "ms_to_iso"]

ACCEPTED_TIME_FORMATS = (
    "ISO-8601 date or date-time, e.g. 2013-01-01, 2013-01-01T05:00, 2013-01-01T05:00:00Z or "
    "2013-01-01T05:00:00+01:00 (no offset = UTC), or integer epoch milliseconds, e.g. "
    "1356998400000"
)

_INT_RE = re.compile(r"^[+-]?\d+$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_time_ms(text: str, name: str = "time") -> int:
    """Parse a time bound to epoch milliseconds (UTC).

    Accepts integer epoch ms, or ISO-8601 (``datetime.fromisoformat`` of Python 3.11: ``Z``
    or ``±HH:MM`` offsets; naive values are UTC; a date alone is its midnight UTC).

    Raises:
        InvalidTimeError: naming ``name`` and the accepted formats.
    """
    s = text.strip()
    if _INT_RE.match(s):
        return int(s)
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise InvalidTimeError(
            f"invalid {name!r} value {text!r}: expected {ACCEPTED_TIME_FORMATS}"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def ms_to_iso(ms: int | None) -> str | None:
    """Epoch ms -> ISO-8601 UTC with millisecond precision and ``Z``; ``None`` for ``None`` or
    a time outside years 1..9999."""
    if ms is None:
        return None
    try:
        dt = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:  # beyond datetime's range (years 1..9999)
        return None
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")
