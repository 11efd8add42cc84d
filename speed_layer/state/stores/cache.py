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
    CachingSessionStore filter the cache by key and time only, never by retention). A clean
    entry stays readable until ``max_entries`` later entries were flushed (Kafka drops the
    least recently used entry when the cache's bytes run out; duet counts entries); a
    delete reads as absent from the bytes store. A key-value store keeps none: its bytes store
    holds the same values, so they would change no read.

    The value of a clean entry is the one the flush wrote to the bytes store, which keeps it
    also when expired (reads there filter by retention; a segmented bytes store, which drops
    expired segments, keeps the entries ``is_clean`` names readable), so ``clean``
    holds only the flush number of each serialized store key: a read of an unexpired entry
    goes to the bytes store as before, a read of an expired one too when its key is still
    clean. Bytes keys and int values are not tracked by the garbage collector: with the
    typed clean values of a first version, the flights job's stream thread took ~10 % more
    CPU, all of it in collections.
    """

    def __init__(self, max_entries: int, on_unclean: Callable[[list[bytes]], None] | None = None) -> None:
        # cache key -> (typed key, ValueAndTimestamp | None), eldest update first
        self.entries: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()
        # serialized store key -> number of its flush
        self.clean: dict[bytes, int] = {}
        #: entries flushed so far (clean ones numbered by it)
        self.flushes = 0
        self.max_entries = max_entries
        #: called with the serialized store keys that left ``clean`` (a segmented bytes
        #: store's ``release_retained``: it stops keeping them readable once expired); each
        #: key is passed once per time it left, so the cost is that of the flushes
        self.on_unclean = on_unclean

    def __len__(self) -> int:
        return len(self.entries)

    def put(self, ck: Any, key: Any, vt: "ValueAndTimestamp | None") -> None:
        entries = self.entries
        entries[ck] = (key, vt)
        entries.move_to_end(ck)

    def is_clean(self, kb: bytes) -> bool:
        """Whether the entry of serialized store key ``kb`` is still cached clean (fewer
        than ``max_entries`` entries were flushed after it)."""
        n = self.clean.get(kb)
        return n is not None and n > self.flushes - self.max_entries

    def keep_clean(self, kb: bytes) -> None:
        """Keep the entry of serialized store key ``kb``, just flushed, as clean."""
        n = self.flushes = self.flushes + 1
        clean = self.clean
        clean[kb] = n
        if len(clean) >= 2 * self.max_entries:
            lo = n - self.max_entries
            self.clean = {k: m for k, m in clean.items() if m > lo}
            if self.on_unclean is not None:
                self.on_unclean([k for k, m in clean.items() if m <= lo])

    def forget(self, kb: bytes) -> None:
        """Drop the clean entry of ``kb`` (a removal the bytes store did not take)."""
        if self.clean.pop(kb, None) is not None and self.on_unclean is not None:
            self.on_unclean([kb])
