"""StreamTask: runs one sub-topology for one partition (Kafka's StreamTask).

Shared by the Kafka runtime and the TopologyTestDriver. A task owns its processors and
state stores, tracks stream time (the largest timestamp it has processed; it advances only
with records), takes the next record from its :class:`~.partition_group.PartitionGroup`
(the partition whose head record has the lowest timestamp), runs the punctuations of its
two :class:`~.punctuation.PunctuationQueue` s, hands a failed record to its
:class:`~.record_errors.RecordErrors` (fail, continue, or dead-letter), and on commit
flushes caches and stores and returns the offsets to commit. Its processors each get a
:class:`~.context.ProcessorContextImpl`; the offsets are committed with the metadata of
:mod:`.commit_metadata`.
"""
from __future__ import annotations

import logging
from collections import deque
from functools import partial
from pathlib import Path
from typing import Any, Callable, Protocol

from ..config import StreamsConfig
from ..errors import InvalidTimestampException, SerializationException, StreamsException
from ..graph.nodes import GraphNode, SubTopology
from ..graph.ops import SinkOp, SourceOp
from ..processor.api import Cancellable, PunctuationType, Record, RecordMetadata, _new_tuple
from ..processor.factory import create_processor
from ..processor.fused_chains import fuse_chains
from ..processor.timestamps import BUILTIN_EXTRACTORS
from ..serde import Serde
from ..state.factories import build_store
from ..state.keys import ORDERED_KEY, PICKLE
from ..topology import Topology
from .commit_metadata import decode_commit_metadata, encode_commit_metadata
from .context import ProcessorContextImpl
from .partition_group import Headers, PartitionGroup, RawRecord
from .punctuation import PunctuationQueue, PunctuationSchedule
from .record_errors import RecordErrors
from .sink_sender import sink_sender
from .task_metrics import Metrics

log = logging.getLogger("speed_layer.task")

__all__ = ["Headers", "Metrics", "RawRecord", "RecordCollector", "StreamTask"]


def _raw_deserializer(serde: Serde[Any]) -> Callable[[bytes], Any]:
    """The function that deserializes non-null bytes: a plain :class:`Serde`'s own
    deserializer (unwrapped errors), else the serde's ``deserialize``."""
    return serde.deserializer if type(serde) is Serde else serde.deserialize


class RecordCollector(Protocol):
    """Where tasks send records (a Kafka producer, or the test driver's topics)."""

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers, partition: int | None) -> None: ...

    def partitions_for(self, topic: str) -> int: ...


