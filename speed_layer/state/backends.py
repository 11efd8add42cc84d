"""Bytes stores: the bottom of every store stack. RocksDB (through rocksdict) or memory.

Keys and values are ``bytes``; iteration is in unsigned byte order, as RocksDB's default
comparator. ``put(k, None)`` deletes.
"""
from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from sortedcontainers import SortedDict

if TYPE_CHECKING:
    from rocksdict import Rdict


class BytesStore(ABC):
    """A sorted bytes key-value store."""

    name: str

    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    @abstractmethod
    def put(self, key: bytes, value: bytes | None) -> None: ...

    @abstractmethod
    def range(self, lo: bytes | None, hi: bytes | None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key <= hi`` (None: unbounded), ascending unless ``reverse``."""

    def scan(self, lo: bytes | None, hi: bytes | None, time_from: int | None = None,
             time_to: int | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key <= hi``, in no particular order (for callers that sort
        them anyway). ``time_from``/``time_to`` (ms): hints that no wanted key's time is
        outside them, for a store that can skip data by time (segments)."""
        return self.range(lo, hi)

    @abstractmethod
    def approximate_num_entries(self) -> int: ...

    def state_metrics(self) -> dict[str, int]:
        """Kafka's RocksDB property metrics (KIP-607, stream-state-metrics) this store
        has: ``estimate-num-keys`` here; RocksDB adds the sizes, in bytes."""
        return {"estimate-num-keys": self.approximate_num_entries()}

    def flush(self) -> None:
        """Make writes durable (no-op in memory)."""

    @abstractmethod
    def close(self) -> None: ...

    @property
    def persistent(self) -> bool:
        return False


class InMemoryBytesStore(BytesStore):
    """A sorted dict in memory (Kafka's InMemoryKeyValueStore)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._data: SortedDict = SortedDict()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self._data.pop(key, None)
        else:
            self._data[key] = value

    def range(self, lo: bytes | None, hi: bytes | None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        keys = list(self._data.irange(lo, hi, reverse=reverse))
        for k in keys:
            v = self._data.get(k)
            if v is not None:
                yield k, v

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def close(self) -> None:
        self._data.clear()


#: Kafka's RocksDB property metrics (KIP-607) -> the RocksDB property read: keys, then bytes
ROCKSDB_PROPERTY_METRICS = {
    "estimate-num-keys": "rocksdb.estimate-num-keys",
    "size-all-mem-tables": "rocksdb.size-all-mem-tables",
    "total-sst-files-size": "rocksdb.total-sst-files-size",
    "estimate-live-data-size": "rocksdb.estimate-live-data-size",
}


class RdictOwner:
    """What a bytes store owning one rocksdict database ``_db`` does with it: count,
    flush, close."""

    _db: "Rdict"
    _closed: bool

    @property
    def persistent(self) -> bool:
        return True

    def approximate_num_entries(self) -> int:
        return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def state_metrics(self) -> dict[str, int]:
        """KIP-607's RocksDB property metrics of the database: keys (an estimate, deletes
        not yet compacted away included) and bytes (:data:`ROCKSDB_PROPERTY_METRICS`)."""
        return {name: int(self._db.property_int_value(prop) or 0) for name, prop in ROCKSDB_PROPERTY_METRICS.items()}

    def flush(self) -> None:
        self._db.flush()

    def close(self) -> None:
        if not self._closed:
            self._db.flush()
            self._db.close()
            self._closed = True


class RocksDBBytesStore(RdictOwner, BytesStore):
    """RocksDB through rocksdict in raw (bytes) mode, at ``<dir>/rocksdb/<name>``.

    The WAL is off: durability comes from the changelog topic, as in Kafka Streams.
    """

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.path = Path(directory) / "rocksdb" / name
        self._db = open_rdict(self.path)
        self._closed = False

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self._db.delete(key)
        else:
            self._db[key] = value

    def range(self, lo: bytes | None, hi: bytes | None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        return rdict_range(self._db, lo, hi, reverse)

    def destroy(self) -> None:
        """Close and delete the files (used when the local state is wiped)."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


#: Kafka Streams' RocksDBStore defaults: 16 MiB memtables, at most 3 of them
WRITE_BUFFER_SIZE = 16 * 1024 * 1024
MAX_WRITE_BUFFERS = 3
#: bits per key of the Bloom filters (Kafka's ``new BloomFilter()``: 10)
BLOOM_BITS_PER_KEY = 10
#: bytes of the one block cache every database of the process shares (data, index and filter
#: blocks, and the memtables charged to it): Kafka Streams' ``BoundedMemoryRocksDBConfig``
SHARED_CACHE_BYTES = 128 * 1024 * 1024
#: bytes of memtables all databases of the process hold together (charged to the cache)
SHARED_MEMTABLE_BYTES = 64 * 1024 * 1024

