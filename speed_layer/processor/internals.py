"""What built-in processors may ask of their context beyond the public
:class:`~speed_layer.processor.api.ProcessorContext` (Kafka's
``processor.internals.InternalProcessorContext``). Internal: user processors get a
``ProcessorContext`` and must not rely on this module.

Three executors implement it: the runtime's task context (``runtime/task.py``, also used by
the ``TopologyTestDriver`` and the batch layer's general executor) and the batch layer's
relational replays (``batch_layer/translators/_replay_context.py``).
"""
from __future__ import annotations

from abc import abstractmethod
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from .api import ProcessorContext, Record

if TYPE_CHECKING:
    from ..graph.ops import SinkOp
    from ..serde import Serde
    from ..topology import Topology

__all__ = ["InternalProcessorContext", "ProcessorConfig"]

T = TypeVar("T")


class ProcessorConfig(Protocol):
    """The application configs built-in processors read (Kafka's ``appConfigs()`` entries
    they use): both emit throttles (ms; Kafka's internal configs
    ``__emit.interval.ms.kstreams.outer.join.spurious.results.fix__`` and
    ``__emit.interval.ms.kstreams.windowed.aggregation__``) and the default key serde."""

    @property
    def outer_join_emit_interval_ms(self) -> int: ...

    @property
    def windowed_aggregation_emit_interval_ms(self) -> int: ...

    @property
    def default_key_serde(self) -> "Serde[Any]": ...


class InternalProcessorContext(ProcessorContext):
    """The context of a built-in processor (Kafka's ``InternalProcessorContext``): the
    application config, the topology, task metrics, the forward of a record-cache flush,
    processor metadata committed with the offsets (KIP-825), and objects shared by the
    processors of one task (a stream-stream join's time tracker)."""

    @property
    @abstractmethod
    def app_config(self) -> ProcessorConfig:
        """The application's config (Kafka's ``appConfigs()``)."""

    @property
    @abstractmethod
    def topology(self) -> "Topology | None":
        """The whole topology (None where the processor runs outside one: a relational
        replay)."""

    @abstractmethod
    def forward_flushed(self, record: Record[Any, Any]) -> None:
        """Forward a record that a store's record-cache flush emits (at commit, or evicted
        by a put)."""

    @abstractmethod
    def record_dropped(self, node: str, reason: str, window: tuple[str, Any, int] | None = None,
                       timestamp: int | None = None) -> None:
        """Count a dropped record (task metric ``dropped-records``, and
        ``dropped-records-late`` for a reason starting with "late"); ``window`` =
        ``(store, key, window_start)`` of a late record, ``timestamp`` its timestamp (ms)."""

    def record_expired_join(self, store: str, first_ms: int, last_ms: int) -> None:
        """Report that a stream-stream join lost results because records of its window
        store ``store`` had expired: the lost results' timestamps lie in ``[first_ms,
        last_ms]`` (ms). The runtime keeps them (``KafkaStreams.expired_join_ranges()``); a
        context that keeps no metrics (a relational replay, which expires nothing) does
        nothing."""

    @abstractmethod
    def inc_metric(self, name: str) -> None:
        """Count one occurrence of the task metric ``name`` (e.g.
        ``expired-window-record-drop``)."""

    @abstractmethod
    def send_to_topic(self, node: str, topic: str, record: Record[Any, Any], op: "SinkOp") -> None:
        """Serialize ``record`` with the sink's serdes and send it to ``topic``.

        Raises:
            StreamsException: where records cannot be sent (a relational replay), or on a
                send error.
        """

    def topic_sender(self, node: str, topic: str, op: "SinkOp") -> Callable[[Record[Any, Any]], None]:
        """A function sending each record it is given as ``send_to_topic(node, topic,
        record, op)`` does (the runtime's resolves the sink's serdes and topic once: the
        function a sink with a fixed topic runs per record).

        Raises:
            StreamsException: when called, as :meth:`send_to_topic`.
        """
        return partial(self.send_to_topic, node, topic, op=op)

    @abstractmethod
    def processor_metadata_for_key(self, key: str) -> int | None:
        """The task's processor metadata for ``key`` (restored from the metadata committed
        with its offsets, KIP-825), None if absent."""

    @abstractmethod
    def add_processor_metadata_key_value(self, key: str, value: int) -> None:
        """Set the task's processor metadata ``key`` (committed with the offsets at the next
        commit)."""

    @abstractmethod
    def task_local(self, key: Any, factory: Callable[[], T]) -> T:
        """The object stored under ``key`` for this task, created by ``factory()`` on first
        use: how two processors of one task share state that is not a store (Kafka hands
        both sides of a stream-stream join one ``TimeTracker`` per task from a
        ``TimeTrackerSupplier``)."""
