"""Time bounds accepted by the HTTP API: ISO-8601 or integer epoch milliseconds."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from serving.errors import InvalidTimeError

__all__ = ["ACCEPTED_TIME_FORMATS", "TIME_PATTERN", "parse_time_ms", "ms_to_iso"]

ACCEPTED_TIME_FORMATS = (
    "ISO-8601 date or date-time, e.g. 2013-01-01, 2013-01-01T05:00, 2013-01-01T05:00:00Z or "
    "2013-01-01T05:00:00+01:00 (no offset = UTC), or integer epoch milliseconds, e.g. "
    "1356998400000"
)

_INT_RE = re.compile(r"^[+-]?\d+$")

_YEAR = r"(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d{3})"
_LEAP_YEAR = r"(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = (rf"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
         rf"|02-(?:0[1-9]|1\d|2[0-8]))|{_LEAP_YEAR}-02-29)")
_TIME = r"(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d{1,6})?)?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)?"
#: The time bounds the API accepts, as a regular expression (published in the OpenAPI
#: schema and enforced before parsing): epoch ms within +-10^18, or an ISO-8601 calendar date,
#: optionally with a time and an offset. Every string it matches parses.
TIME_PATTERN = rf"^(?:[+-]?\d{{1,18}}|{_DATE}(?:[T ]{_TIME})?)$"
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
    # the day's date once per day (a key's rows share few days), the time by arithmetic:
    # what ``isoformat(timespec="milliseconds")`` gives, at a tenth of its cost per row
    day, rem = divmod(ms, _DAY_MS)
    date_t = _date_prefix(day)
    if date_t is None:
        return None
    hours, rem = divmod(rem, 3_600_000)
    minutes, rem = divmod(rem, 60_000)
    seconds, millis = divmod(rem, 1000)
    return f"{date_t}{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}Z"


_DAY_MS = 86_400_000


@lru_cache(maxsize=65_536)
def _date_prefix(day: int) -> str | None:
    """``YYYY-MM-DDT`` of the ``day``-th day after 1970-01-01 (negative: before), ``None``
    outside years 1..9999."""
    try:
        return (_EPOCH + timedelta(days=day)).date().isoformat() + "T"
    except OverflowError:  # beyond datetime's range (years 1..9999)
        return None
