"""``Stores``: factories of store specs for the Processor API, and building a store
instance from a spec (Kafka's ``Stores`` + ``StoreBuilder``)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..graph.nodes import StoreSpec
from ..serde import Serde
from .backends import BytesStore, InMemoryBytesStore, RocksDBBytesStore
from .keys import ORDERED_KEY, PICKLE
from .segments import InMemorySegmentedBytesStore, RocksDBSegmentedBytesStore, SegmentedBytesStore, default_segment_interval
from .stores import KeyValueStore, Logger, SessionStore, VersionedKeyValueStore, WindowStore


class Stores:
    """Store spec factories. Each returns a :class:`StoreSpec`; pass it to
    ``Topology.add_state_store`` or ``StreamsBuilder.add_state_store``. Retention,
    window size and history are ms. Caching is off and logging on unless changed with
    ``dataclasses.replace`` or the ``with_*`` helpers below."""

    @staticmethod
    def key_value_store(name: str, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None, *, in_memory: bool = False, timestamped: bool = False) -> StoreSpec:
        """A persistent (RocksDB) or in-memory key-value store."""
        return StoreSpec(name, "timestamped_key_value" if timestamped else "key_value", key_serde, value_serde, in_memory=in_memory)

    @staticmethod
    def window_store(name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool = False, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None, *, in_memory: bool = False) -> StoreSpec:
        """A window store keeping windows for ``retention_ms`` of stream time.

        Raises:
            ValueError: if the window size exceeds the retention.
        """
        if window_size_ms > retention_ms:
            raise ValueError(f"window size {window_size_ms} ms must not exceed retention {retention_ms} ms")
        return StoreSpec(name, "window", key_serde, value_serde, in_memory=in_memory, retention_ms=retention_ms, window_size_ms=window_size_ms, retain_duplicates=retain_duplicates)

    @staticmethod
    def session_store(name: str, retention_ms: int, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None, *, in_memory: bool = False) -> StoreSpec:
        """A session store keeping sessions for ``retention_ms`` of stream time."""
        return StoreSpec(name, "session", key_serde, value_serde, in_memory=in_memory, retention_ms=retention_ms)

    @staticmethod
    def versioned_key_value_store(name: str, history_retention_ms: int, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None, *, in_memory: bool = False) -> StoreSpec:
        """A versioned key-value store (KIP-889) keeping ``history_retention_ms`` of history."""
        return StoreSpec(name, "versioned", key_serde, value_serde, in_memory=in_memory, history_ms=history_retention_ms)

    @staticmethod
    def with_caching_enabled(spec: StoreSpec) -> StoreSpec:
        return replace(spec, caching=True)

    @staticmethod
    def with_logging_disabled(spec: StoreSpec) -> StoreSpec:
        return replace(spec, logging=False)


AnyStore = KeyValueStore | WindowStore | SessionStore | VersionedKeyValueStore


def build_store(spec: StoreSpec, task_dir: Path | None, logger: Logger | None, cache_max_entries: int = 10_000) -> AnyStore:
    """Instantiate ``spec`` for one task: RocksDB under ``<task_dir>/rocksdb/<name>``
    unless in-memory or ``task_dir`` is None; ``logger`` receives changelog writes. Window
    and session stores sit on a segmented bytes store, which drops their expired data by
    segments of Kafka's ``max(retention / 2, 60 s)`` (:mod:`.segments`).

    Raises:
        ValueError: an unknown store kind.
    """
    in_memory = spec.in_memory or task_dir is None
    ks = spec.key_serde or ORDERED_KEY
    vs = spec.value_serde or PICKLE
    log = logger if spec.logging else None
    if spec.kind in ("window", "session"):
        retention = spec.retention_ms or 0
        # the time a key ends with: window start (+ sequence number), or session end + start
        offset = 16 if spec.kind == "session" else 12 if spec.retain_duplicates else 8
        interval = default_segment_interval(retention)
        segmented: SegmentedBytesStore
        if in_memory:
            segmented = InMemorySegmentedBytesStore(spec.name, retention, interval, offset)
        else:
            assert task_dir is not None
            segmented = RocksDBSegmentedBytesStore(spec.name, task_dir, retention, interval, offset)
        store: WindowStore | SessionStore
        if spec.kind == "window":
            store = WindowStore(spec.name, segmented, ks, vs, window_size_ms=spec.window_size_ms or 0, retention_ms=retention, retain_duplicates=spec.retain_duplicates, caching=spec.caching, logger=log, cache_max_entries=cache_max_entries)
        else:
            store = SessionStore(spec.name, segmented, ks, vs, retention_ms=retention, logger=log, caching=spec.caching, cache_max_entries=cache_max_entries)
        if store.cache is not None:
            # clean cache entries stay readable once expired, until the cache drops them
            segmented.retain_clean_entries_of(store.cache)
        return store
    backend: BytesStore = InMemoryBytesStore(spec.name) if in_memory else RocksDBBytesStore(spec.name, task_dir)  # type: ignore[arg-type]
    if spec.kind in ("key_value", "timestamped_key_value"):
        return KeyValueStore(spec.name, backend, ks, vs, timestamped=spec.kind == "timestamped_key_value", caching=spec.caching, logger=log, cache_max_entries=cache_max_entries)
    if spec.kind == "versioned":
        return VersionedKeyValueStore(spec.name, backend, ks, vs, history_ms=spec.history_ms or 0, logger=log)
    raise ValueError(f"unknown store kind {spec.kind!r} of store {spec.name}")
