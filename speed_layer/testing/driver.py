"""TopologyTestDriver: runs a Topology in-process, deterministically, without a broker.

As Kafka's ``TopologyTestDriver``: one task per sub-topology (partition 0), real state
stores (RocksDB in a temporary directory, or in-memory stores when so specified), a
mocked wall clock, and topics captured in memory. Each piped record is processed
completely, including the records it sends through repartition topics, before
``pipe_input`` returns; as in Kafka's driver, every task commits (flushing record caches)
after each record processed, the piped one and each one read back from a repartition
topic, and stream-time punctuations run after each of them.
"""
from __future__ import annotations

import shutil
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..config import StreamsConfig
from ..errors import StreamsException
from ..runtime.task import Headers, Metrics, RawRecord, StreamTask
from ..serde import Serde
from ..state.factories import build_store
from ..state.stores import KeyValueStore, SessionStore, VersionedKeyValueStore, WindowStore
from ..topology import Topology


@dataclass(frozen=True)
class TestRecord:
    """A record read from or piped into a test topic (timestamps in ms)."""

    __test__ = False  # not a pytest class
    key: Any
    value: Any
    timestamp: int | None = None
    headers: Headers = field(default_factory=list)


class _Captured:
    def __init__(self) -> None:
        self.records: deque[tuple[bytes | None, bytes | None, int, Headers]] = deque()


