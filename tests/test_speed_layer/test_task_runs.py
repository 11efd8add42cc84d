"""A task's run of one partition (``StreamTask.process_run`` -> ``_run_queue``, issue 45):
the consumed offset and the ``process`` counter are set once per run instead of per record.
Against ``StreamTask.process`` per record on the same records (broker-free, hypothesis):
the same outputs, consumed offsets, process count and dead letters, with records that fail
to deserialize or carry no valid timestamp among them, runs bounded by ``max_records`` and
by a timestamp; and a run cut short by a fatal error still consumes up to the failed record.
"""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speed_layer import Consumed, Produced, Serdes, StreamsBuilder
from speed_layer.errors import StreamsException
from speed_layer.runtime.partition_group import RawRecord
from speed_layer.testing import TopologyTestDriver

S, J = Serdes.String(), Serdes.JSON()


def _driver(handler: str = "log_and_continue") -> TopologyTestDriver:
    b = StreamsBuilder()
    (b.stream("in", Consumed.with_(S, J)).filter(lambda k, v: v["n"] % 3 != 0)
     .map_values(lambda v: {"m": v["n"] * 2}).to("out", Produced.with_(S, J)))
    return TopologyTestDriver(b.build(), {"application.id": "runs", "bootstrap.servers": "unused:9092",
                                          "deserialization.exception.handler": handler,
                                          "default.timestamp.extractor": "log_and_skip_on_invalid"})


def _raws(kinds: list[int]) -> list[RawRecord]:
    """Records of partition 0, offsets from 10: kind 0 a good record, 1 a value that is not
    JSON, 2 a negative timestamp (skipped by the default extractor's rules)."""
    out = []
    for i, kind in enumerate(kinds):
        value = b"{not json" if kind == 1 else b'{"n": %d}' % i
        out.append(RawRecord("in", 0, 10 + i, b"k%d" % (i % 3), value, -5 if kind == 2 else 1000 + i, ()))
    return out


def _state(d: TopologyTestDriver) -> tuple[Any, ...]:
    task = d.tasks[0]
    out = d.create_output_topic("out", S, J).read_key_values_to_list()
    return out, dict(task.consumed_offsets), task.metrics.counters.get((task.task_id, "process"), 0)


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.sampled_from([0, 0, 0, 1, 2]), min_size=1, max_size=40),
       chunk=st.integers(min_value=1, max_value=15), bounded=st.booleans())
def test_runs_equal_record_by_record_processing(kinds: list[int], chunk: int, bounded: bool) -> None:
    raws = _raws(kinds)
    with _driver() as one:
        for raw in raws:
            one.tasks[0].process(raw)
        expected = _state(one)
    with _driver() as runs:
        task = runs.tasks[0]
        task.queue("in", 0).extend(raws)
        taken = 0
        while task.buffered():
            # the executor's bound is never below the head (it runs one record then)
            until = max(raws[min(len(raws) - 1, taken + chunk - 1)].timestamp, task.head_timestamp()) if bounded else None
            n = task.process_run(until, chunk)
            assert 0 < n <= chunk
            taken += n
        assert taken == len(raws)
        assert _state(runs) == expected
    assert expected[1] == {("in", 0): raws[-1].offset + 1}
    assert expected[2] == kinds.count(0)


def test_a_run_stops_at_its_timestamp_bound() -> None:
    raws = _raws([0] * 6)
    with _driver() as d:
        task = d.tasks[0]
        task.queue("in", 0).extend(raws)
        assert task.process_run(raws[2].timestamp, 100) == 3
        assert task.consumed_offsets == {("in", 0): raws[2].offset + 1}
        assert task.metrics.counters[(task.task_id, "process")] == 3
        assert task.buffered() == 3


def test_a_run_cut_short_by_a_fatal_error_consumes_up_to_the_failed_record() -> None:
    """``log_and_fail`` raises at the first bad record: the records before it count as
    processed, and the consumed offset covers the failed one (as ``process`` per record
    did: its offset was consumed before it ran); the records after it stay buffered."""
    raws = _raws([0, 0, 1, 0])
    with _driver("log_and_fail") as d:
        task = d.tasks[0]
        task.queue("in", 0).extend(raws)
        with pytest.raises(StreamsException):
            task.process_run(None, 100)
        assert task.consumed_offsets == {("in", 0): raws[2].offset + 1}
        assert task.metrics.counters[(task.task_id, "process")] == 2
        assert task.buffered() == 1


def test_a_run_cut_short_by_a_processing_error_counts_as_process_does() -> None:
    """A processor that raises under the ``fail`` processing handler: the run and
    ``process`` per record leave the same count (the failed record not processed) and the
    same consumed offset (covering it)."""

    def build() -> TopologyTestDriver:
        b = StreamsBuilder()

        def check(v: dict[str, int]) -> dict[str, int]:
            if v["n"] == 2:
                raise ValueError("n == 2")
            return v

        b.stream("in", Consumed.with_(S, J)).map_values(check).to("out", Produced.with_(S, J))
        return TopologyTestDriver(b.build(), {"application.id": "runs", "bootstrap.servers": "unused:9092",
                                              "processing.exception.handler": "log_and_fail"})

    raws = _raws([0, 0, 0, 0])
    with build() as one:
        task = one.tasks[0]
        with pytest.raises(StreamsException):
            for raw in raws:
                task.process(raw)
        expected = _state(one)
    with build() as runs:
        task = runs.tasks[0]
        task.queue("in", 0).extend(raws)
        with pytest.raises(StreamsException):
            task.process_run(None, 100)
        assert _state(runs) == expected
        assert task.buffered() == 1
    assert expected[1:] == ({("in", 0): raws[2].offset + 1}, 2)
