"""``suppress(Suppressed.until_window_closes(...))`` over windowed aggregations on the
relational path (``batch_layer/translators/suppress.py``): the stores downstream of the
suppressed stream (which windows were emitted, with which final value) computed three
ways, relational plan, general executor and TopologyTestDriver fed in event-time order
(``three_ways`` of test_relational_translations), plus the cases refused to the general
executor. Two Spark scenarios (one topology: tumbling, session and hopping branches), each
two Spark runs: 37 s and 14 s measured at load 4.5 on 2 cores (the first one warms Spark up)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from batch_layer.compiler import compile_topology
from speed_layer import (
    BufferConfig, Materialized, SessionWindows, SlidingWindows, StreamsBuilder, Suppressed, TimeWindows,
)
from speed_layer.topology import Topology

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "test_equivalence"))
from equivalence_kit import produce  # noqa: E402
from test_relational_translations import three_ways  # noqa: E402

from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FINAL = Suppressed.until_window_closes(BufferConfig.unbounded())
TUMBLING = TimeWindows.of_size_and_grace(10, 5)
SESSIONS = SessionWindows.of_inactivity_gap_and_grace(4, 3)
HOPPING = TimeWindows.of_size_and_grace(10, 4).advance_by(5)

# (key, value, ts), listed out of order (fed in batch order: by timestamp), a null key, and
# the last records (90, 93) whose windows never close (stream time 93 < 100 + 5, 90 + 4 + 3)
EVENTS = [("a", 1, 0), ("b", 2, 1), ("a", 3, 5), ("c", 4, 9), ("a", 5, 12), ("a", 6, 7), ("b", 7, 14), (None, 8, 15),
          ("c", 9, 18), ("b", 10, 20), ("b", 11, 3), ("a", 12, 26), ("c", 13, 27), ("d", 14, 30), ("a", 15, 31),
          ("b", 16, 44), ("d", 17, 45), ("c", 18, 52), ("a", 19, 60), ("b", 20, 61), ("d", 21, 75), ("a", 22, 90),
          ("c", 23, 93)]


def _final(wk: Any, v: Any) -> tuple[str, Any]:
    return f"{wk.key}@{wk.window.start}-{wk.window.end}={v}", v


def _sum_but_13(key: Any, value: Any, agg: int) -> int:
    if value == 13:
        raise ValueError("boom")
    return agg + value


def _topology(downstream: str = "count", suppressed: Suppressed = FINAL, windows: Any = None) -> Topology:
    """``events`` counted per tumbling window (``tw``) and summed per session (``ss``),
    both suppressed until their windows close; each emitted final result counted by its
    window and value (``tw-finals``, ``ss-finals``: 1 per emitted window) and the emitted
    windows per key (``tw-closed``, after a repartition). ``downstream`` "reduce": a
    reduce over the emitted stream instead (order-sensitive). With the default arguments
    also a hopping sum whose aggregator raises on 13 (the record is dropped), suppressed,
    its ``toStream`` key-mapped to the final result (``hw-finals``)."""
    b = StreamsBuilder()
    grouped = b.stream("events").group_by_key()
    tables = {
        "tw": grouped.windowed_by(windows or TUMBLING).count(Materialized.as_("tw")),
        "ss": grouped.windowed_by(SESSIONS).reduce(lambda a, c: a + c, Materialized.as_("ss")),
    }
    if downstream == "count" and suppressed is FINAL and windows is None:
        hopping = grouped.windowed_by(HOPPING).aggregate(lambda: 0, _sum_but_13, Materialized.as_("hw"))
        hopping.suppress(FINAL).to_stream(lambda wk, v: _final(wk, v)[0]).group_by_key().count(Materialized.as_("hw-finals"))
    for name, table in tables.items():
        finals = table.suppress(suppressed).to_stream()
        if downstream == "reduce":
            finals.map(lambda wk, v: (wk.key, v)).group_by_key().reduce(lambda a, c: a * 31 + c, Materialized.as_(f"{name}-r"))
            continue
        finals.map(_final).group_by_key().count(Materialized.as_(f"{name}-finals"))
        finals.map(lambda wk, v: (wk.key, v)).group_by_key().count(Materialized.as_(f"{name}-closed"))
    return b.build()


def _emitted(rows: list[tuple[Any, ...]]) -> set[str]:
    return {r[0] for r in rows}


@pytest.mark.spark
def test_suppressed_windows_on_one_partition(spark, tmp_path: Path) -> None:
    """One task: the final result of every window whose close stream time passed, once,
    none of the windows still open at the end (tumbling [90,100), the sessions at 90, 93)."""
    res = three_ways(spark, tmp_path, _topology(), produce("events", EVENTS, 1), set())
    assert res["relational"] == res["general"] == res["driver"]
    tw, ss = _emitted(res["relational"]["tw-finals"]), _emitted(res["relational"]["ss-finals"])
    assert {"a@0-10=3", "b@0-10=2", "d@70-80=1"} <= tw and not any(k.startswith(("a@90", "c@90")) for k in tw)
    assert {"a@5-7=9", "b@1-3=13", "d@75-75=21"} <= ss and not any(k.startswith(("a@90", "c@93")) for k in ss)
    assert {(r[0], r[1]) for r in res["relational"]["tw"]} >= {("a", 90), ("c", 90)}  # open, not absent
    assert len(tw) == 17 and len(ss) == 18  # each emitted window counted once
    hw = _emitted(res["relational"]["hw-finals"])  # c@27 (13) failed: no window of its own
    assert {"a@0-10=10", "a@5-15=14", "b@0-10=13"} <= hw
    assert not any(k.startswith(("c@20", "c@25", "a@85", "a@90")) for k in hw)


@pytest.mark.spark
def test_suppressed_windows_use_each_task_stream_time(spark, tmp_path: Path) -> None:
    """Three partitions: each task's stream time closes its own windows (the
    TopologyTestDriver has one task, so only relational and general are compared). With
    these records one stream time for all tasks would emit one tumbling window and one
    session more than the tasks' own stream times do, so a replay that is not per task fails."""
    res = three_ways(spark, tmp_path, _topology(), produce("events", EVENTS, 3), set())
    assert res["relational"] == res["general"]
    one = _emitted(res["relational"]["tw-finals"])
    assert one and any(k.startswith("a@0-10=") for k in one)


