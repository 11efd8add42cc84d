"""RocksDB's memory in a speed process is bounded by one shared block cache and write buffer
manager (Kafka Streams' BoundedMemoryRocksDBConfig), not by the number of databases opened
nor by the data written (issue 41's soak: the speed service's RSS grew with time)."""

from __future__ import annotations

import os

from speed_layer.state import backends
from speed_layer.state.backends import RocksDBBytesStore, shared_memory


def test_every_database_shares_one_cache_and_memtable_budget(tmp_path):
    cache, write_buffers = shared_memory()
    assert shared_memory() == (cache, write_buffers)  # one pair per process
    assert write_buffers.enabled()
    assert write_buffers.get_buffer_size() == backends.SHARED_MEMTABLE_BYTES
    stores = [RocksDBBytesStore(f"s{i}", tmp_path) for i in range(12)]
    try:
        value = os.urandom(1024)
        peak = 0
        for n in range(15_000):  # 12 databases x 15,000 x 1 KiB: up to 12 x 16 MiB of memtables unshared
            for i, store in enumerate(stores):
                store.put(b"%d-%08d" % (i, n), value)
            if n % 500 == 0:
                peak = max(peak, write_buffers.get_usage())
        # the memtables of all twelve are counted together and flushed from the shared budget
        # on (a soft bound: writes may outrun the flushes, no writer waits), not at 12 x 16 MiB
        assert 0 < peak <= backends.SHARED_MEMTABLE_BYTES * 2 < 12 * backends.WRITE_BUFFER_SIZE
        for i, store in enumerate(stores):  # reads go through the shared cache
            assert store.get(b"%d-%08d" % (i, 10)) == value
        assert 0 < cache.get_usage() <= backends.SHARED_CACHE_BYTES * 1.1
    finally:
        for store in stores:
            store.close()
