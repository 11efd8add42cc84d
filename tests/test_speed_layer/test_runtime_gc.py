"""``python.gc.thresholds``: a running KafkaStreams raises CPython's collector thresholds
(``speed_layer.runtime.gc_tuning``), the last running client of the process puts the
interpreter's back when it closes, ``none`` leaves them alone, and a bad value fails at
construction naming the key."""
from __future__ import annotations

import gc
from typing import Any, Iterator

import pytest

from speed_layer import ConfigException, KafkaStreams, StreamsBuilder


@pytest.fixture
def default_thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def _topology(topic: str) -> Any:
    b = StreamsBuilder()
    b.stream(topic).filter(lambda k, v: True)
    return b.build()


def test_running_clients_raise_the_thresholds_and_the_last_one_restores_them(runtime_kit: Any, default_thresholds: Any) -> None:
    kit = runtime_kit
    t = kit.topics(src=1)
    first = kit.run(_topology(t["src"]), kit.config("a", "s1"))
    assert gc.get_threshold() == (10_000, 10, 100)
    second = kit.run(_topology(t["src"]), kit.config("b", "s2", **{"python.gc.thresholds": "20000,5,50"}))
    assert gc.get_threshold() == (10_000, 10, 100)  # the first client's stay in effect
    assert first.close(30)
    assert gc.get_threshold() == (10_000, 10, 100)  # the second still runs
    assert second.close(30)
    assert gc.get_threshold() == default_thresholds


def test_none_leaves_the_interpreter_alone(runtime_kit: Any, default_thresholds: Any) -> None:
    kit = runtime_kit
    t = kit.topics(src=1)
    streams = kit.run(_topology(t["src"]), kit.config("a", **{"python.gc.thresholds": "none"}))
    assert gc.get_threshold() == default_thresholds
    assert streams.close(30)
    assert gc.get_threshold() == default_thresholds


def test_a_bad_value_fails_at_construction() -> None:
    with pytest.raises(ConfigException, match="python.gc.thresholds"):
        KafkaStreams(_topology("t"), {"application.id": "x", "python.gc.thresholds": "0,10,10"})
