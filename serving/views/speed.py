"""Read a speed-layer view output topic into a view frame.

View output topics (docs/contracts.md) have one topic per materialized view, named like the
store. Key: JSON ``{"key": k, "window_start": ms, "window_end": ms}`` when windowed, else the
plain key string. Value: the JSON of the aggregate, or null (tombstone).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pandas as pd

from serving.errors import SpeedSourceError
from serving.views.frames import normalize_view_frame

__all__ = ["read_view_topic", "decode_view_key"]

log = logging.getLogger(__name__)

#: records taken per ``consume`` call while reading a view topic
READ_BATCH = 10_000


def decode_view_key(raw: bytes | str | None, windowed: bool) -> tuple[str, int | None, int | None]:
    """Decode a view topic key into ``(key, window_start_ms, window_end_ms)``.

    Raises:
        SpeedSourceError: on a null key, or a windowed key that is not the contract JSON.
    """
    if raw is None:
        raise SpeedSourceError("view record without a key")
    text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
    if not windowed:
        return text, None, None
    try:
        doc = json.loads(text)
        key = doc["key"]
        start, end = int(doc["window_start"]), int(doc["window_end"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SpeedSourceError(f"bad windowed view key {text!r}: {exc}") from exc
    if not isinstance(key, str):
        key = json.dumps(key, separators=(",", ":"))
    return key, start, end


def read_view_topic(
    bootstrap: str,
    topic: str,
    windowed: bool,
    timeout_s: float = 60.0,
    config: dict[str, Any] | None = None,
    from_timestamp_ms: int | None = None,
) -> pd.DataFrame:
    """Consume ``topic`` from the beginning (or from ``from_timestamp_ms``) to its end offsets
    and return the latest view.

    All partitions are assigned manually (no consumer-group subscription, no offset commits).
    The end offsets are taken when the read starts; the read of a partition finishes when its
    consumer reaches that offset (a partition-EOF event or a record at ``end - 1``). The last
    value per ``(key, window_start, window_end)`` wins; a tombstone deletes the identity.
    With the default ``isolation.level=read_committed`` an open transaction at the end of a
    partition holds the read until it is committed or ``timeout_s`` passes.

    Args:
        bootstrap: Kafka bootstrap servers (``host:port[,host:port]``).
        topic: the view output topic (= the store name).
        windowed: whether keys are the windowed JSON form.
        timeout_s: overall deadline in seconds.
        config: extra librdkafka consumer settings (override the defaults).
        from_timestamp_ms: read each partition from its first record whose timestamp is at
            least this (Kafka's ``offsetsForTimes``; every record before it is older), or skip
            the partition when it has none; ``None``: from the beginning. The view then holds
            every identity whose records all have timestamps >= it, exactly as the full read
            (identities with older records may be missing or partial):
            :func:`serving.views.merge.speed_read_start` picks the bound for a merge.

    Returns:
        A view frame ``key, window_start, window_end, value, timestamp`` (ms; ``timestamp`` is
        the record timestamp of the kept record), sorted by ``key, window_start``.

    Raises:
        SpeedSourceError: if the topic does not exist, a broker error occurs, a key cannot be
            decoded, or the end offsets are not reached within ``timeout_s``.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    from speed_layer.admin import reader_config

    deadline = time.monotonic() + timeout_s
    conf = reader_config(bootstrap, {
        "group.id": f"duet-serving-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 100,
        **(config or {}),
    })
    consumer = Consumer(conf)
    try:
        while True:
            try:
                md = consumer.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
            except KafkaException as exc:
                raise SpeedSourceError(f"cannot read metadata of topic {topic!r}: {exc}") from exc
            tmd = md.topics.get(topic)
            electing = tmd is not None and tmd.error is not None and tmd.error.code() in (
                KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION)
            if not electing or time.monotonic() >= deadline:
                break
            time.sleep(0.1)  # a just-created topic: wait for its leaders
        if tmd is None or tmd.error is not None or not tmd.partitions:
            why = tmd.error if tmd is not None and tmd.error is not None else "no partitions"
            raise SpeedSourceError(f"topic {topic!r} is not available: {why}")

        pending: dict[int, int] = {}  # partition -> end offset still to reach
        start: dict[int, int] = {}  # partition -> offset the read starts at
        for p in sorted(tmd.partitions):
            low, high = _watermarks(consumer, TopicPartition(topic, p), deadline)
            if high > low:
                pending[p], start[p] = high, OFFSET_BEGINNING
        if from_timestamp_ms is not None and pending:
            start = _offsets_for_time(consumer, topic, sorted(pending), from_timestamp_ms, deadline)
            for p in [p for p, offset in start.items() if offset < 0]:  # no record that recent
                del pending[p], start[p]
        # the last record per raw key, in the order of their last update (a key's update
        # moves it to the end): each distinct key is decoded once, not once per update
        latest: dict[bytes | None, tuple[bytes | None, int]] = {}
        if pending:
            consumer.assign([TopicPartition(topic, p, start[p]) for p in pending])
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SpeedSourceError(
                    f"timed out after {timeout_s}s reading {topic!r}; partitions not at their "
                    f"end offsets: {sorted(pending)}"
                )
            for msg in consumer.consume(READ_BATCH, timeout=min(remaining, 0.5)):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        p = msg.partition()
                        if p in pending and msg.offset() >= pending[p]:
                            del pending[p]
                        continue
                    if err.fatal() or err.code() in (KafkaError._UNKNOWN_TOPIC,
                                                      KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                      KafkaError.TOPIC_AUTHORIZATION_FAILED):
                        raise SpeedSourceError(f"error reading {topic!r}: {err}")
                    log.warning("transient error reading %s: %s", topic, err)  # bounded by timeout_s
                    continue
                key = msg.key()
                latest.pop(key, None)
                latest[key] = (msg.value(), msg.timestamp()[1])
                p = msg.partition()
                if p in pending and msg.offset() >= pending[p] - 1:
                    del pending[p]
    finally:
        consumer.close()

    rows: dict[tuple[str, int | None, int | None], tuple[str, int]] = {}
    for key, (value, ts) in latest.items():
        ident = decode_view_key(key, windowed)
        if value is None:
            rows.pop(ident, None)
        else:
            rows[ident] = (value.decode("utf-8"), int(ts))

    frame = pd.DataFrame(
        [(k, ws, we, v, ts) for (k, ws, we), (v, ts) in rows.items()],
        columns=["key", "window_start", "window_end", "value", "timestamp"],
    )
    frame = normalize_view_frame(frame)
    return frame.sort_values(["key", "window_start", "window_end"], kind="stable").reset_index(drop=True)


def _offsets_for_time(consumer: Any, topic: str, partitions: list[int], timestamp_ms: int,
                      deadline: float) -> dict[int, int]:
    """``{partition: the offset of its first record with a timestamp >= timestamp_ms}``, -1
    for a partition without one (Kafka's ``offsetsForTimes``).

    Raises:
        SpeedSourceError: on a broker error or at ``deadline`` (monotonic seconds).
    """
    from confluent_kafka import KafkaException, TopicPartition

    asked = [TopicPartition(topic, p, max(0, timestamp_ms)) for p in partitions]
    try:
        found = consumer.offsets_for_times(asked, timeout=max(0.1, deadline - time.monotonic()))
    except KafkaException as exc:
        raise SpeedSourceError(f"cannot look up offsets of {topic!r} at {timestamp_ms} ms: {exc}") from exc
    out: dict[int, int] = {}
    for tp in found:
        if tp.error is not None:
            raise SpeedSourceError(f"cannot look up offsets of {topic!r} at {timestamp_ms} ms: {tp.error}")
        out[tp.partition] = tp.offset
    return out


def _watermarks(consumer: Any, tp: Any, deadline: float) -> tuple[int, int]:
    """``(low, high)`` offsets of ``tp``, retrying retriable errors (e.g. no leader yet on a
    just-created topic) until ``deadline`` (monotonic seconds).

    Raises:
        SpeedSourceError: on a non-retriable error or at the deadline.
    """
    from confluent_kafka import KafkaError, KafkaException

    transient = {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
    }
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and (err.retriable() or err.code() in transient)
            if not retriable or time.monotonic() >= deadline:
                raise SpeedSourceError(
                    f"cannot get the offsets of {tp.topic}[{tp.partition}]: {exc}"
                ) from exc
            time.sleep(0.1)
