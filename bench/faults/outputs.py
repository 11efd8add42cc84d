"""Reading what an application wrote, as a downstream ``read_committed`` consumer sees it."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

#: a logger for the librdkafka clients of the fault runs (their load and probes): refused
#: connections while a node is down are the point of the run, not news
QUIET = logging.getLogger("bench.faults.clients")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def committed_values(bootstrap: str, topic: str, timeout_s: float = 120) -> dict[str, list[Any]]:
    """Every committed record of ``topic`` up to its current end: key -> JSON values in
    offset order (a key lives in one partition).

    Raises:
        TimeoutError: the topic was not read to its end within ``timeout_s`` seconds.
    """
    from confluent_kafka import Consumer, TopicPartition

    from speed_layer.admin import end_offsets

    ends = end_offsets(bootstrap, topic, committed_only=True)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p, e in ends.items() if e > 0])
    pending = {p for p, e in ends.items() if e > 0}
    out: dict[str, list[Any]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(pending)} not read to their end in {timeout_s} s")
            for msg in consumer.consume(1000, timeout=1):
                if msg.error():
                    pending.discard(msg.partition())
                    continue
                out.setdefault(msg.key().decode(), []).append(json.loads(msg.value()))
    finally:
        consumer.close()
    return out


def last_values(bootstrap: str, topic: str) -> dict[str, Any]:
    """The last committed value of every key of ``topic``."""
    return {k: v[-1] for k, v in committed_values(bootstrap, topic).items()}
