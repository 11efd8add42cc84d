"""Base of the built-in processors."""
from __future__ import annotations

import logging
from typing import Any

from ...graph.nodes import GraphNode
from ..api import Processor, ProcessorContext, Record

log = logging.getLogger("speed_layer.processor")


class OpProcessor(Processor[Any, Any]):
    """A built-in processor for one graph node; ``self.op`` is the node's op."""

    def __init__(self, node: GraphNode) -> None:
        self.node = node
        self.op: Any = node.op

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        self.context.forward(record, child)

    def dropped(self, reason: str, record: Record[Any, Any], window: tuple[str, Any, int] | None = None) -> None:
        """Count and log a dropped record (Kafka's ``dropped-records`` task metric);
        ``window`` = ``(store, key, window_start)`` names the window a late record missed."""
        if window is None:
            self.context.record_dropped(self.node.name, reason)  # type: ignore[attr-defined]
        else:
            self.context.record_dropped(self.node.name, reason, window=window)  # type: ignore[attr-defined]
        log.debug("%s dropped record key=%r ts=%d: %s", self.node.name, record.key, record.timestamp, reason)
