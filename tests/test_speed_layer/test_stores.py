"""``Stores`` factories and the stores' read API, on both backends (RocksDB and in-memory),
inside a task through the Processor API and the test driver's store accessors."""
from __future__ import annotations

from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speed_layer import Processor, Record, Serdes, Stores, Topology, VersionedRecord, Window, Windowed
from speed_layer.graph.nodes import StoreSpec
from speed_layer.state.factories import build_store
from speed_layer.state.stores import VersionedKeyValueStore
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}


@pytest.fixture(params=["rocksdb", "in_memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Callable[[StoreSpec], Any]:
    in_memory = request.param == "in_memory"

    def make(spec: StoreSpec) -> Any:
        from dataclasses import replace

        return build_store(replace(spec, in_memory=in_memory), None if in_memory else tmp_path, None)

    return make


def test_key_value_store_read_api(backend: Callable[[StoreSpec], Any]) -> None:
    kv = backend(Stores.key_value_store("kv"))
    for k, v in [("b", 2), ("a", 1), ("c", 3)]:
        kv.put(k, v)
    assert kv.get("a") == 1 and kv.get("zz") is None
    assert list(kv.all()) == [("a", 1), ("b", 2), ("c", 3)]
    assert list(kv.range("a", "b")) == [("a", 1), ("b", 2)]  # both bounds inclusive
    assert kv.put_if_absent("a", 9) == 1 and kv.get("a") == 1
    assert kv.delete("b") == 2 and kv.get("b") is None
    kv.put("c", None)  # a None value deletes
    assert list(kv.all()) == [("a", 1)]
    assert kv.approximate_num_entries() >= 1
    kv.close()


def test_timestamped_key_value_store(backend: Callable[[StoreSpec], Any]) -> None:
    kv = backend(Stores.key_value_store("kv", timestamped=True))
    kv.put("a", "x", 42)
    assert kv.get("a") == "x"
    vt = kv.get_with_timestamp("a")
    assert (vt.value, vt.timestamp) == ("x", 42)
    kv.close()


def test_integer_keys_iterate_in_numeric_order(backend: Callable[[StoreSpec], Any]) -> None:
    kv = backend(Stores.key_value_store("kv"))
    for k in [10, -3, 2]:
        kv.put(k, str(k))
    assert [k for k, _ in kv.all()] == [-3, 2, 10]
    kv.close()


def test_window_store_read_api(backend: Callable[[StoreSpec], Any]) -> None:
    ws = backend(Stores.window_store("ws", retention_ms=100, window_size_ms=10))
    ws.put("a", 1, 0, 5)
    ws.put("a", 2, 10, 15)
    ws.put("b", 3, 10, 12)
    assert ws.fetch("a", 10) == 2
    assert ws.fetch("a", 0, 10) == [(0, 1), (10, 2)]  # window starts in [from, to]
    assert ws.fetch_all(10, 10) == [(Windowed("a", Window(10, 20)), 2), (Windowed("b", Window(10, 20)), 3)]
    assert ws.all()[0] == (Windowed("a", Window(0, 10)), 1)
    ws.put("a", 9, 200, 200)  # stream time 200: windows starting at or before 100 expire
    assert ws.fetch("a", 0, 300) == [(200, 9)]
    ws.close()


def test_window_store_with_duplicates(backend: Callable[[StoreSpec], Any]) -> None:
    ws = backend(Stores.window_store("ws", retention_ms=100, window_size_ms=10, retain_duplicates=True))
    ws.put("a", "x", 5, 5)
    ws.put("a", "y", 5, 5)
    assert ws.fetch("a", 0, 10) == [(5, "x"), (5, "y")]
    ws.close()


def test_window_store_size_must_not_exceed_retention() -> None:
    with pytest.raises(ValueError):
        Stores.window_store("ws", retention_ms=5, window_size_ms=10)


def test_session_store_read_api(backend: Callable[[StoreSpec], Any]) -> None:
    ss = backend(Stores.session_store("ss", retention_ms=100))
    ss.put(Windowed("a", Window(0, 5)), 2)
    ss.put(Windowed("a", Window(10, 12)), 1)
    ss.put(Windowed("b", Window(3, 3)), 7)
    assert ss.fetch("a") == [(Windowed("a", Window(0, 5)), 2), (Windowed("a", Window(10, 12)), 1)]
    # sessions with end >= earliest end and start <= latest start
    assert ss.find_sessions("a", 6, 20) == [(Windowed("a", Window(10, 12)), 1)]
    assert ss.find_sessions("a", 0, 9) == [(Windowed("a", Window(0, 5)), 2)]
    assert ss.fetch_session("a", 10, 12) == 1
    ss.remove(Windowed("a", Window(10, 12)))
    assert ss.fetch_session("a", 10, 12) is None
    assert [w.key for w, _ in ss.all()] == ["a", "b"]
    ss.close()


def test_cached_session_store_reads_its_cache(backend: Callable[[StoreSpec], Any]) -> None:
    ss = backend(Stores.with_caching_enabled(Stores.session_store("ss", retention_ms=100)))
    flushed: list[Any] = []
    ss.flush_listener = lambda s, new, old: flushed.append((s, None if new is None else new.value, None if old is None else old.value))
    ss.put(Windowed("a", Window(0, 5)), 2)
    assert ss.fetch("a") == [(Windowed("a", Window(0, 5)), 2)]
    ss.flush()
    ss.remove(Windowed("a", Window(0, 5)))
    ss.put(Windowed("a", Window(0, 5)), 3)
    assert ss.fetch_session("a", 0, 5) == 3
    ss.flush()
    assert flushed == [(Windowed("a", Window(0, 5)), 2, None), (Windowed("a", Window(0, 5)), 3, 2)]
    ss.close()


def test_versioned_store_read_api(backend: Callable[[StoreSpec], Any]) -> None:
    vs = backend(Stores.versioned_key_value_store("vs", history_retention_ms=100))
    assert isinstance(vs, VersionedKeyValueStore)
    assert vs.put("a", "v1", 10) == -1
    assert vs.put("a", "v3", 30) == -1
    assert vs.put("a", "v2", 20) == 30  # validTo of an out-of-order version
    assert vs.get("a") == VersionedRecord("v3", 30, None)
    assert vs.get("a", 25) == VersionedRecord("v2", 20, 30)
    assert vs.get("a", 10) == VersionedRecord("v1", 10, 20)
    assert vs.get("a", 5) is None
    assert vs.delete("a", 40) == VersionedRecord("v3", 30, None)
    assert vs.get("a") is None and vs.get("a", 35) == VersionedRecord("v3", 30, 40)
    assert vs.put("a", "late", 200) == -1
    assert vs.put("a", "too-old", 50) == VersionedKeyValueStore.PUT_RETURN_CODE_NOT_PUT  # < 200 - 100
    assert vs.get("a", 60) is None  # older than the history retention
    vs.close()


class _Writer(Processor[Any, Any]):
    def init(self, context: Any) -> None:
        self.kv = context.get_state_store("kv")
        self.ws = context.get_state_store("ws")

    def process(self, record: Record[Any, Any]) -> None:
        self.kv.put(record.key, record.value)
        self.ws.put(record.key, record.value, record.timestamp - record.timestamp % 10, record.timestamp)


@pytest.mark.parametrize("in_memory", [True, False])
def test_stores_through_the_driver(in_memory: bool) -> None:
    t = (Topology().add_source("src", "in").add_processor("w", _Writer, "src")
         .add_state_store(Stores.key_value_store("kv", in_memory=in_memory), "w")
         .add_state_store(Stores.window_store("ws", 1000, 10, in_memory=in_memory), "w"))
    with TopologyTestDriver(t, CONFIG) as d:
        d.create_input_topic("in").pipe_input("k", "v", 15)
        assert d.get_key_value_store("kv").get("k") == "v"
        assert d.get_window_store("ws").fetch("k", 10) == "v"
        assert d.get_window_store("kv") is None  # wrong store type
        assert set(d.get_all_state_stores()) == {"kv", "ws"}
        assert d.get_key_value_store("kv").persistent is (not in_memory)


@pytest.mark.parametrize("caching", [False, True])
def test_prefix_scan_reads_the_keys_with_the_prefix(backend: Callable[[StoreSpec], Any], caching: bool) -> None:
    """``prefix_scan`` (Kafka's ``ReadOnlyKeyValueStore#prefixScan``): the keys whose
    serialized form starts with the serialized prefix, in serialized-key order, cached
    writes and deletes included; a prefix ending in ``0xff`` bytes still has its bound."""
    from dataclasses import replace

    kv = backend(replace(Stores.key_value_store("kv"), caching=caching))
    for k in ("ab1", "ab2", "ac", "a", "b"):
        kv.put(k, k)
    for k in (b"\xff\xff1", b"\xff\xff2", b"\xff", b"\xfe"):
        kv.put(k, str(k))
    kv.put("ab3", "ab3")
    kv.put("ab1", None)
    assert list(kv.prefix_scan("ab")) == [("ab2", "ab2"), ("ab3", "ab3")]
    assert [k for k, _ in kv.prefix_scan("a")] == ["a", "ab2", "ab3", "ac"]
    assert [k for k, _ in kv.prefix_scan(b"\xff\xff")] == [b"\xff\xff1", b"\xff\xff2"]
    assert [k for k, _ in kv.prefix_scan(b"\xff")] == [b"\xff", b"\xff\xff1", b"\xff\xff2"]
    assert list(kv.prefix_scan("z")) == []
    kv.close()


_SESSION_OPS = st.lists(
    st.tuples(st.sampled_from(["put", "remove", "find", "flush"]), st.sampled_from(["a", "ab", "b"]),
              st.integers(0, 40), st.integers(0, 15), st.integers(0, 9)),
    max_size=60)


@settings(max_examples=60, deadline=None)
@given(ops=_SESSION_OPS)
def test_cached_session_store_finds_what_an_uncached_store_finds(ops: list[tuple[str, str, int, int, int]]) -> None:
    """A caching session store with a 3-entry cache (evicting on puts) answers every
    ``find_sessions`` as the same store without a cache: the cached sessions of a key are
    looked up from the earliest end asked for, merged with the bytes store's."""
    cached = build_store(Stores.with_caching_enabled(Stores.session_store("c", retention_ms=1_000)), None, None)
    cached.cache_max_entries = 3
    plain = build_store(Stores.session_store("p", retention_ms=1_000), None, None)
    for op, key, start, length, value in ops:
        session = Windowed(key, Window(start, start + length))
        if op == "put":
            cached.put(session, value)
            plain.put(session, value)
        elif op == "remove":
            cached.remove(session)
            plain.remove(session)
        elif op == "flush":
            cached.flush()
        else:
            lo, hi = start, start + length
            assert cached.find_sessions(key, lo, hi) == plain.find_sessions(key, lo, hi)
        assert cached.fetch(key) == plain.fetch(key)
    assert cached.all() == plain.all()