class StreamTask:
    """One sub-topology x one partition. See the module docstring."""

    def __init__(
        self,
        task_id: str,
        topology: Topology,
        subtopology: SubTopology,
        partition: int,
        config: StreamsConfig,
        collector: RecordCollector,
        *,
        state_dir: Path | None = None,
        global_stores: dict[str, Any] | None = None,
        clock: Callable[[], int] = lambda: 0,
        metrics: Metrics | None = None,
        changelog_sender: Callable[[str, bytes, bytes | None, int], None] | None = None,
    ) -> None:
        self.task_id = task_id
        self.topology = topology
        self.subtopology = subtopology
        self.partition = partition
        self.config = config
        self.collector = collector
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.global_stores = global_stores or {}
        self.stream_time = -1
        self.commit_requested = False
        #: objects the task's processors share (:meth:`InternalProcessorContext.task_local`)
        self.task_locals: dict[Any, Any] = {}
        #: the raw record being processed (its metadata is built when a processor asks)
        self._current_raw: RawRecord | None = None
        #: the node whose init or punctuation runs (not tracked per record: nothing reads it then)
        self.current_node: str | None = None
        self.app_id = config.application_id
        self.state_dir = state_dir
        #: the buffered input, one queue per partition (Kafka's ``PartitionGroup``)
        self.partition_group = PartitionGroup()
        self.stream_time_punctuations = PunctuationQueue()
        self.wall_clock_punctuations = PunctuationQueue()
        self.errors = RecordErrors(task_id, config, lambda name: self.metrics.inc(task_id, name),
                                   lambda *record: self.collector.send(*record))
        self.consumed_offsets: dict[tuple[str, int], int] = {}
        members = set(subtopology.nodes)
        cm = topology.child_map()
        self.children = {n: [c for c in cm.get(n, []) if c in members] for n in subtopology.nodes}
        # source topic (full name) -> source node
        self.sources: dict[str, GraphNode] = {}
        for n in subtopology.nodes:
            node = topology.nodes[n]
            if isinstance(node.op, SourceOp):
                for t in node.op.topics:
                    self.sources[self.full_topic(t, node.op.repartition)] = node
        # stores
        self.stores: dict[str, Any] = {}
        for s in subtopology.stores:
            spec = topology.stores[s]
            logger = None
            if spec.logging and changelog_sender is not None:
                topic = spec.changelog_topic(self.app_id)
                logger = partial(changelog_sender, topic)  # logger(k, v, ts), without a Python frame
            self.stores[s] = build_store(spec, state_dir, logger, config.statestore_cache_max_entries)
        self.processors: dict[str, Any] = {n: create_processor(topology.nodes[n]) for n in subtopology.nodes}
        #: source topic -> :meth:`_source`, filled on first use
        self._source_serdes: dict[str, tuple[Any, ...]] = {}
        #: (topic, id of the sink op) -> (the op, its :meth:`topic_sender`), filled on first use
        self._sink_serdes: dict[tuple[str, int], tuple[Any, ...]] = {}
        self._process_key = (task_id, "process")
        #: records skipped before their processors (deserialization errors, no valid timestamp)
        self._skipped = 0
        #: the metrics' counters and the stream-time punctuations' schedules, read per record
        self._counters = self.metrics.counters
        self._stream_time_schedules = self.stream_time_punctuations.schedules
        #: Kafka's ``ProcessorMetadata`` (KIP-825; the last emit time of ON_WINDOW_CLOSE
        #: aggregations by store), committed with the offsets (:meth:`commit_metadata`)
        self.processor_metadata: dict[str, int] = {}
        self.processor_metadata_needs_commit = False
        #: whether the metadata committed with its offsets was read back (:meth:`restore_metadata`)
        self.metadata_restored = False

    @property
    def current_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the record being processed (None in a punctuation)."""
        raw = self._current_raw
        return None if raw is None else RecordMetadata(raw.topic, raw.partition, raw.offset)

    @current_metadata.setter
    def current_metadata(self, value: RecordMetadata | None) -> None:
        self._current_raw = None if value is None else RawRecord(value.topic, value.partition, value.offset, None, None, -1)

    # ------------------------------------------------------------------ lifecycle
    def initialize(self) -> None:
        """Init processors (after the stores are restored), then link each built-in
        processor with one child to that child's ``process`` (:meth:`OpProcessor.link_only_child`:
        no forwarding frame per record and node), children first, so that a pass-through
        node (a source) is skipped by the link to it (after :func:`fuse_chains` with
        ``fuse.stateless.chains``); then every context binds its children's ``process`` as
        they are now (:meth:`ProcessorContextImpl.link_children`)."""
        contexts = []
        for n in self.subtopology.nodes:
            self.current_node = n
            context = ProcessorContextImpl(self, self.topology.nodes[n])
            contexts.append(context)
            self.processors[n].init(context)
        self.current_node = None
        if self.config.fuse_stateless_chains:  # one generated process per chain of stateless nodes
            fuse_chains(self.processors, self.children, self.subtopology.nodes)
        for n in reversed(self.subtopology.nodes):
            kids = self.children[n]
            link = getattr(self.processors[n], "link_only_child", None)
            if link is not None and len(kids) == 1:
                link(self.processors[kids[0]].process)
        for context in contexts:  # forwards of several children, and user processors' forwards
            context.link_children()

    def full_topic(self, topic: str, repartition: bool) -> str:
        return f"{self.app_id}-{topic}" if repartition else topic

    def close(self) -> None:
        for p in self.processors.values():
            try:
                p.close()
            except Exception:  # noqa: BLE001 - keep closing the rest, but say so
                log.exception("task %s: processor close failed", self.task_id)
        for s in self.stores.values():
            s.close()

    # ------------------------------------------------------------------ input buffering
    # (the partition group's, under the names the stream thread and the executor use)
    def add_records(self, records: list[RawRecord]) -> None:
        """Buffer consumed records per partition (Kafka's PartitionGroup)."""
        self.partition_group.add_records(records)

    def buffered(self) -> int:
        return self.partition_group.buffered()

    def buffered_in(self, topic: str, partition: int) -> int:
        return self.partition_group.buffered_in(topic, partition)

    def buffered_head(self, topic: str, partition: int) -> int | None:
        """The timestamp (ms) of one input partition's next buffered record; None if empty."""
        return self.partition_group.buffered_head(topic, partition)

    def queue(self, topic: str, partition: int) -> deque[RawRecord]:
        """The buffer of one input partition (created empty on first use); the stream
        thread appends consumed records to it directly."""
        return self.partition_group.queue(topic, partition)

    def head_timestamp(self) -> int:
        """The lowest timestamp (ms) among the heads of the partition buffers; -1 if empty."""
        return self.partition_group.head_timestamp()

    def process_next(self) -> bool:
        """Process the buffered record of lowest timestamp; False when nothing is buffered."""
        q = self.partition_group.next_queue()
        if q is None:
            return False
        self.process(q.popleft())
        return True

    def process_run(self, until_ts: int | None, max_records: int) -> int:
        """Process up to ``max_records`` buffered records in timestamp order, while the next
        one's timestamp is ``<= until_ts`` (ms; None: no bound), stopping after a record that
        empties its partition's buffer (:meth:`PartitionGroup.process_run`). Returns the
        number processed."""
        return self.partition_group.process_run(self.process, until_ts, max_records, self._run_queue)

    def _run_queue(self, queue: deque[RawRecord], until_ts: int | None, max_records: int) -> int:
        """:meth:`process_run` of a task with one partition buffered: up to ``max_records``
        records of ``queue`` in offset order while the head's timestamp is ``<= until_ts``
        (ms; None: no bound). The consumed offset and the ``process`` counter are updated
        once for the run, not per record; when a record raises, the offset covers it and the
        counter does not (as :meth:`process`). Returns the number taken from ``queue``."""
        process, popleft = self._process_raw, queue.popleft
        skipped = self._skipped
        n = 0
        raw: RawRecord | None = None
        #: 1 while a record is being processed: one that raises is taken but not processed
        failed = 1
        try:
            if until_ts is None:
                for n in range(1, min(max_records, len(queue)) + 1):  # noqa: B007 - n is the count
                    raw = popleft()
                    process(raw)
            else:
                while n < max_records and queue and queue[0][5] <= until_ts:
                    n += 1
                    raw = popleft()
                    process(raw)
            failed = 0
        finally:
            if raw is not None:
                self.consumed_offsets[(raw[0], raw[1])] = raw[2] + 1
                counters, pk = self._counters, self._process_key
                counters[pk] = counters.get(pk, 0) + n - (self._skipped - skipped) - failed
        return n

    def may_send_to_own_sources(self) -> bool:
        """Whether a sink of this task's sub-topology may write to one of its source topics:
        a sink topic it reads, or a sink with a topic extractor (any topic)."""
        for n in self.subtopology.nodes:
            op = self.topology.nodes[n].op
            if isinstance(op, SinkOp) and (op.topic_extractor is not None or self.full_topic(op.topic or "", op.repartition) in self.sources):
                return True
        return False

    # ------------------------------------------------------------------ processing
    def node_serdes(self, node: GraphNode) -> tuple[Serde[Any], Serde[Any]]:
        """The key and value serdes of a source or sink node (a repartition topic's default
        to the ordered key and pickle serdes, others to the config's defaults)."""
        op = node.op
        if getattr(op, "repartition", False):
            return op.key_serde or ORDERED_KEY, op.value_serde or PICKLE
        return op.key_serde or self.config.default_key_serde, op.value_serde or self.config.default_value_serde

    def _source(self, topic: str) -> tuple[Any, ...]:
        """``(source node, key serde, value serde, whether the record's own timestamp is the
        event time, key and value deserializers of non-null bytes, the fused chain's
        ``entry`` or None, the source's process)`` of a source topic, cached. The deserializers are the serdes' own functions when the
        serdes are plain :class:`Serde` s (their errors are wrapped by :meth:`process`)."""
        src = self._source_serdes.get(topic)
        if src is None:
            node = self.sources.get(topic)
            if node is None:
                raise StreamsException(f"task {self.task_id}: no source for topic {topic}")
            plain_ts = node.op.timestamp_extractor is None and self.config.default_timestamp_extractor != "wall_clock"
            ks, vs = self.node_serdes(node)
            process = self.processors[node.name].process
            src = self._source_serdes[topic] = (node, ks, vs, plain_ts, _raw_deserializer(ks), _raw_deserializer(vs),
                                                getattr(process, "entry", None), process)
        return src

    def process(self, raw: RawRecord) -> None:
        """Deserialize, extract the timestamp and run one record through the sub-topology;
        its offset is consumed and it counts as processed (``process``) unless it was
        skipped (a deserialization error or no valid timestamp)."""
        self.consumed_offsets[(raw[0], raw[1])] = raw[2] + 1
        skipped = self._skipped
        self._process_raw(raw)
        if self._skipped == skipped:
            counters, pk = self._counters, self._process_key
            counters[pk] = counters.get(pk, 0) + 1

    def _process_raw(self, raw: RawRecord) -> None:
        """:meth:`process` without the consumed offset and the ``process`` counter (the
        caller's); a skipped record adds one to ``_skipped``."""
        topic, partition, offset, key, value, ts, headers = raw
        src = self._source_serdes.get(topic) or self._source(topic)
        node, ks, vs, plain_ts, kde, vde, entry, source_process = src
        self._current_raw = raw
        try:
            if key is not None:
                key = kde(key)
            if value is not None:
                value = vde(value)
        except Exception:  # noqa: BLE001 - again through the serdes, for their exception
            try:
                key = ks.deserialize(raw.key)
                value = vs.deserialize(raw.value)
            except Exception as exc:  # noqa: BLE001 - routed to the configured handler
                self._handle_error("deserialization", self.config.deserialization_exception_handler, raw, exc)
                self._skipped += 1  # after the handler: a record it fails on is not counted as skipped
                self._current_raw = None
                return
        if not plain_ts or type(ts) is not int or ts < 0:
            ts = self._extract_timestamp(node, raw, key, value)
            if ts is None:
                self._skipped += 1
                self._current_raw = None
                return
        if ts > self.stream_time:
            self.stream_time = ts
        try:
            if entry is not None:  # a fused chain's (fused_chains): no Record built
                entry(key, value, ts, list(headers) if headers else [])
            else:
                source_process(_new_tuple(Record, (key, value, ts, list(headers) if headers else [])))
        except SerializationException as exc:
            # a processor's own serde call (a store key, a join's lookup key): a processing
            # error, as in Kafka's ProcessorNode#process (its SerializationException is no
            # StreamsException); a sink's serializer goes to the production handler instead
            self._handle_error("processing", self.config.processing_exception_handler, raw, exc)
        except StreamsException:
            raise
        except Exception as exc:  # noqa: BLE001 - routed to the configured handler
            self._handle_error("processing", self.config.processing_exception_handler, raw, exc)
        self._current_raw = None  # a punctuation has no current record (Kafka: metadata undefined)
        if self._stream_time_schedules:
            self.punctuate_stream_time()

    def _extract_timestamp(self, node: GraphNode, raw: RawRecord, key: Any, value: Any) -> int | None:
        """The record's timestamp from the source's extractor (else the default one), as
        Kafka's ``RecordQueue#updateHead``: a StreamsException of the extractor (the
        built-in ``FailOnInvalidTimestamp``...) is fatal; a negative (or None) timestamp
        drops the record (``dropped-records``). None: the record is not processed.

        Any other exception of the extractor goes to ``deserialization.exception.handler``
        (duet's extension: Kafka's ``RecordQueue`` wraps it in a fatal StreamsException,
        "Fatal user code error in TimestampExtractor callback"; here one record must not
        stop the application when a handler other than ``log_and_fail`` is configured).

        Raises:
            StreamsException: the extractor's, or the handler's ``log_and_fail``.
        """
        extractor = node.op.timestamp_extractor
        if extractor is None:
            mode = self.config.default_timestamp_extractor
            if mode == "wall_clock":
                extractor = self._wall_clock_extractor
            else:
                extractor = BUILTIN_EXTRACTORS[mode]
        try:
            ts = extractor(key, value, raw.timestamp, self.stream_time)
        except InvalidTimestampException as exc:
            raise InvalidTimestampException(f"task {self.task_id}, record {raw.topic}-{raw.partition}@{raw.offset}: {exc}") from exc
        except StreamsException:
            raise
        except Exception as exc:  # noqa: BLE001 - routed to the configured handler
            self._handle_error("timestamp_extraction", self.config.deserialization_exception_handler, raw, exc)
            return None
        if ts is None or ts < 0:
            # Kafka's RecordQueue: "Skipping record due to negative extracted timestamp"
            log.warning("task %s: skipping record due to negative extracted timestamp. topic=[%s] partition=[%d] "
                        "offset=[%d] extractedTimestamp=[%s] extractor=[%r]", self.task_id, raw.topic, raw.partition,
                        raw.offset, ts, extractor)
            self.metrics.inc(self.task_id, "dropped-records")
            return None
        return int(ts)

    def _wall_clock_extractor(self, key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
        """Kafka's ``WallclockTimestampExtractor`` (the task's clock: the driver's mocked one)."""
        return self.clock()

    def _handle_error(self, kind: str, handler: str, raw: RawRecord, exc: Exception) -> None:
        """``handler`` for the source record ``raw`` that failed in step ``kind``
        (:meth:`RecordErrors.record_failed`, whose StreamsException it raises)."""
        self.errors.record_failed(kind, handler, raw, exc)

    def handle_flush_error(self, node: str, record: Record[Any, Any], exc: Exception) -> None:
        """``processing.exception.handler`` for an exception raised downstream of ``node``
        by a record its store's cache flush forwarded (:meth:`RecordErrors.flushed_record_failed`).

        Raises:
            StreamsException: under ``log_and_fail``, or ``dead_letter`` without a topic.
        """
        self.errors.flushed_record_failed(node, record, exc)

    def send_to_topic(self, node: str, topic: str, record: Record[Any, Any], op: SinkOp) -> None:
        """The send of the sink node ``node`` (:meth:`topic_sender`'s function for ``node``,
        ``topic`` and ``op``, made on first use)."""
        cached = self._sink_serdes.get((topic, id(op)))
        if cached is None or cached[0] is not op:
            cached = self._sink_serdes[(topic, id(op))] = (op, self.topic_sender(node, topic, op))
        cached[1](record)

    def topic_sender(self, node: str, topic: str, op: SinkOp) -> Callable[[Record[Any, Any]], None]:
        """The function that sends each record of the sink node ``node`` to ``topic``
        (:func:`.sink_sender.sink_sender`) with the sink's serdes: a repartition topic's
        default to the ordered key and pickle serdes, others to the config's defaults. A
        sink with a fixed topic runs it as its ``process``."""
        full = self.full_topic(topic, op.repartition)
        if op.repartition:
            ks, vs = op.key_serde or ORDERED_KEY, op.value_serde or PICKLE
        else:
            ks, vs = op.key_serde or self.config.default_key_serde, op.value_serde or self.config.default_value_serde
        return sink_sender(self, node, full, ks, vs, op.partitioner)

    @property
    def current_raw(self) -> RawRecord | None:
        """The raw record being processed (None in a punctuation or a commit's flush)."""
        return self._current_raw

    # ------------------------------------------------------------------ punctuation
    def schedule(self, node: str, interval: int, type: PunctuationType, fn: Callable[[int], None]) -> Cancellable:
        """``ProcessorContext#schedule`` of processor ``node``: every ``interval`` ms of
        stream time (first due at the first record) or of the task's clock (first due one
        interval from now)."""
        if type == PunctuationType.STREAM_TIME:
            return self.stream_time_punctuations.schedule(node, interval, 0, fn)
        return self.wall_clock_punctuations.schedule(node, interval, self.clock() + interval, fn)

    def _punctuate(self, schedule: PunctuationSchedule, now: int) -> None:
        self.current_node = schedule.node
        schedule.fn(now)
        self.current_node = None

    def punctuate_stream_time(self) -> bool:
        """Fire the stream-time punctuations due at the task's stream time; whether one fired."""
        return self.stream_time_punctuations.may_punctuate(self.stream_time, self._punctuate)

    def wall_clock_punctuation_due(self, now_ms: int) -> bool:
        """Whether a wall-clock punctuation is due at ``now_ms`` (ms)."""
        return self.wall_clock_punctuations.due(now_ms)

    def punctuate_wall_clock(self) -> bool:
        """Fire the wall-clock punctuations due at the task's clock; whether one fired."""
        return self.wall_clock_punctuations.may_punctuate(self.clock(), self._punctuate)

    # ------------------------------------------------------------------ commit
    def flush(self) -> None:
        """Flush caches (forwarding their updates downstream) and stores, then the writes
        processors deferred to the commit (``pending_writer``: a suppress buffer's changed
        keys, which the caches' updates just reached)."""
        stores = self.stores.values()
        for s in stores:
            s.flush()
        for s in stores:
            writer = getattr(s, "pending_writer", None)  # user stores may lack it
            if writer is not None:
                writer()

    def commit(self) -> dict[tuple[str, int], int]:
        """Flush, then return ``{(topic, partition): next offset}`` to commit."""
        self.flush()
        self.commit_requested = False
        return dict(self.consumed_offsets)

    def commit_metadata(self) -> str:
        """The metadata committed with each of the task's offsets (Kafka's
        ``StreamTask#committableOffsetsAndMetadata``: ``TopicPartitionMetadata`` of the
        partition time and the processor metadata). duet keeps one stream time per task:
        it is committed as each partition's time (restored, Kafka's task stream time is the
        maximum of its partitions' times: the same value)."""
        return encode_commit_metadata(self.stream_time, self.processor_metadata)

    def restore_metadata(self, committed: dict[tuple[str, int], str | None]) -> None:
        """Kafka's ``StreamTask#initializeMetadata``: from the metadata committed with the
        task's offsets, the stream time (the partitions' maximum) and the processor
        metadata (merged by key, the maximum wins, ``ProcessorMetadata#update``); then the
        processors that read processor metadata in ``init`` read it again."""
        self.metadata_restored = True
        changed = False
        for encoded in committed.values():
            partition_time, meta = decode_commit_metadata(encoded)
            if partition_time > self.stream_time:
                self.stream_time = partition_time
            for key, value in meta.items():
                old = self.processor_metadata.get(key)
                if old is None or old < value:
                    self.processor_metadata[key] = value
                    changed = True
        if changed:
            for p in self.processors.values():
                hook = getattr(p, "restore_processor_metadata", None)
                if hook is not None:
                    hook()
