"""Batch source, publish, and the read index over real Delta tables."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from serving.errors import BatchViewNotFoundError, ServingError, UnknownKeyError, UnknownViewError
from serving.views import (
    ViewIndex,
    ViewSpec,
    load_catalogue,
    publish,
    read_batch_info,
    read_batch_view,
    read_batch_watermark,
)
from serving_testkit import HOUR, MIN, SESSION, T0, TABLE, TUMBLING, WATERMARK, frame


def write_batch_view(lake: Path, store: str, rows: list[tuple]) -> None:
    """Write ``<lake>/views/<store>`` as the batch layer does (contract schema)."""
    schema = pa.schema([("key", pa.string()), ("window_start", pa.int64()), ("window_end", pa.int64()),
                        ("value", pa.string()), ("timestamp", pa.int64())])
    cols = list(zip(*rows)) if rows else [[] for _ in range(5)]
    table = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, schema)], schema=schema)
    write_deltalake(str(lake / "views" / store), table, mode="overwrite")


def test_read_batch_view_and_watermark(tmp_path: Path) -> None:
    write_batch_view(tmp_path, "counts", [("EWR", T0, T0 + HOUR, '{"count": 3}', T0 + 5),
                                          ("JFK", T0, T0 + HOUR, '{"count": 1}', T0 + 9)])
    write_batch_view(tmp_path, "latest", [("UA", None, None, '"United"', T0)])
    df = read_batch_view(tmp_path, "counts")
    assert list(df.columns) == ["key", "window_start", "window_end", "value", "timestamp"]
    assert df["key"].tolist() == ["EWR", "JFK"] and df["window_start"].tolist() == [T0, T0]
    assert str(df["window_start"].dtype) == "Int64" and str(df["timestamp"].dtype) == "int64"
    latest = read_batch_view(tmp_path, "latest")
    assert latest["window_start"].isna().all()
    with pytest.raises(BatchViewNotFoundError, match="nope"):
        read_batch_view(tmp_path, "nope")

    assert read_batch_watermark(tmp_path) is None and read_batch_info(tmp_path) is None
    (tmp_path / "views" / "_batch.json").write_text(json.dumps(
        {"watermark_ms": WATERMARK, "finished_at": "2013-01-01T06:00:00Z", "views": {"counts": {"rows": 2}}}))
    assert read_batch_watermark(tmp_path) == WATERMARK
    assert read_batch_info(tmp_path)["views"]["counts"]["rows"] == 2
    (tmp_path / "views" / "_batch.json").write_text("[1]")
    with pytest.raises(ServingError):
        read_batch_watermark(tmp_path)


def test_publish_writes_delta_and_catalogue(lake: Path) -> None:
    cat = load_catalogue(lake)
    assert cat == {"dep_counts": TUMBLING, "sessions": SESSION, "latest": TABLE}
    dt = DeltaTable(str(lake / "serving" / "dep_counts"))
    assert dt.version() == 0
    t = dt.to_pyarrow_table()
    assert t.schema.names == ["key", "window_start", "window_end", "value", "timestamp", "source"]
    rows = sorted(zip(t["key"].to_pylist(), t["window_start"].to_pylist(), t["source"].to_pylist()))
    assert rows == [("EWR", T0 + 3 * HOUR, "batch"), ("EWR", T0 + 4 * HOUR, "speed"),
                    ("EWR", T0 + 5 * HOUR, "speed"), ("JFK", T0 + 2 * HOUR, "batch")]

    # re-publish one view: new version, other catalogue entries kept, empty frames are fine
    extra = ViewSpec.hopping("hops", 2 * HOUR, HOUR)
    counts = publish(lake, [TUMBLING, extra], {}, {}, WATERMARK)
    assert counts == {"dep_counts": 0, "hops": 0}
    assert DeltaTable(str(lake / "serving" / "dep_counts")).version() == 1
    assert set(load_catalogue(lake)) == {"dep_counts", "sessions", "latest", "hops"}
    with pytest.raises(ValueError, match="duplicate"):
        publish(lake, [TABLE, TABLE], {}, {}, WATERMARK)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_index_queries(lake: Path) -> None:
    idx = ViewIndex(lake, refresh_interval_s=60)
    assert idx.views() == ["dep_counts", "latest", "sessions"]
    assert idx.spec("sessions") == SESSION and idx.version("dep_counts") == 0
    assert idx.row_count("dep_counts") == 4 and idx.keys("dep_counts") == ["EWR", "JFK"]
    assert idx.keys("dep_counts", limit=1, offset=1) == ["JFK"]

    rows = idx.query("dep_counts", "EWR")
    assert [r["window_start"] for r in rows] == [T0 + 3 * HOUR, T0 + 4 * HOUR, T0 + 5 * HOUR]
    assert rows[0] == {"key": "EWR", "window_start": T0 + 3 * HOUR, "window_end": T0 + 4 * HOUR,
                       "value": json.dumps({"count": 5, "mean_delay": 1.5}),
                       "timestamp": T0 + 4 * HOUR - 1, "source": "batch"}
    # [from, to] overlap on [start, end): the window ending exactly at `from` is excluded
    q = idx.query("dep_counts", "EWR", from_ms=T0 + 4 * HOUR, to_ms=T0 + 4 * HOUR)
    assert [r["window_start"] for r in q] == [T0 + 4 * HOUR]
    q = idx.query("dep_counts", "EWR", from_ms=T0 + 4 * HOUR + 1)
    assert [r["window_start"] for r in q] == [T0 + 4 * HOUR, T0 + 5 * HOUR]
    assert idx.query("dep_counts", "EWR", to_ms=T0) == []
    # sessions: inclusive end
    s = idx.query("sessions", "N14228", from_ms=T0 + 2 * HOUR)
    assert [r["window_start"] for r in s] == [T0 + HOUR, T0 + 4 * HOUR + 50 * MIN]
    # tables ignore bounds
    assert [r["source"] for r in idx.query("latest", "UA", from_ms=0, to_ms=1)] == ["speed"]

    with pytest.raises(UnknownViewError) as err:
        idx.query("nope", "EWR")
    assert "dep_counts, latest, sessions" in str(err.value)
    with pytest.raises(UnknownKeyError, match="'LGA'"):
        idx.query("dep_counts", "LGA")


def test_index_reloads_new_version(lake: Path) -> None:
    clock = FakeClock()
    idx = ViewIndex(lake, refresh_interval_s=10, clock=clock)
    assert idx.keys("dep_counts") == ["EWR", "JFK"]
    publish(lake, [TUMBLING], {"dep_counts": frame([("LGA", T0, T0 + HOUR, {"count": 1}, T0)])}, {}, WATERMARK)
    clock.now = 5  # within the interval: still the old snapshot
    assert idx.version("dep_counts") == 0 and idx.keys("dep_counts") == ["EWR", "JFK"]
    clock.now = 11
    assert idx.version("dep_counts") == 1 and idx.keys("dep_counts") == ["LGA"]
    with pytest.raises(UnknownKeyError):
        idx.query("dep_counts", "EWR")
    # unchanged views keep their snapshot object
    before = idx.snapshot("latest")
    clock.now = 30
    assert idx.refresh() is False and idx.snapshot("latest") is before
    # a new view appears after its catalogue entry
    publish(lake, [ViewSpec.table("planes")], {"planes": frame([("N1", None, None, {"seats": 2}, T0)])}, {}, None)
    assert idx.refresh(force=True) is True and "planes" in idx.views()


def test_index_concurrent_reads_during_reload(lake: Path) -> None:
    idx = ViewIndex(lake, refresh_interval_s=0)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                rows = idx.query("latest", "AA")
                assert rows and rows[0]["key"] == "AA"
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(3):
        publish(lake, [TABLE], {"latest": frame([("AA", None, None, {"v": i}, T0)])}, {}, WATERMARK)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors
    assert json.loads(idx.query("latest", "AA")[0]["value"]) == {"v": 2}


def test_index_on_empty_lake(tmp_path: Path) -> None:
    idx = ViewIndex(tmp_path / "lake")
    assert idx.views() == []
    with pytest.raises(UnknownViewError, match=r"\(none\)"):
        idx.keys("x")
