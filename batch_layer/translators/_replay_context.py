"""The processor context of the relational path's replays (stream-stream joins,
suppress, sliding windows): the speed layer's own processors run over in-memory stores
inside a Spark task, with no StreamTask around them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from speed_layer.errors import StreamsException
from speed_layer.processor.api import Cancellable, PunctuationType, Record
from speed_layer.processor.internals import InternalProcessorContext
from speed_layer.state.keys import ORDERED_KEY

__all__ = ["ReplayContext"]

T = TypeVar("T")


@dataclass(frozen=True)
class _ReplayConfig:
    """The config the replayed processors read: no wall-clock throttle in batch (as
    ``batch_layer.general.topology.batch_config``)."""

    outer_join_emit_interval_ms: int = 0
    windowed_aggregation_emit_interval_ms: int = 0
    default_key_serde: Any = ORDERED_KEY


_CONFIG = _ReplayConfig()


class ReplayContext(InternalProcessorContext):
    """The context of a processor replayed over in-memory ``stores``: its forwards (and a
    cache flush's) go to ``target``; no record metadata, no metrics, no topics, no
    punctuation, and a wall clock standing still (as in the general executor). Processors
    of one replay that share task-local objects (both sides of a stream-stream join) are
    given the same ``task_locals`` dict."""

    def __init__(self, stores: dict[str, Any], target: Callable[[Record[Any, Any]], None],
                 task_locals: dict[Any, Any] | None = None) -> None:
        self.stores, self.target = stores, target
        self._locals = {} if task_locals is None else task_locals

    # -- ProcessorContext
    def forward(self, record: Record[Any, Any], child_name: str | None = None) -> None:
        self.target(record)

    def schedule(self, interval_ms: int, type: PunctuationType, punctuator: Callable[[int], None]) -> Cancellable:
        raise StreamsException("a relational replay runs no punctuation (the general executor does)")

    def get_state_store(self, name: str) -> Any:
        return self.stores[name]

    def commit(self) -> None:
        return None

    def record_metadata(self) -> None:
        return None

    @property
    def task_id(self) -> str:
        return "replay"

    @property
    def application_id(self) -> str:
        return "replay"

    def current_stream_time_ms(self) -> int:
        return -1

    def current_system_time_ms(self) -> int:
        return 0

    # -- InternalProcessorContext
    @property
    def app_config(self) -> _ReplayConfig:
        return _CONFIG

    @property
    def topology(self) -> None:
        return None

    def forward_flushed(self, record: Record[Any, Any]) -> None:
        self.target(record)

    def record_dropped(self, node: str, reason: str, window: Any = None, timestamp: int | None = None) -> None:
        return None

    def inc_metric(self, name: str) -> None:
        return None

    def send_to_topic(self, node: str, topic: str, record: Record[Any, Any], op: Any) -> None:
        raise StreamsException(f"a relational replay sends no records to topics (node {node}, topic {topic})")

    def processor_metadata_for_key(self, key: str) -> int | None:
        return None

    def add_processor_metadata_key_value(self, key: str, value: int) -> None:
        return None

    def task_local(self, key: Any, factory: Callable[[], T]) -> T:
        if key not in self._locals:
            self._locals[key] = factory()
        return self._locals[key]
