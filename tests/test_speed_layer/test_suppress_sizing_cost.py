"""The suppress buffer's size estimate costs nothing unless a ``max_bytes`` bound needs it
(issue 45): ``_Entry.size`` pickles the buffered values, so it is counted here, as
operations, never timed. Kafka's ``InMemoryTimeOrderedKeyValueChangeBuffer`` keeps a running
``memBufferSize`` the same way: each update adds its record's size once, an eviction
subtracts the size it added."""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import BufferConfig, Consumed, Grouped, Produced, Serdes, StreamsBuilder, Suppressed, TimeWindows
from speed_layer.processor.builtin import suppress as suppress_mod
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}
N_KEYS, N_WINDOWS = 5, 40


@pytest.fixture()
def size_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of the real ``_Entry.size`` (which still runs)."""
    calls = [0]
    real = suppress_mod._Entry.size

    def counted(self: Any) -> int:
        calls[0] += 1
        return real(self)

    monkeypatch.setattr(suppress_mod._Entry, "size", counted)
    return calls


def _run(buffer: BufferConfig) -> tuple[TopologyTestDriver, int]:
    """Windowed counts of N_KEYS keys over N_WINDOWS 10 ms windows, three updates per key
    and window, final results; returns the open driver and the number of emitted results."""
    b = StreamsBuilder()
    (b.stream("in", Consumed.with_(S, S)).group_by_key(Grouped.with_(S, S))
     .windowed_by(TimeWindows.of_size_and_grace(10, 0)).count()
     .suppress(Suppressed.until_window_closes(buffer) if buffer.max_bytes is None and buffer.max_records is None
               else Suppressed.until_time_limit(10, buffer))
     .to_stream().map(lambda wk, c: (wk.key, str(c))).to("out", Produced.with_(S, S)))
    d = TopologyTestDriver(b.build(), CONFIG)
    inp = d.create_input_topic("in")
    for w in range(N_WINDOWS):
        for k in range(N_KEYS):
            for j in range(3):
                inp.pipe_input(f"k{k}", "v", w * 10 + j)
    return d, len(d.create_output_topic("out", S, S).read_records_to_list())


def test_an_unbounded_buffer_never_sizes_its_entries(size_calls: list[int]) -> None:
    d, emitted = _run(BufferConfig.unbounded())
    try:
        assert emitted == N_KEYS * (N_WINDOWS - 1)  # the last window is still open
        assert size_calls[0] == 0
    finally:
        d.close()


def test_a_max_records_buffer_never_sizes_its_entries(size_calls: list[int]) -> None:
    d, emitted = _run(BufferConfig.max_records_(1_000).emit_early_when_full())
    try:
        assert emitted > 0
        assert size_calls[0] == 0
    finally:
        d.close()


def test_a_max_bytes_buffer_sizes_each_update_once_and_keeps_the_sum(size_calls: list[int]) -> None:
    d, emitted = _run(BufferConfig.max_bytes_(10**9).emit_early_when_full())
    try:
        updates = N_KEYS * N_WINDOWS * 3  # the driver flushes the count cache after every record
        assert emitted > 0
        assert size_calls[0] == updates  # once per update, none at eviction
        proc = next(p for p in d.tasks[0].processors.values() if isinstance(p, suppress_mod.SuppressProcessor))
        real = sum(suppress_mod._Entry.size(e) for e in proc.entries.values())
        assert proc.size_bytes == real == sum(proc.sizes.values())
    finally:
        d.close()
