"""A closed ``KafkaStreams`` releases its Kafka clients at once, as Kafka Streams' ``close()``
does (``StreamThread#completeShutdown`` closes the thread's producer and consumers): no
librdkafka thread of it is left while the object is still referenced (an application that
keeps its closed client, or a test, or a process that runs one client after another)."""
from __future__ import annotations

import gc
import os
from typing import Any

import pytest

from speed_layer import StreamsBuilder


def _librdkafka_threads() -> list[str]:
    """Names of the librdkafka threads of this process (``rdk:main``, ``rdk:broker...``; Linux)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name.startswith("rdk:"):
            names.append(name)
    return sorted(names)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_close_ends_every_client_thread(runtime_kit: Any, guarantee: str) -> None:
    kit = runtime_kit
    t = kit.topics(src=2, out=2)
    b = StreamsBuilder()
    b.stream(t["src"]).map_values(lambda v: v * 10).to(t["out"])
    kit.produce(t["src"], [("a", 1, 1_000), ("b", 2, 2_000), ("c", 3, 3_000)])
    gc.collect()
    before = _librdkafka_threads()
    gc.disable()  # only references keep a client alive, not the timing of the cyclic collector
    try:
        streams = kit.run(b.build(), kit.config("close", **{"processing.guarantee": guarantee}))
        running = _librdkafka_threads()
        assert streams.close(30)
        after = _librdkafka_threads()
    finally:
        gc.enable()
    assert len(running) > len(before)
    assert streams.state == "NOT_RUNNING"  # still referenced: closed, not freed
    assert len(after) <= len(before), f"left by the closed client: {after} (before it started: {before})"
    assert sorted(m.value() for m in kit.read(t["out"], read_committed=True)) == [b"10", b"20", b"30"]
