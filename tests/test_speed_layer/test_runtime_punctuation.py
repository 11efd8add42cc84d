"""Wall-clock punctuation in the running stream thread (Kafka's
``PunctuationType.WALL_CLOCK_TIME``: fired by the thread's loop on the system clock, with
no record needed), and stream-time punctuation driven by the consumed records."""
from __future__ import annotations

import time
from typing import Any

import pytest

from speed_layer import Serdes, Topology
from speed_layer.processor.api import Processor, PunctuationType, Record

pytestmark = pytest.mark.broker


class Ticker(Processor[Any, Any]):
    """Forwards ``("wall", ts)`` every 200 ms of wall-clock time and ``("stream", ts)`` every
    10 ms of stream time."""

    def init(self, context: Any) -> None:
        self.context = context
        context.schedule(200, PunctuationType.WALL_CLOCK_TIME, lambda ts: context.forward(Record("wall", str(ts), ts)))
        context.schedule(10, PunctuationType.STREAM_TIME, lambda ts: context.forward(Record("stream", str(ts), ts)))

    def process(self, record: Record[Any, Any]) -> None:
        return None


def test_wall_clock_punctuation_fires_in_the_running_thread(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(inp=1, out=1)
    text = Serdes.String()
    topology = (Topology().add_source("src", t["inp"], key_deserializer=text, value_deserializer=text)
                .add_processor("tick", Ticker, "src")
                .add_sink("sink", t["out"], "tick", key_serializer=text, value_serializer=text))
    kit.produce(t["inp"], [("k", "a", 5), ("k", "b", 27)])
    before = int(time.time() * 1000)
    streams = kit.run(topology, kit.config("app"))
    deadline = time.monotonic() + 30
    while True:
        out = [(m.key().decode(), int(m.value())) for m in kit.read(t["out"])]
        walls = [ts for k, ts in out if k == "wall"]
        if len(walls) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(walls) >= 3, out
    assert all(ts >= before for ts in walls)  # system-clock times, not record times
    # Kafka's PunctuationSchedule#next: due times stay on the 200 ms grid of the schedule,
    # and a late firing (a busy or polling thread) does not move it, so two consecutive
    # firings may be closer than 200 ms; three span at least two grid steps, minus the
    # first one's lateness (well under 200 ms)
    assert walls == sorted(set(walls)) and walls[2] - walls[0] > 200
    assert [ts for k, ts in out if k == "stream"] == [5, 27]  # due 0 at the first record, then 10 -> fires at 27
    assert streams.close(30)
