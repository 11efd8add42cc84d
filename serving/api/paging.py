"""Paging of ``GET /views/{view}/keys/{key}``: the opaque ``cursor`` and the ``Link`` header.

A cursor is the base64url text (no padding) of the JSON ``[window_start, window_end, seen]``
of a :class:`~serving.views.index.RowPosition`: the window bounds (epoch ms, ``null`` for a
table) of the last row returned and how many rows with exactly those bounds were returned.
Clients must treat it as opaque: its content may change between versions of the API.

>>> from serving.views.index import RowPosition
>>> text = encode_cursor(RowPosition(1356998400000, 1357002000000))
>>> decode_cursor(text)
RowPosition(window_start=1356998400000, window_end=1357002000000, seen=1)
"""

from __future__ import annotations

import base64
import binascii
import json

from serving.errors import InvalidCursorError
from serving.views.index import RowPosition

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "decode_cursor", "encode_cursor", "next_link"]

#: rows per page when ``limit`` is not given
DEFAULT_LIMIT = 1_000
#: the largest ``limit`` accepted
MAX_LIMIT = 10_000
#: longer cursors are rejected before decoding (a real one is under 80 characters)
MAX_CURSOR_LENGTH = 200
_INT64 = 2**63


def encode_cursor(position: RowPosition) -> str:
    """The cursor text of ``position`` (URL-safe: ``[A-Za-z0-9_-]``)."""
    doc = json.dumps([position.window_start, position.window_end, position.seen], separators=(",", ":"))
    return base64.urlsafe_b64encode(doc.encode()).rstrip(b"=").decode("ascii")


def _bound(v: object) -> bool:
    return v is None or (type(v) is int and -_INT64 <= v < _INT64)


def decode_cursor(text: str) -> RowPosition:
    """The position a cursor of :func:`encode_cursor` names.

    Raises:
        InvalidCursorError: if ``text`` is not such a cursor (the message says why).
    """
    if len(text) > MAX_CURSOR_LENGTH:
        raise InvalidCursorError(f"malformed cursor: longer than {MAX_CURSOR_LENGTH} characters; "
                                 "pass the next_cursor of the previous page as it is")
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        doc = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InvalidCursorError(f"malformed cursor {text!r}: not a cursor of this API ({exc}); "
                                 "pass the next_cursor of the previous page as it is") from None
    if not (isinstance(doc, list) and len(doc) == 3 and _bound(doc[0]) and _bound(doc[1])
            and type(doc[2]) is int and 1 <= doc[2] < _INT64):
        raise InvalidCursorError(f"malformed cursor {text!r}: not a cursor of this API; "
                                 "pass the next_cursor of the previous page as it is")
    return RowPosition(doc[0], doc[1], doc[2])


def next_link(url: str) -> str:
    """The ``Link`` header value (RFC 8288) pointing at ``url`` as the next page."""
    return f'<{url}>; rel="next"'
