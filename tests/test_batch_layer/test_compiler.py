"""The Topology -> PySpark compiler at compile time (no Spark needed)."""
from __future__ import annotations

import random
import subprocess
import sys
from datetime import timedelta

import pytest

from batch_layer.compiler import BatchCompileError, BatchOptions, compile_topology
from batch_layer.translators._agg_prep import block_window_starts, window_starts_range
from batch_layer.translators.aggregate import block_ms
from pipelines.examples.flights.topology import VIEW_NAMES as VIEWS, build_topology
from speed_layer import JoinWindows, Materialized, SlidingWindows, StreamsBuilder, TimeWindows
from speed_layer.processor.api import Processor


class _Echo(Processor):
    def init(self, context):  # noqa: ANN001, D102
        self.context = context

    def process(self, record):  # noqa: ANN001, D102
        self.context.forward(record)


def _two_views_one_processor():
    """``plain`` counts the source directly; ``processed`` goes through a user Processor."""
    b = StreamsBuilder()
    s = b.stream("input")
    s.group_by_key().count(Materialized.as_("plain"))
    s.process(_Echo, named="my-processor").group_by_key().count(Materialized.as_("processed"))
    return b.build()


def test_flagship_compiles_every_view_without_spark() -> None:
    plan = compile_topology(build_topology())
    topo = plan.topology
    assert set(VIEWS) <= set(plan.views) == set(topo.store_writers)
    assert sorted(plan.source_topics) == ["airlines", "airports", "flights", "planes"]
    # creation order, parents first
    pos = {n: i for i, n in enumerate(plan.nodes)}
    for n in plan.nodes:
        assert all(pos[d] < pos[n] for d in plan.deps[n])
    # the enriched stream feeds three branches (the shared by-origin repartition, the
    # per-dest view, the duty sessions): computed once, shared; by-origin feeds two views
    enriched = max(plan.consumers, key=lambda k: plan.consumers[k])
    assert plan.consumers[enriched] == 3
    assert sorted(plan.consumers.values(), reverse=True)[:2] == [3, 2]
    assert "AggregateOp" in plan.explain()


def test_only_nodes_upstream_of_the_requested_views() -> None:
    plan = compile_topology(build_topology(), views=["departures_hourly"])
    assert plan.views == ("departures_hourly",)
    writers = build_topology().store_writers
    for other in ("same_tz_hourly", "seats_by_dest_daily", "plane_duty_sessions"):
        assert writers[other] not in plan.nodes
    assert writers["departures_hourly"] in plan.nodes


def test_unknown_view_is_a_compile_error() -> None:
    with pytest.raises(BatchCompileError, match="no view 'nope'.*departures_hourly") as err:
        compile_topology(build_topology(), views=["nope"])
    assert err.value.node is None


def test_user_processor_upstream_of_a_view_runs_on_the_general_executor() -> None:
    topo = _two_views_one_processor()
    plan = compile_topology(topo)
    assert plan.executor == "general" and set(plan.views) == {"plain", "processed"}
    assert "general" in plan.explain() and "sub-topology 0" in plan.explain()
    # a view that does not depend on it compiles relationally
    plan = compile_topology(topo, views=["plain"])
    assert plan.executor == "relational" and "my-processor" not in plan.nodes


def test_stream_stream_join_is_relational_unless_a_late_record_order_matters() -> None:
    b = StreamsBuilder()
    left, right = b.stream("left"), b.stream("right")
    left.join(right, lambda a, c: (a, c), JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=5))) \
        .group_by_key().count(Materialized.as_("joined"))
    plan = compile_topology(b.build())
    assert plan.executor == "relational" and plan.views == ("joined",)
    assert sorted(plan.source_topics) == ["left", "right"]
    # a left join's unmatched records come after younger ones: a reduce of them stays general
    b = StreamsBuilder()
    left, right = b.stream("left"), b.stream("right")
    left.left_join(right, lambda a, c: (a, c), JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=5))) \
        .group_by_key().reduce(lambda a, c: c, Materialized.as_("joined"))
    assert compile_topology(b.build()).executor == "general"


def test_sliding_windows_are_relational_unless_their_change_stream_is_read() -> None:
    b = StreamsBuilder()
    counts = b.stream("in").group_by_key().windowed_by(SlidingWindows.of_time_difference_with_no_grace(1000)) \
        .count(Materialized.as_("sliding"))
    assert compile_topology(b.build()).executor == "relational"
    counts.to_stream().map(lambda k, v: (k.key, v)).group_by_key().count(Materialized.as_("of-changes"))
    assert compile_topology(b.build(), views=["of-changes"]).executor == "general"


def test_general_executor_on_request_and_for_output_topics() -> None:
    assert compile_topology(build_topology(), options=BatchOptions(executor="general")).executor == "general"
    assert compile_topology(build_topology(), outputs=True).executor == "general"
    assert compile_topology(build_topology()).executor == "relational"


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="join_strategy"):
        BatchOptions(join_strategy="hash")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        BatchOptions(key_buckets=0)
    with pytest.raises(ValueError, match="executor must be auto or general"):
        BatchOptions(executor="fast")  # type: ignore[arg-type]


@pytest.mark.parametrize("size,advance", [(10, 10), (10, 3), (3_600_000, 3_600_000), (86_400_000, 3_600_000), (7, 1)])
def test_window_arithmetic_matches_the_speed_layer(size: int, advance: int) -> None:
    """The batch layer's window starts are ``TimeWindows.windows_for``'s, and routing a
    record to blocks of starts covers each of its windows exactly once."""
    w = TimeWindows(size, advance, 0)
    block = block_ms(w, 5 * size)
    assert block % advance == 0 and block >= size
    rnd = random.Random(size * 31 + advance)
    for ts in [0, 1, size - 1, size, size + 1] + [rnd.randrange(0, 10**9) for _ in range(300)]:
        expected = list(w.windows_for(ts))
        first, last = window_starts_range(ts, size, advance)
        assert list(range(first, last + 1, advance)) == expected
        covered = []
        for b in range(first // block, last // block + 1):
            lo, hi = b * block, (b + 1) * block
            covered += [s for s in range(max(first, lo), min(last, hi - 1) + 1, advance)]
            s0, s1 = block_window_starts(ts, size, advance, lo, hi - 1)  # the folds' per-record form
            assert (s0, s1) == (max(first, lo), min(last, hi - 1))
        assert covered == expected
        assert last // block - first // block <= 1  # at most two blocks per record


def test_import_batch_layer_starts_no_spark() -> None:
    code = ("import sys, batch_layer; assert 'pyspark' not in sys.modules; "
            "assert callable(batch_layer.compile_topology) and 'run_batch' in batch_layer.__all__")
    subprocess.run([sys.executable, "-c", code], check=True)