_shared: tuple[Any, Any] | None = None


def shared_memory() -> tuple[Any, Any]:
    """The process's ``(rocksdict.Cache, rocksdict.WriteBufferManager)`` every
    :func:`open_rdict` database uses (created at the first call), so RocksDB's memory is
    bounded by :data:`SHARED_CACHE_BYTES` however many stores, partitions and segments the
    process opens, as Kafka Streams' ``BoundedMemoryRocksDBConfig`` (one ``LRUCache`` and a
    ``WriteBufferManager`` costed to it, index and filter blocks in the cache). Without it
    each database had its own 8 MiB block cache, index and filter blocks outside any cache
    (growing with the files the history wrote) and up to 3 x 16 MiB memtables. Beyond the
    budget the manager makes the database written to flush its memtable; it never stalls the
    writer (``allow_stall`` false, as Kafka Streams' ``new WriteBufferManager(size, cache)``):
    with ``allow_stall`` a writer waits until the memtables are under budget again, and when
    the memory is held by databases nobody writes to (their memtables below their own flush
    size: a backlog's downstream stores while their upstream sub-topologies run, issue 42's
    upstream-input wait), nothing flushes them and the stream thread waited for good (the
    full year stalled in ``put`` with RocksDB's flush threads idle). The budget is a soft bound
    then: writes can outrun the flushes (116 MiB of memtables against a 64 MiB budget in the
    test), still far below the unshared 16 MiB x 3 per database."""
    global _shared
    if _shared is None:
        from rocksdict import Cache, WriteBufferManager

        cache = Cache(SHARED_CACHE_BYTES)
        _shared = (cache, WriteBufferManager.new_write_buffer_manager_with_cache(SHARED_MEMTABLE_BYTES, False, cache))
    return _shared


def _rdict_options() -> Any:
    """The options of :func:`open_rdict` (of each column family)."""
    from rocksdict import BlockBasedOptions, Options

    cache, write_buffers = shared_memory()
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    table = BlockBasedOptions()
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_size(WRITE_BUFFER_SIZE)
    opts.set_max_write_buffer_number(MAX_WRITE_BUFFERS)
    opts.set_write_buffer_manager(write_buffers)
    return opts


def open_rdict(path: Path, column_families: tuple[str, ...] = ()) -> "Rdict":
    """A rocksdict database in raw (bytes) mode at ``path``, created if missing, with the
    write-ahead log off: durability comes from the changelog topic, as in Kafka Streams.

    As Kafka Streams' ``RocksDBStore#openDB``: whole-key Bloom filters of 10 bits per key
    (a get of an absent key, each new window or session, then skips the files that cannot
    hold it instead of reading an index block of each: without them its cost grows with the
    files the history wrote), 16 MiB memtables, 3 at most. Kafka also filters only the upper
    levels (``optimizeFiltersForHits``), which duet does not: most gets of a window store
    miss. Block cache and memtables are the process's shared ones (:func:`shared_memory`).
    ``column_families``: more column families (created if missing) with the same options; get
    one with ``db.get_column_family(name)``, write to it in a ``WriteBatch`` with
    ``db.get_column_family_handle(name)``."""
    from rocksdict import Rdict, WriteOptions

    path.parent.mkdir(parents=True, exist_ok=True)
    opts = _rdict_options()
    if column_families:
        opts.create_missing_column_families(True)
        db = Rdict(str(path), opts, column_families={name: _rdict_options() for name in column_families})
    else:
        db = Rdict(str(path), opts)
    wo = WriteOptions()
    wo.disable_wal = True
    db.set_write_options(wo)
    return db


def rdict_range(db: "Rdict", lo: bytes | None, hi: bytes | None, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """Entries of ``db`` with ``lo <= key <= hi`` (None: unbounded), ascending unless ``reverse``."""
    it = db.iter()
    if not reverse:
        it.seek(lo) if lo is not None else it.seek_to_first()
        while it.valid():
            k = it.key()
            if hi is not None and k > hi:
                break
            yield k, it.value()
            it.next()
    else:
        it.seek_for_prev(hi) if hi is not None else it.seek_to_last()
        while it.valid():
            k = it.key()
            if lo is not None and k < lo:
                break
            yield k, it.value()
            it.prev()