class TopologyTestDriver:
    """Run ``topology`` in-process. ``config`` is a dict of Kafka-style keys (see
    :class:`StreamsConfig`); ``initial_wall_clock_time_ms`` starts the mocked wall clock.

    Raises:
        TopologyException: when the topology cannot be built.
    """

    __test__ = False

    def __init__(self, topology: Topology, config: dict[str, Any] | StreamsConfig | None = None, initial_wall_clock_time_ms: int = 0) -> None:
        self.topology = topology
        # as Kafka's driver: both emit throttles (stream-stream left/outer join, windowed
        # aggregation ON_WINDOW_CLOSE) default to 0 so results come out at once
        self.config = StreamsConfig.of(config).with_test_driver_defaults()
        self.wall_clock_ms = initial_wall_clock_time_ms
        #: the stream time shared by all sub-topologies (Kafka's driver runs them as ONE task)
        self._stream_time = -1
        self.metrics = Metrics()
        self._tmp = Path(tempfile.mkdtemp(prefix="duet-ttd-"))
        self._outputs: dict[str, _Captured] = {}
        #: records sent to repartition topics, per topic, waiting to be processed
        self._pending: dict[str, deque[RawRecord]] = {}
        self._offsets: dict[str, int] = {}
        app = self.config.application_id
        self.global_stores: dict[str, Any] = {}
        for name, spec in topology.global_stores().items():
            self.global_stores[name] = build_store(spec, self._tmp / "global", None)
        self._global_tasks: dict[str, StreamTask] = {}
        # global sub-graphs run as tiny tasks of their own
        from ..graph.nodes import SubTopology

        for n in topology.nodes.values():
            from ..graph.ops import GlobalStoreOp

            if isinstance(n.op, GlobalStoreOp):
                src = n.parents[0]
                sub = SubTopology(-1, (src, n.name), topology.nodes[src].op.topics, (), ())
                t = StreamTask(f"global-{n.op.store}", topology, sub, 0, self.config, self, global_stores=self.global_stores, clock=lambda: self.wall_clock_ms, metrics=self.metrics)
                for topic in topology.nodes[src].op.topics:
                    self._global_tasks[topic] = t
        self.tasks: list[StreamTask] = []
        self._task_by_topic: dict[str, StreamTask] = {}
        for sub in topology.subtopologies():
            task = StreamTask(
                f"{sub.id}_0", topology, sub, 0, self.config, self,
                state_dir=self._tmp / f"{sub.id}_0", global_stores=self.global_stores,
                clock=lambda: self.wall_clock_ms, metrics=self.metrics,
            )
            self.tasks.append(task)
            for topic in task.sources:
                self._task_by_topic[topic] = task
        for t in self._global_tasks.values():
            t.initialize()
        for t in self.tasks:
            t.initialize()
        self._internal = {f"{app}-{t}" for t in topology.internal_topics}
        self._closed = False

    # ------------------------------------------------------------------ collector
    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers, partition: int | None) -> None:
        """Record collector, as Kafka's ``captureOutputsAndReEnqueueInternalResults``: every
        record is captured (output topics can be read, internal ones too); a record sent to
        a topic the topology reads (a repartition topic, a source topic as with
        ``through``, or a global table's topic) is also piped back in."""
        if topic not in self._internal:
            captured = self._outputs.get(topic)
            if captured is None:  # (not setdefault: its default would be built per record)
                captured = self._outputs[topic] = _Captured()
            captured.records.append((key, value, timestamp, list(headers)))
        if topic in self._global_tasks:
            self._global_tasks[topic].process(RawRecord(topic, 0, self._next_offset(topic), key, value, timestamp, list(headers)))
        elif topic in self._task_by_topic:
            self._pending.setdefault(topic, deque()).append(RawRecord(topic, 0, self._next_offset(topic), key, value, timestamp, list(headers)))

    def partitions_for(self, topic: str) -> int:
        return 1

    def _next_offset(self, topic: str) -> int:
        off = self._offsets.get(topic, 0)
        self._offsets[topic] = off + 1
        return off

    # ------------------------------------------------------------------ input
    def pipe_raw(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers | None = None) -> None:
        """Process one serialized record completely (then commit every task).

        Raises:
            StreamsException: if no source reads ``topic``, or the record fails with the
            default ``log_and_fail`` handlers.
        """
        if self._closed:
            raise StreamsException("the driver is closed")
        raw = RawRecord(topic, 0, self._next_offset(topic), key, value, timestamp, list(headers or []))
        if topic in self._global_tasks:
            self._global_tasks[topic].process(raw)
            return
        task = self._task_by_topic.get(topic)
        if task is None:
            known = sorted(t for t in self._task_by_topic if t not in self._internal) + sorted(self._global_tasks)
            raise StreamsException(f"Unknown topic: {topic}; the topology reads {known}")
        self._process(task, raw)
        self._drain()

    def _process(self, task: StreamTask, raw: RawRecord) -> None:
        """Process one record in ``task`` with the driver-wide stream time: Kafka's driver
        runs every sub-topology in one task, so stream time (``current_stream_time_ms`` and
        stream-time punctuation) is the largest timestamp processed anywhere; after the
        record, every task's due stream-time punctuations run."""
        task.stream_time = max(task.stream_time, self._stream_time)
        task.process(raw)
        self._stream_time = max(self._stream_time, task.stream_time)
        for t in self.tasks:
            if t is not task:
                t.stream_time = self._stream_time
                t.punctuate_stream_time()

    def _drain(self) -> None:
        """Finish the work of one piped record, as Kafka's
        ``TopologyTestDriver#completeAllProcessableWork``: every task commits (flushing
        record caches) after the piped record AND after each record read back from a
        repartition topic, so a cache folds only the updates of one record's processing.
        The next repartition record is the one with the lowest timestamp at the head of its
        topic (Kafka's PartitionGroup)."""
        for t in self.tasks:
            t.commit()
        while True:
            heads = [q for q in self._pending.values() if q]
            if not heads:
                return
            q = min(heads, key=lambda q: q[0].timestamp)
            raw = q.popleft()
            self._process(self._task_by_topic[raw.topic], raw)
            for t in self.tasks:
                t.commit()

    def create_input_topic(self, name: str, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None) -> "TestInputTopic":
        """A topic to pipe records into (serdes default to the config's)."""
        return TestInputTopic(self, name, key_serde or self.config.default_key_serde, value_serde or self.config.default_value_serde)

    def create_output_topic(self, name: str, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None) -> "TestOutputTopic":
        """A topic to read records written by sinks (serdes default to the config's)."""
        return TestOutputTopic(self, name, key_serde or self.config.default_key_serde, value_serde or self.config.default_value_serde)

    def produced_topic_names(self) -> set[str]:
        return set(self._outputs)

    # ------------------------------------------------------------------ time
    def advance_wall_clock_time(self, ms: int) -> None:
        """Advance the mocked wall clock by ``ms`` and run due wall-clock punctuations."""
        if ms < 0:
            raise ValueError("cannot move the wall clock backwards")
        self.wall_clock_ms += ms
        for t in self.tasks:
            t.punctuate_wall_clock()
        self._drain()

    # ------------------------------------------------------------------ stores
    def get_state_store(self, name: str) -> Any:
        for t in self.tasks:
            if name in t.stores:
                return t.stores[name]
        if name in self.global_stores:
            return self.global_stores[name]
        return None

    def _typed(self, name: str, cls: type) -> Any:
        store = self.get_state_store(name)
        return store if isinstance(store, cls) else None

    def get_key_value_store(self, name: str) -> KeyValueStore | None:
        """The key-value store ``name`` (plain values on ``get``), or None."""
        return self._typed(name, KeyValueStore)

    def get_timestamped_key_value_store(self, name: str) -> KeyValueStore | None:
        return self._typed(name, KeyValueStore)

    def get_window_store(self, name: str) -> WindowStore | None:
        """The window store ``name`` (``fetch``, ``fetch_all``, ``all``), or None."""
        return self._typed(name, WindowStore)

    def get_session_store(self, name: str) -> SessionStore | None:
        """The session store ``name`` (``fetch``, ``find_sessions``), or None."""
        return self._typed(name, SessionStore)

    def get_versioned_key_value_store(self, name: str) -> VersionedKeyValueStore | None:
        return self._typed(name, VersionedKeyValueStore)

    def get_all_state_stores(self) -> dict[str, Any]:
        out = dict(self.global_stores)
        for t in self.tasks:
            out.update(t.stores)
        return out

    def dropped_records(self) -> int:
        """The ``dropped-records`` metric summed over tasks."""
        return self.metrics.total("dropped-records")

    def close(self) -> None:
        """Close tasks and stores and delete the temporary state."""
        if self._closed:
            return
        for t in self.tasks:
            t.close()
        for t in self._global_tasks.values():
            t.close()
        for s in self.global_stores.values():
            s.close()
        shutil.rmtree(self._tmp, ignore_errors=True)
        self._closed = True

    def __enter__(self) -> "TopologyTestDriver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TestInputTopic:
    """Pipes records into a source topic of the driver."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, name: str, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        self.driver, self.name, self.key_serde, self.value_serde = driver, name, key_serde, value_serde

    def pipe_input(self, key: Any = None, value: Any = None, timestamp: int | None = None, headers: Headers | None = None) -> None:
        """Pipe one record; ``timestamp`` (ms) defaults to the driver's wall-clock time.
        ``None`` keys and values (tombstones) are allowed."""
        ts = self.driver.wall_clock_ms if timestamp is None else timestamp
        self.driver.pipe_raw(self.name, self.key_serde.serialize(key), self.value_serde.serialize(value), ts, headers)

    def pipe_record(self, record: TestRecord) -> None:
        self.pipe_input(record.key, record.value, record.timestamp, record.headers)

    def pipe_value_list(self, values: list[Any]) -> None:
        for v in values:
            self.pipe_input(None, v)

    def pipe_key_value_list(self, pairs: list[tuple[Any, Any]], timestamp: int | None = None, advance_ms: int = 0) -> None:
        ts = timestamp
        for k, v in pairs:
            self.pipe_input(k, v, ts)
            if ts is not None:
                ts += advance_ms

    def pipe_records(self, records: list[TestRecord]) -> None:
        for r in records:
            self.pipe_record(r)


class TestOutputTopic:
    """Reads the records sinks wrote to a topic, in order, deserialized."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, name: str, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        self.driver, self.name, self.key_serde, self.value_serde = driver, name, key_serde, value_serde

    def _queue(self) -> deque[tuple[bytes | None, bytes | None, int, Headers]]:
        return self.driver._outputs.setdefault(self.name, _Captured()).records

    def read_record(self) -> TestRecord:
        """The next record. Raises ``NoSuchElementError`` (an IndexError) when empty."""
        q = self._queue()
        if not q:
            raise NoSuchElementError(f"Empty topic: {self.name}")
        kb, vb, ts, headers = q.popleft()
        return TestRecord(self.key_serde.deserialize(kb), self.value_serde.deserialize(vb), ts, headers)

    def read_value(self) -> Any:
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        r = self.read_record()
        return r.key, r.value

    def read_records_to_list(self) -> list[TestRecord]:
        out = []
        while not self.is_empty():
            out.append(self.read_record())
        return out

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[Any, Any]]:
        return [(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """Last value per key (a None value removes the key, as Kafka's)."""
        out: dict[Any, Any] = {}
        for r in self.read_records_to_list():
            if r.value is None:
                out.pop(r.key, None)
            else:
                out[r.key] = r.value
        return out

    def is_empty(self) -> bool:
        return not self._queue()

    def get_queue_size(self) -> int:
        return len(self._queue())

    def __iter__(self) -> Iterator[TestRecord]:
        return iter(self.read_records_to_list())


class NoSuchElementError(IndexError):
    """Reading from an empty test output topic (Kafka's NoSuchElementException)."""
