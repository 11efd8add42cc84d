"""The views a batch plan's execution returns (:class:`BatchViews`, the base of the general
executor's ``GeneralViews``); ``batch_layer.compiler`` re-exports it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .translators._plan import ExecContext

__all__ = ["BatchViews"]


class BatchViews(dict):
    """``{store: view DataFrame}`` returned by :meth:`BatchPlan.execute`, lazily defined.

    View DataFrame columns (contracts.md): ``key string, window_start long (ms), window_end
    long (ms), value string (JSON), timestamp long (ms)``; window bounds are null for
    non-windowed stores.

    The counters are read from Spark accumulators, so they are complete only after every
    frame has been computed (e.g. written).
    """

    def __init__(self, frames: dict[str, "DataFrame"], ctx: "ExecContext") -> None:
        super().__init__(frames)
        self._ctx = ctx

    def dropped_by_node(self) -> dict[str, int]:
        """Records dropped by a failing deserialization / timestamp extraction / user
        function, per node (the speed layer's dead letters)."""
        return {node: len(ids) for node, ids in sorted(self._ctx.errors_acc.value.items())}

    def dropped(self) -> int:
        """Distinct source records dropped by at least one failure."""
        ids: set[Any] = set()
        for s in self._ctx.errors_acc.value.values():
            ids |= s
        return len(ids)

    def watermark_ms(self) -> int:
        """Largest (extracted) timestamp of the stream sources' records read, ms; -1 if none."""
        return int(self._ctx.watermark_acc.value)

    @property
    def join_strategies(self) -> dict[str, str]:
        """Join node -> ``"broadcast"`` or ``"shuffle"`` as chosen at execution."""
        return dict(self._ctx.join_strategies)

    def release(self) -> None:
        """Unpersist shared intermediates and destroy broadcast indexes (call after the
        frames have been used)."""
        self._ctx.release()
