"""Typed state stores over a :class:`BytesStore`, with optional record cache and changelog.

The layering is Kafka Streams' (typed/metered -> caching -> change-logging -> bytes store)
folded into one class per store kind, one module each:

* :class:`KeyValueStore` (``key_value``; optionally timestamped: values kept with their timestamp),
* :class:`WindowStore` (``window``; keys with a window start; retention by stream time),
* :class:`SessionStore` (``session``; keys with a session window ``[start, end]``),
* :class:`VersionedKeyValueStore` (``versioned``; every version of a key within a history retention).

``base`` holds what they share; ``cache`` the record cache of the caching ones (Kafka's
NamedCache, with its clean entries).

Read methods are the interactive-query API; processors also use the write methods.
Every write that reaches the bytes store is sent to ``logger(key_bytes, value_bytes,
timestamp_ms)``, which appends to the changelog topic; ``restore`` applies changelog
records without logging them again.
"""
from __future__ import annotations

from .base import MAX_TIMESTAMP, FlushListener, Logger, ValueAndTimestamp, VersionedRecord
from .key_value import KeyValueStore
from .session import SessionStore
from .versioned import VersionedKeyValueStore
from .window import WindowStore

__all__ = [
    "MAX_TIMESTAMP", "FlushListener", "KeyValueStore", "Logger", "SessionStore", "ValueAndTimestamp", "VersionedKeyValueStore",
    "VersionedRecord", "WindowStore",
]
