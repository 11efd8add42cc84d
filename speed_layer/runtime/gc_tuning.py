"""The interpreter's cyclic garbage collector while stream threads run.

A stream thread allocates tens of container objects per record (records, cache entries,
aggregates), and most of them live until a cache flush, so they survive the young
generations. With CPython's default thresholds ``(700, 10, 10)`` that triggers a full
collection every ten second-generation collections, and each one walks the whole heap
(on the flights backlog: 62 full collections, 9.7 s of the stream thread's 87 s of CPU;
13.5 s with the young ones, measured with ``gc.callbacks``). Kafka Streams leaves its
collector to the JVM flags of Kafka's launch scripts; a Python library runs inside the
user's interpreter, so :class:`KafkaStreams` raises the thresholds itself while it runs
(``python.gc.thresholds``, default ``(10000, 10, 100)``: on the same backlog 3.0 s in all,
no full collection), and puts back the interpreter's thresholds when the last running
client of the process closes. Reference counting, which frees almost everything a stream
thread drops, is unaffected; only garbage cycles wait longer for a collection.
"""
from __future__ import annotations

import gc
import threading

__all__ = ["acquire", "release"]

_lock = threading.Lock()
_users = 0
_saved: tuple[int, int, int] | None = None


def acquire(thresholds: tuple[int, int, int] | None) -> bool:
    """Apply ``thresholds`` (``gc.set_threshold``) for a starting client; None changes
    nothing. Returns whether this client holds the tuning (then :func:`release` it once).
    The first client's thresholds stay in effect until the last one releases them."""
    global _users, _saved
    if thresholds is None:
        return False
    with _lock:
        if _users == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*thresholds)
        _users += 1
    return True


def release() -> None:
    """A client that acquired the tuning closed: the last one restores the thresholds the
    interpreter had before the first acquired it."""
    global _users, _saved
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None
