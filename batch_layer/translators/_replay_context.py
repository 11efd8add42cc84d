"""The processor context of the relational path's replays (stream-stream joins,
suppress, sliding windows): the speed layer's own processors run over in-memory stores
inside a Spark task, with no StreamTask around them."""
from __future__ import annotations

from typing import Any

from speed_layer.processor.api import Record

__all__ = ["ReplayContext"]


class _Config:
    """The speed layer config the replayed processors read: no wall-clock throttle in batch
    (as ``batch_layer.general.plan.batch_config``)."""

    outer_join_emit_interval_ms = 0
    windowed_aggregation_emit_interval_ms = 0


class _Metrics:
    def inc(self, task_id: Any, name: str) -> None:
        return None


class _Task:
    config = _Config()
    metrics = _Metrics()
    task_id = None


class ReplayContext:
    """The little of a ``ProcessorContext`` the join, aggregate, sliding and suppress processors use:
    stores, a forward (and a cache flush's forward) to ``target``, no record metadata and a
    wall clock standing still (as in the general executor)."""

    _task = _Task()

    def __init__(self, stores: dict[str, Any], target: Any) -> None:
        self.stores, self.target = stores, target

    def get_state_store(self, name: str) -> Any:
        return self.stores[name]

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        self.target(record)

    def forward_flushed(self, record: Record[Any, Any]) -> None:
        self.target(record)

    def record_metadata(self) -> None:
        return None

    def current_system_time_ms(self) -> int:
        return 0

    def record_dropped(self, node: str, reason: str, window: Any = None, timestamp: int | None = None) -> None:
        return None
