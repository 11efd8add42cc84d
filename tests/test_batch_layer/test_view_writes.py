"""The batch run's view writes (``BatchOptions.write_concurrency``).

Several views written by concurrent Spark jobs, among them views of one fused pass (which
share its shuffle and persisted result), give the rows the speed layer gives. (Every other
batch test runs with the default concurrency too; 1 is the plain loop.)
"""
from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from batch_layer.compiler import BatchOptions
from batch_layer.run import run_batch
from speed_layer import Consumed, Materialized, Produced, Serdes, StreamsBuilder, TimeWindows

sys.path.insert(0, str(Path(__file__).parents[1] / "test_equivalence"))
from equivalence_kit import assert_views_equal, batch_views, produce, speed_views, write_raw  # noqa: E402

STR, JS = Serdes.String(), Serdes.JSON()
T0 = 1_700_000_000_000
VIEWS = {"counts": False, "last": False, "hourly": True}  # output topic = store: windowed


def build() -> Any:
    """A KTable view, a stream-table join, and three aggregations of one stream (one fused
    pass in the batch layer); each view also an output topic of the same name."""
    b = StreamsBuilder()
    prices = b.table("prices", Consumed(key_serde=STR, value_serde=JS), Materialized.as_("prices"))
    prices.to_stream().to("prices-out", Produced(key_serde=STR, value_serde=JS))
    orders = b.stream("orders", Consumed(key_serde=STR, value_serde=JS)).left_join(
        prices, lambda o, p: {**o, "price": None if p is None else p["price"]})
    out = Produced(key_serde=STR, value_serde=JS)
    orders.group_by_key().count(Materialized.as_("counts")).to_stream().to("counts", out)
    orders.group_by_key().reduce(lambda a, b: b, Materialized.as_("last")).to_stream().to("last", out)
    (orders.group_by(lambda k, o: o["item"]).windowed_by(TimeWindows.of_size_with_no_grace(timedelta(hours=1)))
     .count(Materialized.as_("hourly"))
     .to_stream().to("hourly", Produced(key_serde=Serdes.WindowedJSON(STR), value_serde=JS)))
    return b.build()


@pytest.mark.spark
def test_views_written_by_concurrent_jobs_are_the_speed_layers(spark: Any, tmp_path: Path) -> None:
    orders = [(f"c{i % 7}", {"item": f"i{i % 3}", "n": i}, T0 + i * 600_000) for i in range(60)]
    prices = [(f"c{i}", {"price": i * 10}, T0 + i * 1_000_000) for i in range(5)]
    raws = produce("orders", orders, 3) + produce("prices", prices, 2)
    write_raw(tmp_path, raws)
    result = run_batch(spark, build(), tmp_path, views=[*VIEWS, "prices"], options=BatchOptions(write_concurrency=4))
    speed, _ = speed_views(build(), raws, {"prices"}, {**VIEWS, "prices-out": False})
    speed["prices"] = speed.pop("prices-out")
    assert_views_equal(batch_views(tmp_path, [*VIEWS, "prices"]), speed)
    assert result.views == {store: len(rows) for store, rows in speed.items()}
    assert list(result.views) == [*VIEWS, "prices"]  # reported in the requested order


def test_write_concurrency_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="write_concurrency must be >= 1, got 0"):
        BatchOptions(write_concurrency=0)
