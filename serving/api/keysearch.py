"""Searching the keys of a view (``GET /views/{view}/keys?q=`` and the views page's key box).

A view can have thousands of keys (a session view keyed by aircraft has 4,037 on a year of
the flights example): the page asks the server for the few matching what was typed
instead of listing them all.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_QUERY_LENGTH", "search_keys"]

#: The longest search text accepted (characters).
MAX_QUERY_LENGTH = 200


def search_keys(keys: Sequence[str], q: str | None, limit: int | None = None,
                offset: int = 0) -> tuple[int, list[str]]:
    """The keys matching ``q`` and their number, ``[offset:offset + limit]`` of them.

    A key matches when it contains ``q`` ignoring case (``str.casefold``); the keys starting
    with ``q`` come first, then the others, each group in the order of ``keys`` (sorted, as
    the index keeps them). An empty or ``None`` ``q`` matches every key.

    Args:
        keys: every key of the view, sorted.
        q: the search text.
        limit: the most keys returned (``None``: all).
        offset: matches skipped.

    Returns:
        ``(number of matching keys, the page of them)``.
    """
    end = None if limit is None else offset + limit
    if not q:
        return len(keys), list(keys[offset:end])
    needle = q.casefold()
    prefix: list[str] = []
    inner: list[str] = []
    for key in keys:
        folded = key.casefold()
        if folded.startswith(needle):
            prefix.append(key)
        elif needle in folded:
            inner.append(key)
    matches = prefix + inner
    return len(matches), matches[offset:end]
