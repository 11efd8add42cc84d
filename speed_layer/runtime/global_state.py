"""Global state: GlobalKTables and global stores on every instance (Kafka's
``GlobalStreamThread`` + ``GlobalStateManagerImpl``).

The updater reads every partition of every global store's topic with its own consumer
(assigned, no consumer group). :meth:`GlobalStateUpdater.bootstrap` reads each partition up
to the end offset seen at start-up, before any stream thread processes a record; the
thread then keeps polling so that later table updates reach the stores. Records go through
the global sub-graph (the ``GlobalStoreOp`` processor: a plain ``put`` for a GlobalKTable,
or the user's processor), with the deserialization handler applied. Global stores live in
``<state.dir>/<application.id>/global/`` with a ``.checkpoint`` of the source offsets
(written every commit interval and on close); without a checkpoint the directory is wiped
and the topics are read from the beginning.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ..config import StreamsConfig
from ..errors import StreamsException
from ..graph.nodes import SubTopology
from ..graph.ops import GlobalStoreOp, SourceOp
from ..state.factories import build_store
from ..topology import Topology
from .restore import StateDirectory, read_checkpoint, write_checkpoint
from .task import Metrics, RawRecord, RecordCollector, StreamTask
from .task_timeout import ListOffsets, TaskTimeout, topic_partition_count
from .task_timeout import watermarks as partition_watermarks

log = logging.getLogger("speed_layer.global")

__all__ = ["GlobalStateUpdater"]


class GlobalStateUpdater(threading.Thread):
    """Fills the global stores; ``stores`` maps store name -> store (read by all tasks)."""

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        state: StateDirectory,
        consumer_config: dict[str, Any],
        collector_factory: Callable[[], RecordCollector],
        on_error: Callable[[BaseException], None],
    ) -> None:
        super().__init__(name=f"{config.application_id}-GlobalStreamThread", daemon=True)
        self.topology = topology
        self.config = config
        self.state = state
        self.metrics = Metrics()
        self._on_error = on_error
        self._stopping = threading.Event()
        self.bootstrapped = threading.Event()
        self.error: BaseException | None = None
        self.dir = state.global_dir()
        specs = topology.global_stores()
        checkpoint = read_checkpoint(self.dir) if specs else None
        if checkpoint is None:
            state.wipe(self.dir)
        self.offsets: dict[tuple[str, int], int] = dict(checkpoint or {})
        self.stores: dict[str, Any] = {name: build_store(spec, self.dir, None, config.statestore_cache_max_entries) for name, spec in specs.items()}
        self._collector_factory = collector_factory
        self._collector: RecordCollector | None = None
        self.tasks: dict[str, StreamTask] = {}
        for n in topology.nodes.values():
            if isinstance(n.op, GlobalStoreOp):
                src = topology.nodes[n.parents[0]]
                assert isinstance(src.op, SourceOp)
                sub = SubTopology(-1, (src.name, n.name), src.op.topics, (), ())
                task = StreamTask(f"global-{n.op.store}", topology, sub, 0, config, self, global_stores=self.stores,
                                  clock=lambda: int(time.time() * 1000), metrics=self.metrics)
                for topic in src.op.topics:
                    self.tasks[topic] = task
        conf = dict(consumer_config)
        conf.update({"enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        conf.setdefault("group.id", f"{config.application_id}-global")  # assigned only: never joins, never commits
        self.consumer = Consumer(conf) if self.tasks else None
        self.list_offsets = ListOffsets(conf) if self.tasks else None
        self._last_checkpoint = time.monotonic()

    # -- collector of the global tasks (only the dead-letter queue ever sends)
    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any, partition: int | None) -> None:
        if self._collector is None:
            self._collector = self._collector_factory()
        self._collector.send(topic, key, value, timestamp, headers, partition)

    def partitions_for(self, topic: str) -> int:
        if self._collector is None:
            self._collector = self._collector_factory()
        return self._collector.partitions_for(topic)

    # -- lifecycle
    def bootstrap(self, timeout_s: float = 600.0) -> None:
        """Read every global topic partition to its current end, then init processors.

        The partitions and end offsets of the global topics are asked under Kafka's timeout
        model (:mod:`.task_timeout`, Kafka's ``GlobalStateManagerImpl#retryUntilSuccessOrThrowOnTaskTimeout``):
        retriable errors, and a topic not in the metadata yet, are retried every
        ``retry.backoff.ms`` until ``task.timeout.ms``.

        Raises:
            TaskTimeoutException: the metadata or end offsets of a global topic not
                available within ``task.timeout.ms`` (``start()`` fails with it).
            StreamsException: a non-retriable broker error, a checkpoint outside the
                topic's offsets, or the end not reached in ``timeout_s`` seconds.
        """
        if self.consumer is None:
            self.bootstrapped.set()
            return
        assignment: list[TopicPartition] = []
        ends: dict[tuple[str, int], int] = {}
        timeouts = TaskTimeout.of(self.config)
        for topic in self.tasks:
            count = topic_partition_count(self.consumer, topic, timeouts, what=f"Partitions of global topic {topic} (global store bootstrap)")
            for p in range(count):
                lo, hi = partition_watermarks(self.list_offsets, topic, p, timeouts, "global store bootstrap")
                start = self.offsets.get((topic, p), lo)
                if start < lo or start > hi:
                    raise StreamsException(f"global checkpoint offset {start} of {topic}-{p} outside [{lo}, {hi}]: run cleanup() and restart")
                ends[(topic, p)] = hi
                assignment.append(TopicPartition(topic, p, start))
        for t in set(self.tasks.values()):
            t.initialize()
        self.consumer.assign(assignment)
        pending = {tp for tp, end in ends.items() if self.offsets.get(tp, -1) < end and end > 0}
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise StreamsException(f"global state bootstrap of {sorted(pending)} not finished after {timeout_s} s")
            for tp in self._poll(0.2):
                if self.offsets.get(tp, -1) >= ends[tp]:
                    pending.discard(tp)
        self._flush_and_checkpoint()
        self.bootstrapped.set()

    def _poll(self, timeout_s: float) -> set[tuple[str, int]]:
        """Consume and process; returns the partitions that advanced or reached their end."""
        assert self.consumer is not None
        touched: set[tuple[str, int]] = set()
        for msg in self.consumer.consume(500, timeout=timeout_s):
            tp = (msg.topic(), msg.partition())
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.offsets[tp] = max(self.offsets.get(tp, 0), msg.offset())
                    touched.add(tp)
                elif err.fatal():
                    raise StreamsException(f"global consumer failed: {err.str()}")
                else:
                    log.warning("global consumer: %s", err.str())
                continue
            raw = RawRecord(tp[0], tp[1], msg.offset(), msg.key(), msg.value(), msg.timestamp()[1], list(msg.headers() or []))
            self.tasks[tp[0]].process(raw)
            self.offsets[tp] = msg.offset() + 1
            touched.add(tp)
        return touched

    def _flush_and_checkpoint(self) -> None:
        for s in self.stores.values():
            s.flush()
        if self._collector is not None:
            flush = getattr(self._collector, "flush", None)
            if flush is not None:
                flush()
        if any(s.persistent for s in self.stores.values()):
            write_checkpoint(self.dir, self.offsets)
        self._last_checkpoint = time.monotonic()

    def run(self) -> None:
        try:
            while not self._stopping.is_set() and self.consumer is not None:
                self._poll(self.config.poll_ms / 1000)
                if (time.monotonic() - self._last_checkpoint) * 1000 >= self.config.commit_interval_ms:
                    self._flush_and_checkpoint()
        except BaseException as exc:  # noqa: BLE001 - reported to the client's handler
            self.error = exc
            log.exception("global stream thread failed")
            self._on_error(exc)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop polling, checkpoint (when healthy) and close the stores and clients."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)
        try:
            if self.error is None and self.bootstrapped.is_set():
                self._flush_and_checkpoint()
        finally:
            for t in set(self.tasks.values()):
                t.close()
            for s in self.stores.values():
                s.close()
            if self.consumer is not None:
                self.consumer.close()
                self.consumer = None
            closer = getattr(self._collector, "close", None)
            if closer is not None:
                closer()
