"""The send of a sink node, made once per sink (Kafka's ``SinkNode#process`` and the
serializing and partitioning half of ``RecordCollectorImpl#send``).

:func:`sink_sender` returns the function a sink runs per record: the sink's serdes, full
topic and partitioning are resolved when it is made, so the hot path of every record sent
is one Python frame (a sink with a fixed topic has it as its ``process``; see
``StreamTask.topic_sender``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..processor.api import Record
from ..serde import Serde
from ..windows import Windowed
from .partitioning import partition_for_key

if TYPE_CHECKING:
    from .partition_group import RawRecord
    from .record_errors import RecordErrors
    from .task import RecordCollector

__all__ = ["raw_serializer", "sink_sender"]


class SendingTask(Protocol):
    """What a sender reads of its task at each send: its collector, its record errors, and
    the raw record being processed (the context of a failed send)."""

    collector: "RecordCollector"
    errors: "RecordErrors"

    @property
    def current_raw(self) -> "RawRecord | None": ...


def raw_serializer(serde: Serde[Any]) -> Callable[[Any], bytes]:
    """The function that serializes a non-null value: a plain :class:`Serde`'s own
    serializer (its errors unwrapped; the sender then asks the serde again, for its
    exception), else the serde's ``serialize``."""
    return serde.serializer if type(serde) is Serde else serde.serialize


def sink_sender(task: SendingTask, node: str, full: str, ks: Serde[Any], vs: Serde[Any],
                partitioner: Callable[[str, Any, Any, int], int | None] | None) -> Callable[[Record[Any, Any]], None]:
    """The function that sends each record of the sink node ``node`` to the topic ``full``
    (its full name): key and value serialized with ``ks`` and ``vs`` and handed to
    ``task.collector`` with the record's timestamp and headers, in the partition of
    ``partitioner(topic, key, value, partitions)`` when given, of a windowed key's base key
    bytes when ``ks`` is windowed (Kafka's WindowedStreamPartitioner), else of the key bytes
    (the collector's murmur2). A serializer's exception goes to
    ``production.exception.handler`` (KIP-399, ``RecordErrors.serialization_failed``) and
    the record is not sent."""
    kser, vser = raw_serializer(ks), raw_serializer(vs)
    inner = ks.inner

    def reserialize(record: Record[Any, Any]) -> tuple[bytes | None, bytes | None] | None:
        """The key and value bytes again through the serdes (for their exception), or None
        when one failed (handed to the production handler)."""
        try:
            kb = ks.serialize(record.key)
        except Exception as exc:  # noqa: BLE001 - production.exception.handler (KIP-399)
            task.errors.serialization_failed(node, full, "KEY", record, task.current_raw, exc)
            return None
        try:
            vb = vs.serialize(record.value)
        except Exception as exc:  # noqa: BLE001 - production.exception.handler (KIP-399)
            task.errors.serialization_failed(node, full, "VALUE", record, task.current_raw, exc)
            return None
        return kb, vb

    plain = partitioner is None and inner is None

    def send(record: Record[Any, Any]) -> None:
        key, value = record[0], record[1]
        try:
            kb = None if key is None else kser(key)
            vb = None if value is None else vser(value)
        except Exception:  # noqa: BLE001 - again through the serdes, for their exception
            both = reserialize(record)
            if both is None:
                return
            kb, vb = both
        partition = None
        if plain:
            pass
        elif partitioner is not None:
            partition = partitioner(full, key, value, task.collector.partitions_for(full))
        elif inner is not None and isinstance(key, Windowed):
            try:
                base = inner.serialize(key.key)
            except Exception as exc:  # noqa: BLE001 - production.exception.handler (KIP-399)
                task.errors.serialization_failed(node, full, "KEY", record, task.current_raw, exc)
                return
            if base is not None:
                partition = partition_for_key(base, task.collector.partitions_for(full))
        # (the collector copies the headers it sends)
        task.collector.send(full, kb, vb, record[2], record[3], partition)

    if plain:
        #: what a fused chain inlines (:mod:`speed_layer.processor.fused_chains`): the task,
        #: the full topic and the raw serializers of a sink partitioned by its key bytes
        send.plain_sink = (task, full, kser, vser)  # type: ignore[attr-defined]
    return send
