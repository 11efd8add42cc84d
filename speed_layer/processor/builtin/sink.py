"""The sink processor: serializes and hands records to the task's record collector."""
from __future__ import annotations

from typing import Any

from ..api import Record
from ..internals import InternalProcessorContext
from .base import OpProcessor


class SinkProcessor(OpProcessor):
    """Writes each record to the op's topic (or the extracted topic), with the op's serdes
    (defaults: the config's for user topics, the internal serdes for repartition topics)."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        op = self.op
        if op.topic is not None:
            # the context's sender for the fixed topic (serdes and topic resolved once) is
            # this processor's process: one frame and one lookup less per record
            self.process = context.topic_sender(self.node.name, op.topic, op)  # type: ignore[method-assign]

    def process(self, record: Record[Any, Any]) -> None:
        op = self.op
        topic = op.topic if op.topic is not None else op.topic_extractor(record.key, record.value, self.context.record_metadata())
        self.context.send_to_topic(self.node.name, topic, record, op)
