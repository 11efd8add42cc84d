"""The processor context a task gives each of its processors (Kafka's
``ProcessorContextImpl``): forwarding to the children, state stores, punctuation
scheduling, processor metadata, metrics and dropped-record accounting, sends to topics."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ..config import StreamsConfig
from ..errors import InvalidStateStoreException, SerializationException, StreamsException
from ..graph.nodes import GraphNode
from ..graph.ops import SinkOp
from ..processor.api import Cancellable, PunctuationType, Record, RecordMetadata
from ..processor.internals import InternalProcessorContext
from ..topology import Topology

if TYPE_CHECKING:
    from .task import StreamTask

__all__ = ["ProcessorContextImpl"]

T = TypeVar("T")


class ProcessorContextImpl(InternalProcessorContext):
    """The context a task gives one of its processors (a user processor sees the
    :class:`ProcessorContext` part)."""

    def __init__(self, task: "StreamTask", node: GraphNode) -> None:
        self._task = task
        self._node = node
        self._children = task.children.get(node.name, [])
        self.link_children()
        self.send_to_topic = task.send_to_topic  # type: ignore[method-assign]
        self.topic_sender = task.topic_sender  # type: ignore[method-assign]

    def link_children(self) -> None:
        """Bind the ``process`` of every child as it is now (the hot path: one forward per
        record and node). Called when the context is made, and again by the task once every
        processor's ``init`` ran (a sink's ``process`` is then its prepared sender, a
        linked source's or merge's its child's)."""
        task = self._task
        self._child_procs = [task.processors[c].process for c in self._children]
        if len(self._child_procs) == 1:
            only = self._child_procs[0]
            forward_to = self._forward_to

            def forward_one(record: Record[Any, Any], child_name: str | None = None) -> None:
                if child_name is None:
                    only(record)
                else:
                    forward_to(record, child_name)

            # an instance attribute shadows the method: one call per forward, not two
            self.forward = forward_one  # type: ignore[method-assign]

    def forward(self, record: Record[Any, Any], child_name: str | None = None) -> None:
        """Forward to every child, or to ``child_name`` only.

        Raises:
            StreamsException: if ``child_name`` is not a child of this node.
        """
        if child_name is not None:
            self._forward_to(record, child_name)
            return
        for process in self._child_procs:
            process(record)

    def forward_flushed(self, record: Record[Any, Any]) -> None:
        """Forward to every child a record that a store's record-cache flush emits (at
        commit, or evicted by a put). An exception a downstream processor raises goes to
        ``processing.exception.handler`` for that record alone, as Kafka's
        ``ProcessorNode#process`` since 3.9 (KIP-1033) hands every exception of a
        processor, a cache flush's included, to the ProcessingExceptionHandler; the flush
        goes on with the next entry.

        Raises:
            StreamsException: under ``log_and_fail`` (the handler's FAIL), wrapping the error.
        """
        try:
            self.forward(record)
        except SerializationException as exc:  # a processor's serde call: a processing error
            self._task.handle_flush_error(self._node.name, record, exc)
        except StreamsException:
            raise
        except Exception as exc:  # noqa: BLE001 - routed to the configured handler
            self._task.handle_flush_error(self._node.name, record, exc)

    def _forward_to(self, record: Record[Any, Any], child_name: str) -> None:
        if child_name not in self._children:
            raise StreamsException(f"{child_name} is not a child of {self._node.name}")
        self._task.processors[child_name].process(record)

    def schedule(self, interval_ms: int, type: PunctuationType, punctuator: Callable[[int], None]) -> Cancellable:
        if interval_ms < 1:
            raise ValueError("punctuation interval must be >= 1 ms")
        return self._task.schedule(self._node.name, interval_ms, type, punctuator)

    def get_state_store(self, name: str) -> Any:
        task = self._task
        if name in self._node.stores or name in task.global_stores and name in self._node.stores:
            store = task.stores.get(name) or task.global_stores.get(name)
            if store is not None:
                return store
        if name in task.global_stores:
            return task.global_stores[name]
        raise InvalidStateStoreException(f"Processor {self._node.name} has no access to StateStore {name}")

    def commit(self) -> None:
        self._task.commit_requested = True

    def processor_metadata_for_key(self, key: str) -> int | None:
        """Kafka's ``InternalProcessorContext#processorMetadataForKey``: the task's value
        for ``key``, restored from the metadata committed with its offsets (KIP-825)."""
        return self._task.processor_metadata.get(key)

    def add_processor_metadata_key_value(self, key: str, value: int) -> None:
        """Kafka's ``InternalProcessorContext#addProcessorMetadataKeyValue``: committed with
        the task's offsets at its next commit."""
        task = self._task
        task.processor_metadata[key] = value
        task.processor_metadata_needs_commit = True

    def record_metadata(self) -> RecordMetadata | None:
        return self._task.current_metadata

    @property
    def task_id(self) -> str:
        return self._task.task_id

    @property
    def application_id(self) -> str:
        return self._task.config.application_id

    def current_stream_time_ms(self) -> int:
        return self._task.stream_time

    def current_system_time_ms(self) -> int:
        return self._task.clock()

    @property
    def app_config(self) -> StreamsConfig:
        return self._task.config

    @property
    def topology(self) -> Topology:
        return self._task.topology

    def inc_metric(self, name: str) -> None:
        self._task.metrics.inc(self._task.task_id, name)

    def task_local(self, key: Any, factory: Callable[[], T]) -> T:
        locals_ = self._task.task_locals
        if key not in locals_:
            locals_[key] = factory()
        return locals_[key]

    def record_expired_join(self, store: str, first_ms: int, last_ms: int) -> None:
        self._task.metrics.expired_join_ranges.add((store, first_ms, last_ms))

    def record_dropped(self, node: str, reason: str, window: tuple[str, Any, int] | None = None,
                       timestamp: int | None = None) -> None:
        """Count a dropped record; ``window`` = ``(store, key, window_start)`` of a late record,
        ``timestamp`` its timestamp (ms)."""
        metrics = self._task.metrics
        metrics.inc(self._task.task_id, "dropped-records")
        if reason.startswith("late"):
            metrics.inc(self._task.task_id, "dropped-records-late")
        if window is not None:
            store, key, start = window
            try:
                hash(key)
            except TypeError:
                key = repr(key)
            metrics.late_windows.setdefault(store, set()).add((key, start))
            if timestamp is not None:
                metrics.late_records.add((store, key, timestamp))

    def send_to_topic(self, node: str, topic: str, record: Record[Any, Any], op: SinkOp) -> None:
        """Serialize and send ``record`` as the sink ``op`` does (shadowed in ``__init__`` by
        the task's own :meth:`StreamTask.send_to_topic`: one frame less per record sent)."""
        self._task.send_to_topic(node, topic, record, op)
