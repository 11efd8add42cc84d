"""A state store's content as view rows: the one shape in which the general executor
writes stores, and in which tests read a ``TopologyTestDriver``'s stores to compare.

A view row is ``(key, window_start, window_end, value, timestamp)`` (docs/contracts.md,
``<lake>/views/<store>``):

* ``key``: a ``str`` key as is, any other key as compact JSON (``key_text``);
* ``window_start`` / ``window_end``: ms, ``None`` for key-value and versioned stores
  (window stores: ``[start, start + size)``; session stores: both bounds inclusive);
* ``value``: the value as compact JSON (``Serdes.JSON()``'s text);
* ``timestamp``: ms of the record that last updated the entry (window / timestamped
  key-value / versioned stores; session stores: the session end, as Kafka's caching session
  store stamps it), ``None`` for a plain key-value store.

Rows come sorted by ``(key, window_start, window_end)``; a join buffer (a window store
that retains duplicates) gives one row per buffered record, in store order.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

from speed_layer.serde import Serdes
from speed_layer.state.stores import KeyValueStore, SessionStore, VersionedKeyValueStore, WindowStore

ViewRow = tuple[str, "int | None", "int | None", str, "int | None"]

__all__ = ["ViewRow", "json_value", "key_text", "store_rows"]


#: the speed layer's JSON writer (``Serdes.JSON()``: the standard library's compact JSON,
#: written by orjson where the bytes are provably the same)
_json_bytes = Serdes.JSON().serializer


def json_value(value: Any) -> str:
    """The JSON text the speed layer's ``Serdes.JSON()`` writes (compact, no NaN):
    ``json.dumps(value, separators=(",", ":"), allow_nan=False)``, character for character.

    Raises:
        ValueError / TypeError: the value is not JSON-serializable.
    """
    if type(value) is int:  # the most common aggregate (counts, sums): json writes int.__repr__
        return int.__repr__(value)
    return _json_bytes(value).decode("ascii")


def key_text(key: Any) -> str:
    """A view's ``key`` column: a str as is, anything else as compact JSON."""
    if isinstance(key, str):
        return key
    return json.dumps(key, separators=(",", ":"), default=str)


def store_rows(store: Any) -> Iterator[ViewRow]:
    """The content of ``store`` (any store built by ``speed_layer.state``) as view rows.

    Raises:
        TypeError: ``store`` is not one of duet's store kinds.
        ValueError: a value is not JSON-serializable.
    """
    rows: list[ViewRow] = []
    if isinstance(store, KeyValueStore):
        for key, vt in store.all_with_timestamps():
            ts = vt.timestamp if store.timestamped else None
            rows.append((key_text(key), None, None, json_value(vt.value), ts))
    elif isinstance(store, WindowStore):
        for wk, vt in store.all_with_timestamps():
            ts = vt.timestamp if store.timestamped else None
            rows.append((key_text(wk.key), wk.window.start, wk.window.end, json_value(vt.value), ts))
    elif isinstance(store, SessionStore):
        for wk, agg in store.all():
            rows.append((key_text(wk.key), wk.window.start, wk.window.end, json_value(agg), wk.window.end))
    elif isinstance(store, VersionedKeyValueStore):
        for key, _ in store.all():
            rec = store.get(key)
            if rec is not None:
                rows.append((key_text(key), None, None, json_value(rec.value), rec.timestamp))
    else:
        raise TypeError(f"not a duet state store: {type(store).__name__}")
    rows.sort(key=lambda r: (r[0], -1 if r[1] is None else r[1], -1 if r[2] is None else r[2]))
    return iter(rows)
