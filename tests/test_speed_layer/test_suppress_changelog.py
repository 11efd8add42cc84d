"""The suppress buffer is written to its store and changelog at the commit, once per key
changed since the last one, as Kafka's ``InMemoryTimeOrderedKeyValueChangeBuffer`` logs its
dirty keys in ``flush`` (issue 45: a windowed count with final results wrote each window's
entry twice, put and tombstone, pickled, whatever the commit interval). Counted as store
writes (each one is also a changelog record), never timed.

The invariant that makes the deferral safe: after every commit, the store holds exactly the
buffer's entries, so a task restored from it (or from its changelog, which receives the same
writes) continues with the buffer it had.
"""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from speed_layer import BufferConfig, Consumed, Grouped, Produced, Serdes, StreamsBuilder, Suppressed, TimeWindows
from speed_layer.processor.builtin.suppress import SuppressProcessor
from speed_layer.runtime.partition_group import RawRecord
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}


def _driver() -> TopologyTestDriver:
    b = StreamsBuilder()
    (b.stream("in", Consumed.with_(S, S)).group_by_key(Grouped.with_(S, S))
     .windowed_by(TimeWindows.of_size_and_grace(10, 0)).count()
     .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
     .to_stream().map(lambda wk, c: (wk.key, f"{wk.window.start}:{c}")).to("out", Produced.with_(S, S)))
    return TopologyTestDriver(b.build(), CONFIG)


def _suppress(d: TopologyTestDriver) -> SuppressProcessor:
    return next(p for p in d.tasks[0].processors.values() if isinstance(p, SuppressProcessor))


def _count_writes(proc: SuppressProcessor) -> list[int]:
    """Counts the buffer store's writes (puts and tombstones), which still happen."""
    calls = [0]
    real = proc.store.put

    def counted(key: Any, value: Any) -> None:
        calls[0] += 1
        real(key, value)

    proc.store.put = counted
    return calls


def _run(d: TopologyTestDriver, records: list[tuple[str, int]], commit_after: set[int]) -> None:
    """Process ``(key, timestamp)`` records in the driver's one task, committing after the
    indexes in ``commit_after`` and at the end (as a commit interval would)."""
    task = d.tasks[0]
    for i, (key, ts) in enumerate(records):
        task.process(RawRecord("in", 0, i, key.encode(), b"v", ts, []))
        if i in commit_after:
            task.commit()
    task.commit()


def _assert_store_is_buffer(proc: SuppressProcessor) -> None:
    stored = {k: v for k, v in proc.store.all()}
    assert stored == {sk: e.stored() for sk, e in proc.entries.items()}


def test_a_window_buffered_and_emitted_between_two_commits_writes_nothing() -> None:
    keys, windows = 5, 40
    records = [(f"k{k}", w * 10 + j) for w in range(windows) for k in range(keys) for j in range(3)]
    commits = set(range(99, len(records), 100))  # every 100 records: ~7 windows apart
    d = _driver()
    try:
        proc = _suppress(d)
        writes = _count_writes(proc)
        _run(d, records, commits)
        emitted = d.create_output_topic("out", S, S).read_records_to_list()
        assert len(emitted) == keys * (windows - 1)  # the last window is still open
        # at most one entry per key buffered at each commit, and its tombstone later
        # (written twice per window before: 2 * 195 = 390)
        assert 0 < writes[0] <= 2 * keys * (len(commits) + 1)
        _assert_store_is_buffer(proc)
    finally:
        d.close()


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 200)), min_size=1, max_size=60),
    commits=st.sets(st.integers(0, 59), max_size=12),
)
def test_after_every_commit_the_store_and_its_changelog_hold_the_buffer(records: list[tuple[str, int]],
                                                                       commits: set[int]) -> None:
    d = _driver()
    try:
        task = d.tasks[0]
        proc = _suppress(d)
        for i, (key, ts) in enumerate(records):
            task.process(RawRecord("in", 0, i, key.encode(), b"v", ts, []))
            if i in commits:
                task.commit()
                _assert_store_is_buffer(proc)
        task.commit()
        _assert_store_is_buffer(proc)
    finally:
        d.close()


def test_a_table_read_through_the_suppressed_buffer_sees_it_before_the_commit() -> None:
    """A value getter of the suppressed table reads the buffer, not the store, which lags
    it until the commit (Kafka's ``priorValueForBuffered``)."""
    from speed_layer.processor.builtin.suppress import buffered_prior
    from speed_layer.windows import Window, Windowed

    d = _driver()
    try:
        task = d.tasks[0]
        task.process(RawRecord("in", 0, 0, b"a", b"v", 5, []))
        for store in task.stores.values():  # the count's cache reaches the buffer (a commit's
            store.flush()                   # first step); the commit's next one writes it
        proc = _suppress(d)
        key = Windowed("a", Window(0, 10))
        assert buffered_prior(proc.store, key) == (True, None)
        assert list(proc.store.all()) == []  # not written before the commit
        assert buffered_prior(proc.store, Windowed("b", Window(0, 10))) == (False, None)
    finally:
        d.close()
