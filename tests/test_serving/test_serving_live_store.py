"""The live table's RocksDB row store (serving/views/live_store.py) and LiveViews over it,
broker-free: real RocksDB, real confluent_kafka Message objects, no broker."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message

import serving.views.live_dir as live_dir
import serving.views.live_store as live_store
from serving.views.live import LiveViews
from serving.views.live_store import LiveRow, LiveRowStore
from serving.views.model import ViewSpec
from serving_testkit import HOUR, MIN, T0

pytestmark = pytest.mark.timeout(60)

HOURLY = ViewSpec.tumbling("hourly", HOUR, grace_ms=10 * MIN)


def _hour(h: int, value: str | None, key: str = "EWR") -> tuple[str, int, int, bytes | None, int]:
    return (key, T0 + h * HOUR, T0 + (h + 1) * HOUR, None if value is None else value.encode(), T0 + (h + 1) * HOUR - 1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LiveRowStore]:
    s = LiveRowStore(HOURLY, tmp_path / "hourly")
    yield s
    s.destroy()


def _windows(rows: list[LiveRow]) -> list[tuple[int | None, str]]:
    return sorted(((r.window_start - T0) // HOUR if r.window_start is not None else None, r.value) for r in rows)


def test_the_latest_value_per_window_is_kept_and_a_tombstone_deletes(store: LiveRowStore) -> None:
    store.write([_hour(0, "a"), _hour(1, "b"), _hour(0, "a2")])
    assert _windows(store.rows("EWR")) == [(0, "a2"), (1, "b")] and store.count_rows() == 2
    store.write([_hour(1, "b2"), _hour(1, None), _hour(2, None)])  # put then delete in one batch; absent
    assert _windows(store.rows("EWR")) == [(0, "a2")] and store.count_rows() == 1
    store.write([_hour(1, "b3")])
    row = next(r for r in store.rows("EWR") if r.window_start == T0 + HOUR)
    assert row == LiveRow("EWR", T0 + HOUR, T0 + 2 * HOUR, "b3", T0 + 2 * HOUR - 1) and store.count_rows() == 2


def test_keys_and_rows_keep_keys_that_start_alike_apart(store: LiveRowStore) -> None:
    keys = ["A", "AB", "B", "", "Zürich", "\ud800x"]  # a JSON key may decode to a lone surrogate
    store.write([_hour(h, f"{i}.{h}", key=k) for i, k in enumerate(keys) for h in range(3)])
    assert store.keys() == set(keys) and store.count_rows() == 18
    assert [r.value for r in store.rows("A")] == ["0.0", "0.1", "0.2"]  # window order, not AB's
    assert [r.value for r in store.rows("\ud800x")] == ["5.0", "5.1", "5.2"]
    assert store.rows("C") == [] and len(store.view_rows()) == 18
    assert {r.key for r in store.view_rows()} == set(keys)


def test_a_prune_removes_the_rows_closed_at_the_watermark_and_only_those(store: LiveRowStore) -> None:
    store.write([_hour(h, str(h), key=k) for k in ("EWR", "JFK") for h in range(6)])
    # hour h closes at end + grace = T0 + (h + 1) h + 10 min
    assert store.prune(T0 + 2 * HOUR + 10 * MIN) == 4  # hours 0, 1 of both keys
    assert _windows(store.rows("JFK")) == [(h, str(h)) for h in range(2, 6)] and store.count_rows() == 8
    assert store.prune(T0 + 2 * HOUR + 10 * MIN) == 0
    assert store.prune(T0 + 4 * HOUR + 9 * MIN) == 2  # hour 2 only: hour 3 closes a minute later
    assert store.count_rows() == 6 and store.applied_ms == T0 + 4 * HOUR + 9 * MIN
    store.write([_hour(1, "late"), _hour(2, None), _hour(3, "3b")])  # closed windows: not kept
    assert _windows(store.rows("EWR")) == [(3, "3b"), (4, "4"), (5, "5")] and store.count_rows() == 6
    with pytest.raises(ValueError, match="cannot move back"):
        store.prune(T0)


def test_a_prune_in_several_batches_keeps_the_count_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_store, "PRUNE_BATCH", 7)
    s = LiveRowStore(HOURLY, tmp_path / "s")
    try:
        s.write([_hour(h, "x", key=f"K{k}") for k in range(5) for h in range(10)])
        assert s.prune(T0 + 8 * HOUR + 10 * MIN) == 40 and s.count_rows() == 10
        assert s.keys() == {f"K{k}" for k in range(5)} and len(s.view_rows()) == 10
    finally:
        s.destroy()


def test_a_table_row_closes_at_its_latest_timestamp(tmp_path: Path) -> None:
    s = LiveRowStore(ViewSpec.table("t"), tmp_path / "t", watermark_ms=T0)
    try:
        s.write([("a", None, None, b"old", T0 - 1)])  # closed at W = T0 already
        s.write([("a", None, None, b"1", T0 + 1), ("b", None, None, b"1", T0 + 2), ("c", None, None, b"1", T0 + 3)])
        s.write([("a", None, None, b"2", T0 + 10), ("c", None, None, None, T0 + 11)])  # a moves on; c deleted
        assert s.count_rows() == 2 and s.rows("a") == [LiveRow("a", None, None, "2", T0 + 10)]
        assert s.prune(T0 + 5) == 1  # b (T0 + 2); a's entry at T0 + 1 was moved to T0 + 10
        assert s.keys() == {"a"} and s.count_rows() == 1
        assert s.prune(T0 + 10) == 1 and s.keys() == set() and s.count_rows() == 0
    finally:
        s.destroy()


def test_a_session_closes_a_gap_and_grace_after_its_end(tmp_path: Path) -> None:
    s = LiveRowStore(ViewSpec.session("s", gap_ms=5 * MIN, grace_ms=MIN), tmp_path / "s")
    try:
        s.write([("k", T0, T0 + MIN, b"1", T0 + MIN), ("k", T0 + HOUR, T0 + HOUR, b"2", T0 + HOUR)])
        assert s.prune(T0 + 7 * MIN) == 0  # closes at end + gap + grace + 1 ms
        assert s.prune(T0 + 7 * MIN + 1) == 1 and [r.value for r in s.rows("k")] == ["2"]
    finally:
        s.destroy()


def test_latest_rows_are_the_rows_of_the_latest_windows(store: LiveRowStore) -> None:
    store.write([_hour(h, f"{k}{h}", key=k) for k in ("EWR", "JFK", "LGA") for h in range(10)])
    store.write([_hour(8, None, key="JFK")])
    latest = store.latest_rows(3)
    assert sorted((r.key, (r.window_start - T0) // HOUR) for r in latest) == sorted(
        [(k, h) for k in ("EWR", "JFK", "LGA") for h in (7, 8, 9) if (k, h) != ("JFK", 8)])
    assert next(r for r in latest if r.key == "LGA" and r.window_start == T0 + 9 * HOUR).value == "LGA9"
    assert len(store.latest_rows(100)) == store.count_rows() == 29 and store.latest_rows(0) == []
    store.prune(T0 + 8 * HOUR + 10 * MIN)  # hours 0-7 closed
    assert sorted(r.value for r in store.latest_rows(5)) == ["EWR8", "EWR9", "JFK9", "LGA8", "LGA9"]


def test_a_reader_sees_each_write_batch_whole(store: LiveRowStore) -> None:
    """Readers take no lock while the writer writes: every read is one RocksDB snapshot."""
    store.write([_hour(h, "0") for h in range(24)])
    torn: list[set[str]] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            values = {r.value for r in store.rows("EWR")}
            if len(values) != 1:
                torn.append(values)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(1, 300):
        store.write([_hour(h, str(i)) for h in range(24)])
    stop.set()
    reader.join()
    assert not torn and store.count_rows() == 24


def test_destroy_removes_the_directory_and_reads_answer_nothing(tmp_path: Path) -> None:
    s = LiveRowStore(HOURLY, tmp_path / "d")
    s.write([_hour(0, "a")])
    assert (tmp_path / "d").is_dir()
    s.destroy()
    s.destroy()
    assert not (tmp_path / "d").exists() and s.rows("EWR") == [] and s.keys() == set() and s.view_rows() == []
    with pytest.raises(FileExistsError):
        LiveRowStore(HOURLY, tmp_path)


def _record(topic: str, partition: int, offset: int, h: int, value: bytes | None) -> Message:
    key = f'{{"key":"EWR","window_start":{T0 + h * HOUR},"window_end":{T0 + (h + 1) * HOUR}}}'.encode()
    return Message(topic=topic, partition=partition, offset=offset, key=key, value=value,
                   timestamp=(1, T0 + (h + 1) * HOUR - 1))


def test_live_views_over_the_store_prune_re_read_and_clean_up(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """LiveViews' own paths without a broker: records and a partition's end applied, a
    watermark taken after the prune delay, one moving back dropping the table and its store,
    close removing the temporary directory."""
    now = [0.0]
    live = LiveViews("127.0.0.1:9", lambda: {}, clock=lambda: now[0], state_dir=tmp_path)
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "live-store-test"})  # never connects
    try:
        table = live._new_table("hourly", HOURLY, None)
        table.pending = {0: 4}
        live._tables["hourly"] = table
        live._apply([_record("hourly", 0, o, h, b"%d" % h) for o, h in enumerate(range(4))]
                    + [_record("hourly", 1, 0, 9, b"bad \xff"), _record("hourly", 0, 4, 1, None)])
        state = live.state("hourly")
        assert (state.rows, state.caught_up, state.stream_time_ms, state.skipped) == (3, True, T0 + 4 * HOUR - 1, 1)
        assert sorted(r.window_start for r in live.rows("hourly", "EWR")) == [T0, T0 + 2 * HOUR, T0 + 3 * HOUR]
        assert live.keys("hourly") == {"EWR"} and len(live.view_rows("hourly")) == 3

        w = T0 + 3 * HOUR + 10 * MIN
        live._take_watermark(consumer, "hourly", table, w, now[0])
        assert live.state("hourly").rows == 3  # seen, not applied before the prune delay
        now[0] += 30.0
        live._take_watermark(consumer, "hourly", table, w, now[0])
        assert live.state("hourly").rows == 1 and table.applied_ms == w

        store_dir = table.store.path
        live._take_watermark(consumer, "hourly", table, T0, now[0])  # moved back: read the topic again
        assert "hourly" not in live._tables and not store_dir.exists() and live.rows("hourly", "EWR") == []
        live._tables["hourly"] = live._new_table("hourly", HOURLY, T0)
        assert live.state("hourly").rows == 0 and live.state("hourly").caught_up
        (work,) = tmp_path.iterdir()
    finally:
        consumer.close()
        live.close()
    assert not work.exists() and list(tmp_path.iterdir()) == []


def test_the_count_is_exact_at_a_prune_and_estimated_between(store: LiveRowStore) -> None:
    """Writes read nothing: the count is exact at each prune, plus RocksDB's estimate-num-keys
    of what the writes since added (exact for new rows and deletions, above the rows by the
    rewrites a flush has not merged yet)."""
    store.write([_hour(h, "a", key=f"K{k}") for k in range(10) for h in range(100)])
    assert store.count == store.count_rows() == 1_000
    for _ in range(20):  # rewrites, as the speed layer's cache flushes write an open window again and again
        store.write([_hour(h, "b", key=f"K{k}") for k in range(10) for h in range(90, 100)])
    assert store.count_rows() == 1_000 and store.count > 1_100  # 20 x 100 rewrites in the memtable
    store.prune(T0 + 90 * HOUR + 10 * MIN)  # hours 0-89 of the 10 keys
    assert store.count == store.count_rows() == 100
    store.write([_hour(100, "c", key=f"K{k}") for k in range(10)] + [_hour(95, None, key="K0")])
    assert store.count == store.count_rows() == 109


_CHILD = """
import sys, time
from serving.views.live import LiveViews
from serving.views.model import ViewSpec
live = LiveViews("127.0.0.1:9", lambda: {}, state_dir=sys.argv[1])
table = live._new_table("hourly", ViewSpec.tumbling("hourly", 3_600_000), None)
table.store.write([("EWR", 0, 3_600_000, b"1", 1)])
print(table.store.path, flush=True)
time.sleep(60)
"""


def _child_with_a_store(base: Path) -> tuple[subprocess.Popen[str], Path]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(base)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert child.stdout is not None
    return child, Path(child.stdout.readline().strip())


def test_a_folder_left_by_a_killed_process_is_removed_at_the_next_start(tmp_path: Path) -> None:
    """A serving process killed before its shutdown leaves its stores; the next one removes
    them when it claims its folder, and leaves those of a process still running alone."""
    killed, killed_store = _child_with_a_store(tmp_path)
    running, running_store = _child_with_a_store(tmp_path)
    try:
        killed.kill()
        killed.wait(10)
        assert killed_store.is_dir() and running_store.is_dir()
        (tmp_path / "not-a-folder").write_text("left alone")
        live = LiveViews("127.0.0.1:9", lambda: {}, state_dir=tmp_path)
        try:
            table = live._new_table("hourly", HOURLY, None)
            live._tables["hourly"] = table
            table.store.write([_hour(0, "a")])
            assert [r.value for r in live.rows("hourly", "EWR")] == ["a"]
            assert not killed_store.parent.exists() and running_store.is_dir()
            assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
                [running_store.parent.name, table.store.path.parent.name, "not-a-folder"])
        finally:
            live.close()
        assert not table.store.path.parent.exists() and running_store.is_dir()
    finally:
        running.kill()
        running.wait(10)
    live_dir.remove_stale(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["not-a-folder"]


def test_a_base_folder_that_cannot_be_written_fails_with_its_name(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="live stores' folder .*file/base"):
        live_dir.claim(tmp_path / "file" / "base")


def test_the_default_base_is_under_the_state_folder_or_the_environment_s(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    monkeypatch.delenv(live_dir.ENV, raising=False)
    monkeypatch.delenv("DUET_STATE_DIR", raising=False)
    monkeypatch.setenv("DUET_HOME", str(tmp_path / "home"))
    assert live_dir.default_base() == tmp_path / "home" / "state" / "serving-live"
    monkeypatch.setenv(live_dir.ENV, str(tmp_path / "elsewhere"))
    assert live_dir.default_base() == tmp_path / "elsewhere"
