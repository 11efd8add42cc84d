"""The tie-break of the fused aggregation pass (``ExecContext.sorted_folds``): a view fed by
two branches of ONE stream, merged again, gets two records per input record with the same
order key ``(ts, partition, offset, topic, seq)``. The speed layer hands them to the
aggregation in the order its processor graph forwards them (depth first, a node's
children in the order they were added); the batch layer's fold keeps that order through
the ``monotonically_increasing_id`` (``mid``) taken after the pass. An aggregator that
appends to a list sees the difference, so the relational plan is compared with the
``TopologyTestDriver`` fed the same records, with the branches added in either order and
merged in either order, over tumbling windows (a fold with blocks), sessions and a plain
aggregation (folds without blocks), on one and three partitions. Each scenario also
checks that some window holds both records of one input record (the tie happened).
About 30 s with Spark."""
from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from batch_layer.compiler import compile_topology
from batch_layer.general import full_history, store_rows
from speed_layer import Materialized, SessionWindows, StreamsBuilder, TimeWindows
from speed_layer.testing import TopologyTestDriver
from speed_layer.topology import Topology

sys.path.insert(0, str(Path(__file__).parents[1] / "test_equivalence"))
from equivalence_kit import batch_order, produce, write_raw  # noqa: E402

pytestmark = pytest.mark.spark
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
CONFIG = {"application.id": "tie-break", "processing.exception.handler": "log_and_continue"}
HOUR = 3_600_000
WINDOWS = {
    "tumbling": TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(0)),
    "session": SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=30), timedelta(0)),
    "plain": None,
}


def _append(key: Any, value: dict[str, Any], agg: list[str]) -> list[str]:
    return agg + [f"{value['tag']}{value['x']}"]


def _tie_topology(windows: str, first: str, merged_first: str) -> Topology:
    """``events`` split into branches ``a`` and ``b`` (``first`` added to the graph first),
    merged (``merged_first`` as the merge's receiver), then an order-sensitive aggregation
    into store ``tags``."""
    b = StreamsBuilder()
    events = b.stream("events")
    branches = {}
    for tag in (first, "b" if first == "a" else "a"):
        branches[tag] = events.map_values(lambda v, tag=tag: {**v, "tag": tag})
    other = "b" if merged_first == "a" else "a"
    grouped = branches[merged_first].merge(branches[other]).group_by_key()
    w = WINDOWS[windows]
    store = Materialized.as_("tags")
    if w is None:
        grouped.aggregate(list, _append, store)
    elif isinstance(w, SessionWindows):
        grouped.windowed_by(w).aggregate(list, _append, lambda k, x, y: x + y, store)
    else:
        grouped.windowed_by(w).aggregate(list, _append, store)
    return b.build()


EVENTS = [("k1", {"x": i}, 1_000 + (i // 2) * 600_000) for i in range(8)] + \
         [("k2", {"x": 10 + i}, 5_000 + i * 1_200_000) for i in range(5)] + [("k1", {"x": 99}, 1_000)]


@pytest.mark.parametrize("windows", ["tumbling", "session", "plain"])
@pytest.mark.parametrize("first,merged_first", [("a", "a"), ("a", "b"), ("b", "a"), ("b", "b")])
@pytest.mark.parametrize("partitions", [1, 3])
def test_merged_branches_of_one_stream_keep_the_speed_layers_order(spark: Any, tmp_path: Path, windows: str, first: str,
                                                                   merged_first: str, partitions: int) -> None:
    topology = _tie_topology(windows, first, merged_first)
    raws = produce("events", EVENTS, partitions)
    write_raw(tmp_path, raws)
    plan = compile_topology(topology, config=CONFIG)
    assert plan.executor == "relational", plan.explain()
    views = plan.execute(spark, tmp_path)
    try:
        relational = sorted(tuple(r) for r in views["tags"].collect())
    finally:
        views.release()
    with TopologyTestDriver(full_history(topology), CONFIG) as d:
        for r in batch_order(raws, set()):
            d.pipe_raw(r.topic, r.key, r.value, r.timestamp)
        driver = sorted(store_rows(d.get_state_store("tags")))
    assert relational == driver
    # the tie happened: some window holds both branches' records of one input record, in
    # the speed layer's order (the branch added first forwards first)
    second = "b" if first == "a" else "a"
    assert any(f'"{first}99","{second}99"' in row[3] for row in driver), driver
