"""The counters of a stream thread's tasks (:class:`Metrics`): Kafka's task-level metrics
(``process``, ``dropped-records``, ...) by task id and name, and the windows and records that
late drops left incomplete in the speed layer (the batch layer's results are complete)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Metrics"]


@dataclass
class Metrics:
    """Counters per task and name, e.g. ``("0_1", "dropped-records")``."""

    counters: dict[tuple[str, str], int] = field(default_factory=dict)
    #: store -> ``(key, window_start)`` of windows that records dropped as late would have
    #: updated (the speed layer's result for them is incomplete; the batch layer's is not)
    late_windows: dict[str, set[tuple[Any, int]]] = field(default_factory=dict)
    #: ``(store, key, timestamp)`` of each record an aggregation dropped as late
    late_records: set[tuple[str, Any, int]] = field(default_factory=set)
    #: ``(join window store, first ms, last ms)``: the timestamps of stream-stream join
    #: results lost to expired join window records (``expired-window-record-drop``)
    expired_join_ranges: set[tuple[str, int, int]] = field(default_factory=set)

    def inc(self, task_id: str, name: str, n: int = 1) -> None:
        key = (task_id, name)
        self.counters[key] = self.counters.get(key, 0) + n

    def total(self, name: str) -> int:
        return sum(v for (_, n), v in self.counters.items() if n == name)
