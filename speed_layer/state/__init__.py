"""State stores: typed stores over RocksDB or memory, with caching and change-logging."""
from .factories import Stores
from .stores import KeyValueStore, SessionStore, ValueAndTimestamp, VersionedKeyValueStore, VersionedRecord, WindowStore

__all__ = ["Stores", "KeyValueStore", "SessionStore", "ValueAndTimestamp", "VersionedKeyValueStore", "VersionedRecord", "WindowStore"]
