"""The record cache of a caching store (Kafka's NamedCache).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .base import ValueAndTimestamp


class _Cache:
    """The record cache of one store (Kafka's NamedCache): dirty entries, flushed in order
    of their last update, and the clean entries a commit flushed.

    ``entries`` is an ``OrderedDict``: taking the eldest entry is O(1)
    (``popitem(last=False)``); with a plain dict, ``next(iter(d))`` after popping from the
    front scans the deleted slots, so a full cache evicting on every put, or a flush of
    100,000 entries, was quadratic.

    ``clean``: as Kafka's ``NamedCache#flush`` marks the flushed entries clean and keeps them
    (deletes are dropped), a window or session store keeps serving reads from them, also
    after the window or session expired in the bytes store (Kafka's CachingWindowStore and
    CachingSessionStore filter the cache by key and time only, never by retention). Clean
    entries count against ``max_entries``; the eldest is dropped before a dirty entry is
    evicted, so keeping them never changes when a dirty entry is flushed. A key-value store
    keeps none: its bytes store holds the same values, so they would change no read."""

    def __init__(self, max_entries: int, on_drop: Callable[[Any], None] | None = None) -> None:
        # cache key -> (typed key, ValueAndTimestamp | None), eldest update first
        self.entries: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()
        # cache key -> (typed key, ValueAndTimestamp), eldest flush first
        self.clean: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()
        self.max_entries = max_entries
        #: called with the cache key of each clean entry dropped to make room
        self.on_drop = on_drop

    def __len__(self) -> int:
        return len(self.entries)

    def put(self, ck: Any, key: Any, vt: "ValueAndTimestamp | None") -> None:
        entries = self.entries
        entries[ck] = (key, vt)
        entries.move_to_end(ck)
        if self.clean:
            self.clean.pop(ck, None)

    def get(self, ck: Any) -> tuple[Any, Any] | None:
        """The ``(typed key, ValueAndTimestamp | None)`` cached under ``ck``, dirty or clean."""
        hit = self.entries.get(ck)
        return self.clean.get(ck) if hit is None else hit

    def must_evict(self) -> bool:
        """Make room after a put: drop clean entries, eldest first, while the cache holds
        more than ``max_entries``; True when only dirty entries are left and one must be
        evicted (flushed)."""
        clean = self.clean
        while len(self.entries) + len(clean) > self.max_entries:
            if not clean:
                return True
            ck, _ = clean.popitem(last=False)
            if self.on_drop is not None:
                self.on_drop(ck)
        return False

    def keep_clean(self, ck: Any, key: Any, value: Any) -> None:
        """Keep an entry just flushed (taken out of ``entries``) as clean: the cache holds
        no more entries than before the flush."""
        self.clean[ck] = (key, value)