def test_suppress_fallbacks() -> None:
    """Refused to the general executor (no Spark): an order-sensitive consumer, until a
    time limit, a sliding window, a suppressed table joined, a repartitioned input."""
    assert compile_topology(_topology(), views=["tw-finals", "ss-closed"]).executor == "relational"
    assert compile_topology(_topology("reduce"), views=["tw-r"]).executor == "general"
    limit = Suppressed.until_time_limit(10, BufferConfig.unbounded())
    assert compile_topology(_topology(suppressed=limit), views=["tw-finals"]).executor == "general"
    assert compile_topology(_topology(windows=SlidingWindows.of_time_difference_and_grace(10, 5)),
                            views=["tw-finals"]).executor == "general"
    b = StreamsBuilder()
    s = b.stream("events")
    final = s.group_by_key().windowed_by(TUMBLING).count().suppress(FINAL)
    s.map(lambda k, v: (k, v)).to_table().join(final, lambda a, c: c, materialized=Materialized.as_("j"))
    assert compile_topology(b.build(), views=["j"]).executor == "general"
    b = StreamsBuilder()
    (b.stream("events").group_by(lambda k, v: k).windowed_by(TUMBLING).count().suppress(FINAL).to_stream()
     .map(lambda wk, v: (wk.key, v)).group_by_key().count(Materialized.as_("n")))
    assert compile_topology(b.build(), views=["n"]).executor == "general"
