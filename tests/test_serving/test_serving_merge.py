"""ViewSpec, catalogue, merge rules and batch/speed agreement."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from serving.errors import CatalogueError
from serving.views import (
    ViewSpec,
    agreement,
    catalogue_path,
    load_catalogue,
    merge_view,
    save_catalogue,
    values_equal,
)
from serving_testkit import HOUR, MIN, T0, frame


def rows_of(df: pd.DataFrame) -> list[tuple]:
    return [
        (r.key, None if pd.isna(r.window_start) else int(r.window_start),
         None if pd.isna(r.window_end) else int(r.window_end), json.loads(r.value), r.source)
        for r in df.itertuples(index=False)
    ]


# -- ViewSpec / catalogue --------------------------------------------------------------------------
def test_spec_validation() -> None:
    assert ViewSpec.tumbling("t", HOUR).advance_ms == HOUR
    assert ViewSpec(name="t", windowed=True, window_kind="tumbling", size_ms=HOUR).advance_ms == HOUR
    with pytest.raises(ValidationError):
        ViewSpec(name="h", windowed=True, window_kind="hopping", size_ms=HOUR)  # no advance
    with pytest.raises(ValidationError):
        ViewSpec.hopping("h", HOUR, 2 * HOUR)  # advance > size
    with pytest.raises(ValidationError):
        ViewSpec(name="s", windowed=True, window_kind="session")  # no gap
    with pytest.raises(ValidationError):
        ViewSpec(name="x", windowed=True)  # windowed without a kind
    with pytest.raises(ValidationError):
        ViewSpec(name="x", size_ms=5)  # table with a size
    spec = ViewSpec.session("s", 5 * MIN)
    with pytest.raises(ValidationError):
        spec.gap_ms = 1  # type: ignore[misc]  # frozen


def test_closure_semantics() -> None:
    t = ViewSpec.tumbling("t", HOUR, grace_ms=10 * MIN)
    end = T0 + HOUR
    assert not t.is_closed(end, end + 10 * MIN - 1)
    assert t.is_closed(end, end + 10 * MIN)  # end + grace <= W
    s = ViewSpec.session("s", gap_ms=30 * MIN, grace_ms=5 * MIN)
    assert not s.is_closed(end, end + 35 * MIN)  # stream time must pass end + gap + grace
    assert s.is_closed(end, end + 35 * MIN + 1)
    assert not ViewSpec.table("k").is_closed(0, 10**15)
    assert not t.is_closed(end, None)


def test_catalogue_roundtrip(tmp_path: Path) -> None:
    specs = [
        ViewSpec.tumbling("t", HOUR, grace_ms=MIN),
        ViewSpec.hopping("h", HOUR, 15 * MIN),
        ViewSpec.session("s", 30 * MIN, grace_ms=MIN),
        ViewSpec.table("k"),
    ]
    assert load_catalogue(tmp_path) == {}
    path = save_catalogue(tmp_path, specs)
    assert path == catalogue_path(tmp_path) == tmp_path / "serving" / "_views.json"
    doc = json.loads(path.read_text())
    # contract shape: every window field an int, 0 when it does not apply
    assert doc["t"] == {"windowed": True, "window": {"kind": "tumbling", "size_ms": HOUR,
                        "advance_ms": HOUR, "grace_ms": MIN, "gap_ms": 0}}
    assert doc["s"]["window"] == {"kind": "session", "size_ms": 0, "advance_ms": 0,
                                  "grace_ms": MIN, "gap_ms": 30 * MIN}
    assert doc["k"] == {"windowed": False, "window": None}
    assert load_catalogue(tmp_path) == {s.name: s for s in specs}


def test_catalogue_errors(tmp_path: Path) -> None:
    path = catalogue_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(CatalogueError, match="not valid JSON"):
        load_catalogue(tmp_path)
    path.write_text(json.dumps({"v": {"windowed": True, "window": {"kind": "weekly"}}}))
    with pytest.raises(CatalogueError, match="'v'"):
        load_catalogue(tmp_path)


# -- merge --------------------------------------------------------------------------------------
TUMB = ViewSpec.tumbling("t", HOUR, grace_ms=10 * MIN)
W = T0 + 5 * HOUR


def test_merge_tumbling_closed_from_batch_open_from_speed() -> None:
    batch = frame([
        ("a", T0 + 1 * HOUR, T0 + 2 * HOUR, {"c": 9}, 0),  # closed, batch only -> batch
        ("a", T0 + 3 * HOUR, T0 + 4 * HOUR, {"c": 5}, 0),  # closed, both -> batch
        ("a", T0 + 4 * HOUR, T0 + 5 * HOUR, {"c": 2}, 0),  # open (5h + 10m > W), both -> speed
        ("b", T0 + 4 * HOUR, T0 + 5 * HOUR, {"c": 1}, 0),  # open, batch only -> batch
    ])
    speed = frame([
        ("a", T0 + 0 * HOUR, T0 + 1 * HOUR, {"c": 4}, 0),  # closed, speed only -> dropped
        ("a", T0 + 3 * HOUR, T0 + 4 * HOUR, {"c": 4}, 0),  # closed (speed dropped a late record)
        ("a", T0 + 4 * HOUR, T0 + 5 * HOUR, {"c": 3}, 0),
        ("a", T0 + 5 * HOUR, T0 + 6 * HOUR, {"c": 1}, 0),  # open, speed only -> speed
    ])
    out = merge_view(TUMB, batch, speed, W)
    assert list(out.columns) == ["key", "window_start", "window_end", "value", "timestamp", "source"]
    assert rows_of(out) == [
        ("a", T0 + 1 * HOUR, T0 + 2 * HOUR, {"c": 9}, "batch"),
        ("a", T0 + 3 * HOUR, T0 + 4 * HOUR, {"c": 5}, "batch"),
        ("a", T0 + 4 * HOUR, T0 + 5 * HOUR, {"c": 3}, "speed"),
        ("a", T0 + 5 * HOUR, T0 + 6 * HOUR, {"c": 1}, "speed"),
        ("b", T0 + 4 * HOUR, T0 + 5 * HOUR, {"c": 1}, "batch"),
    ]


def test_merge_tumbling_grace_boundary() -> None:
    batch = frame([("a", T0, T0 + HOUR, {"c": 1}, 0)])
    speed = frame([("a", T0, T0 + HOUR, {"c": 2}, 0)])
    at_close = T0 + HOUR + 10 * MIN
    assert rows_of(merge_view(TUMB, batch, speed, at_close))[0][-1] == "batch"
    assert rows_of(merge_view(TUMB, batch, speed, at_close - 1))[0][-1] == "speed"
    # no batch yet: nothing closed, speed wins
    assert rows_of(merge_view(TUMB, batch, speed, None))[0][-1] == "speed"


def test_merge_hopping() -> None:
    spec = ViewSpec.hopping("h", 2 * HOUR, HOUR)
    batch = frame([("a", T0 + 2 * HOUR, T0 + 4 * HOUR, 10, 0), ("a", T0 + 3 * HOUR, T0 + 5 * HOUR, 20, 0)])
    speed = frame([("a", T0 + 2 * HOUR, T0 + 4 * HOUR, 11, 0), ("a", T0 + 3 * HOUR, T0 + 5 * HOUR, 21, 0)])
    assert [r[-2:] for r in rows_of(merge_view(spec, batch, speed, T0 + 4 * HOUR))] == [
        (10, "batch"), (21, "speed")]


SESS = ViewSpec.session("s", gap_ms=30 * MIN)


def test_merge_sessions() -> None:
    batch = frame([
        ("a", T0 + 1 * HOUR, T0 + 2 * HOUR, {"n": 3}, 0),  # closed, identical speed -> batch
        ("a", T0 + 3 * HOUR, T0 + 4 * HOUR, {"n": 4}, 0),  # closed: supersedes overlapping speed
        ("b", T0 + 4 * HOUR + 20 * MIN, T0 + 4 * HOUR + 40 * MIN, {"n": 2}, 0),  # open, overlapped
        ("c", T0 + 4 * HOUR + 45 * MIN, T0 + 4 * HOUR + 45 * MIN, {"n": 1}, 0),  # open, alone
        ("d", T0 + 4 * HOUR, T0 + 4 * HOUR + 30 * MIN, {"n": 1}, 0),  # end + gap == W: open
        ("e", T0 + 4 * HOUR, T0 + 4 * HOUR + 30 * MIN - 1, {"n": 1}, 0),  # closed
    ])
    speed = frame([
        ("a", T0 + 1 * HOUR, T0 + 2 * HOUR, {"n": 2}, 0),
        ("a", T0 + 3 * HOUR + 30 * MIN, T0 + 4 * HOUR + 40 * MIN, {"n": 6}, 0),  # open, overlaps closed
        ("a", T0 + 4 * HOUR + 50 * MIN, T0 + 5 * HOUR, {"n": 2}, 0),  # open, new
        ("a", T0 + 0 * HOUR, T0 + 0 * HOUR, {"n": 1}, 0),  # closed, speed only -> dropped
        ("b", T0 + 4 * HOUR + 20 * MIN, T0 + 4 * HOUR + 50 * MIN, {"n": 3}, 0),
        ("d", T0 + 4 * HOUR, T0 + 4 * HOUR + 30 * MIN, {"n": 2}, 0),
        ("e", T0 + 4 * HOUR, T0 + 4 * HOUR + 30 * MIN - 1, {"n": 2}, 0),
    ])
    out = merge_view(SESS, batch, speed, W)
    assert rows_of(out) == [
        ("a", T0 + 1 * HOUR, T0 + 2 * HOUR, {"n": 3}, "batch"),
        ("a", T0 + 3 * HOUR, T0 + 4 * HOUR, {"n": 4}, "batch"),
        ("a", T0 + 4 * HOUR + 50 * MIN, T0 + 5 * HOUR, {"n": 2}, "speed"),
        ("b", T0 + 4 * HOUR + 20 * MIN, T0 + 4 * HOUR + 50 * MIN, {"n": 3}, "speed"),
        ("c", T0 + 4 * HOUR + 45 * MIN, T0 + 4 * HOUR + 45 * MIN, {"n": 1}, "batch"),
        ("d", T0 + 4 * HOUR, T0 + 4 * HOUR + 30 * MIN, {"n": 2}, "speed"),
        ("e", T0 + 4 * HOUR, T0 + 4 * HOUR + 30 * MIN - 1, {"n": 1}, "batch"),
    ]


TABLE = ViewSpec.table("k")


def test_merge_table() -> None:
    batch = frame([
        ("a", None, None, "a-batch", W - HOUR),
        ("b", None, None, "b-batch", W - HOUR),
        ("e", None, None, "e-batch", W - HOUR),
        ("f", None, None, "f-batch", W - HOUR),
    ])
    speed = frame([
        ("a", None, None, "a-speed", W - HOUR),  # not newer -> batch
        ("b", None, None, "b-speed", W + 1),  # newer -> speed
        ("c", None, None, "c-speed", W + HOUR),  # speed only, newer -> speed
        ("d", None, None, "d-speed", W - 1),  # speed only, not newer -> dropped
        ("f", None, None, "f-speed", W),  # == watermark: not newer -> batch
    ])
    out = merge_view(TABLE, batch, speed, W)
    assert out["window_start"].isna().all() and str(out["window_start"].dtype) == "Int64"
    assert rows_of(out) == [
        ("a", None, None, "a-batch", "batch"),
        ("b", None, None, "b-speed", "speed"),
        ("c", None, None, "c-speed", "speed"),
        ("e", None, None, "e-batch", "batch"),
        ("f", None, None, "f-batch", "batch"),
    ]
    # without a batch watermark every speed row wins
    assert [r[-1] for r in rows_of(merge_view(TABLE, batch, speed, None))] == [
        "speed", "speed", "speed", "speed", "batch", "speed"]


def test_merge_empty_and_missing_inputs() -> None:
    out = merge_view(TUMB, None, pd.DataFrame(), W)
    assert out.empty and list(out.columns)[-1] == "source"
    out = merge_view(TABLE, frame([("a", None, None, 1, 0)]), None, W)
    assert rows_of(out) == [("a", None, None, 1, "batch")]
    with pytest.raises(ValueError, match="timestamp"):
        merge_view(TABLE, pd.DataFrame({"key": ["a"], "value": ["1"]}), None, W)


# -- agreement ----------------------------------------------------------------------------------
def test_values_equal() -> None:
    assert values_equal({"a": 1.0, "b": [1, 2.0]}, {"a": 1.0 + 1e-12, "b": [1.0, 2]})
    assert not values_equal({"a": 1.0}, {"a": 1.0 + 1e-6})
    assert not values_equal({"a": 1}, {"a": 1, "b": None})
    assert not values_equal(True, 1)
    assert values_equal(None, None) and not values_equal(None, 0)


def test_agreement_tumbling() -> None:
    batch = frame([
        ("a", T0 + 1 * HOUR, T0 + 2 * HOUR, {"c": 1, "m": 0.1 + 0.2}, 0),  # equal within tol
        ("a", T0 + 2 * HOUR, T0 + 3 * HOUR, {"c": 5}, 0),  # value differs
        ("b", T0 + 2 * HOUR, T0 + 3 * HOUR, {"c": 5}, 0),  # missing in speed
        ("a", T0 + 4 * HOUR, T0 + 5 * HOUR, {"c": 1}, 0),  # open: not compared
    ])
    speed = frame([
        ("a", T0 + 1 * HOUR, T0 + 2 * HOUR, {"c": 1, "m": 0.3}, 0),
        ("a", T0 + 2 * HOUR, T0 + 3 * HOUR, {"c": 4}, 0),
        ("c", T0 + 2 * HOUR, T0 + 3 * HOUR, {"c": 1}, 0),  # missing in batch
        ("a", T0 + 4 * HOUR, T0 + 5 * HOUR, {"c": 2}, 0),
    ])
    rep = agreement(batch, speed, TUMB, W)
    assert (rep.view, rep.compared, rep.equal) == ("t", 4, 1)
    assert rep.ratio == pytest.approx(0.25)
    reasons = {(d["key"], d["window_start"]): d["reason"] for d in rep.differences}
    assert reasons == {
        ("a", T0 + 2 * HOUR): "value",
        ("b", T0 + 2 * HOUR): "missing_in_speed",
        ("c", T0 + 2 * HOUR): "missing_in_batch",
    }
    assert rep.unexplained == 3  # nothing counted names them
    diff = next(d for d in rep.differences if d["reason"] == "value")
    assert diff["batch"] == {"c": 5} and diff["speed"] == {"c": 4} and diff["window_end"] == T0 + 3 * HOUR
    assert "1/4 agree" in rep.summary()

    excl = agreement(batch, speed, TUMB, W, exclude={("a", T0 + 2 * HOUR)}, max_differences=1)
    assert (excl.compared, excl.equal, len(excl.differences)) == (3, 1, 1)
    empty = agreement(None, None, TUMB, W)
    assert (empty.compared, empty.ratio) == (0, 1.0)


def test_agreement_sessions_and_tables() -> None:
    batch = frame([("a", T0, T0 + HOUR, {"n": 2}, 0)])
    speed = frame([("a", T0, T0 + HOUR - MIN, {"n": 2}, 0)])
    rep = agreement(batch, speed, SESS, W)
    assert rep.compared == 1 and rep.differences[0]["reason"] == "window_end"

    batch = frame([("a", None, None, 1, W - 1), ("b", None, None, 2, W - 1), ("c", None, None, 3, W - 1)])
    speed = frame([("a", None, None, 1.0, W - 1), ("b", None, None, 5, W + 1), ("c", None, None, 4, W)])
    rep = agreement(batch, speed, TABLE, W)  # b is newer in speed: not compared
    assert (rep.compared, rep.equal) == (2, 1)
    assert rep.differences == [{"key": "c", "window_start": None, "window_end": None,
                                "batch": 3, "speed": 4, "reason": "value", "explained": False}]
    assert rep.unexplained == 1  # a table row: no time range names it
    assert agreement(batch, speed, TABLE, W, exclude={("c", None)}).ratio == 1.0


def test_agreement_names_differences_by_the_results_an_expired_join_lost() -> None:
    # issue 42: a stream-stream join counted records whose results were lost to expired
    # window records (KafkaStreams.expired_join_ranges: the lost results' timestamps); a
    # window overlapping such a range is explained, any other difference is unexplained
    batch = frame([
        ("p1", T0 + 1 * HOUR, T0 + 2 * HOUR, {"c": 1}, 0),  # missing in speed: a lost result at 1:10
        ("p2", T0 + 2 * HOUR, T0 + 3 * HOUR, {"c": 2}, 0),  # one fewer in speed, nothing lost then
        ("p3", T0, T0 + HOUR, {"c": 1}, 0),
    ])
    speed = frame([
        ("p2", T0 + 2 * HOUR, T0 + 3 * HOUR, {"c": 1}, 0),
        ("p3", T0, T0 + HOUR, {"c": 1}, 0),
    ])
    lost = [(T0 + HOUR + 10 * MIN, T0 + HOUR + 40 * MIN)]
    rep = agreement(batch, speed, TUMB, W, explained=lost)
    assert (rep.compared, rep.equal, rep.unexplained) == (3, 1, 1)
    named = {(d["key"], d["explained"]) for d in rep.differences}
    assert named == {("p1", True), ("p2", False)}
    assert agreement(batch, speed, TUMB, W).unexplained == 2
    # a time window ends before its end (exclusive): a range at 2:00 names p2's window only
    rep = agreement(batch, speed, TUMB, W, explained=[(T0 + 2 * HOUR, T0 + 2 * HOUR)])
    assert {d["key"] for d in rep.differences if d["explained"]} == {"p2"} and rep.unexplained == 1
    assert agreement(batch, speed, TUMB, W, explained=[(T0 + 3 * HOUR + 1, T0 + 4 * HOUR)]).unexplained == 2
