"""Run the batch layer: compile, execute, write the views and the batch watermark.

Outputs (docs/contracts.md):

* ``<lake>/views/<store>``: Delta (overwritten by Spark ``format("delta")``), one row per
  table key (and window): ``key string, window_start long, window_end long, value string
  (JSON), timestamp long`` (ms; window bounds null when not windowed).
* ``<lake>/views/_batch.json``: ``{"watermark_ms": int, "finished_at": iso8601, "views":
  {store: {"rows": int}}, "dropped": int}``; the watermark is the largest (extracted) record
  timestamp of the stream sources' input, ``-1`` when they had no record.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speed_layer.config import StreamsConfig
from speed_layer.topology import Topology

from .compiler import BatchOptions, compile_topology

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BatchResult", "run_batch", "read_view", "view_path"]


@dataclass(frozen=True)
class BatchResult:
    """What :func:`run_batch` did.

    Attributes:
        views: store -> rows written to ``<lake>/views/<store>``.
        watermark_ms: largest extracted record timestamp of the stream sources (ms), -1 if
            there was none.
        seconds: wall time of the run.
        dropped: distinct input records dropped because their deserialization, timestamp
            extraction or a user function failed (the speed layer's dead letters).
        dropped_by_node: the same per node.
        join_strategies: join node -> "broadcast" or "shuffle".
    """

    views: dict[str, int]
    watermark_ms: int
    seconds: float
    dropped: int
    dropped_by_node: dict[str, int] = field(default_factory=dict)
    join_strategies: dict[str, str] = field(default_factory=dict)


def view_path(lake: str | Path, store: str) -> Path:
    """``<lake>/views/<store>``."""
    return Path(lake) / "views" / store


def run_batch(
    spark: "SparkSession",
    topology: Topology,
    lake: str | Path,
    *,
    views: list[str] | None = None,
    config: StreamsConfig | dict[str, Any] | None = None,
    options: BatchOptions | None = None,
    input_frames: dict[str, "DataFrame"] | None = None,
) -> BatchResult:
    """Recompute ``views`` (default: every store of ``topology.store_writers``) from
    ``<lake>/raw/<topic>`` and write them with ``_batch.json``.

    Args:
        spark: the session (``batch_layer.spark.get_spark()``).
        topology: the Topology the speed layer runs.
        lake: the lake root.
        views, config, options: see :func:`batch_layer.compiler.compile_topology`.
        input_frames: raw input DataFrames by topic instead of the lake's Delta tables.

    Returns:
        :class:`BatchResult`.

    Raises:
        BatchCompileError: the topology (upstream of a requested view) cannot be translated.
        BatchLayerError: a raw input table is missing.
    """
    from .delta.io import write_table

    started = time.monotonic()
    lake = Path(lake)
    plan = compile_topology(topology, views=views, config=config, options=options)
    frames = plan.execute(spark, lake, input_frames=input_frames)
    rows: dict[str, int] = {}
    try:
        for store, df in frames.items():
            path = view_path(lake, store)
            write_table(df, path, mode="overwrite")
            rows[store] = _rows_of(spark, path)
        watermark = frames.watermark_ms()
        dropped, by_node, joins = frames.dropped(), frames.dropped_by_node(), frames.join_strategies
    finally:
        frames.release()
    doc = {
        "watermark_ms": watermark,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "views": {s: {"rows": n} for s, n in rows.items()},
        "dropped": dropped,
    }
    _write_json(lake / "views" / "_batch.json", doc)
    return BatchResult(rows, watermark, time.monotonic() - started, dropped, by_node, joins)


def _rows_of(spark: "SparkSession", path: Path) -> int:
    """Rows of the Delta table at ``path`` from its file statistics (no scan)."""
    try:
        from deltalake import DeltaTable

        actions = DeltaTable(str(path)).get_add_actions(flatten=True)
        import pyarrow as pa

        col = pa.table(actions).column("num_records")
        if col.null_count == 0:
            return int(sum(col.to_pylist()))
    except Exception:  # noqa: BLE001 - fall back to counting with Spark
        pass
    return spark.read.format("delta").load(str(path)).count()


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_view(lake: str | Path, store: str) -> "pd.DataFrame":
    """The batch view ``<lake>/views/<store>`` as pandas (delta-rs, no JVM), sorted by
    ``key, window_start, window_end``; integer columns as nullable ``Int64``.

    Raises:
        deltalake.exceptions.TableNotFoundError: if the view was never written.
    """
    import pandas as pd
    from deltalake import DeltaTable

    table = DeltaTable(str(view_path(lake, store))).to_pyarrow_table()
    df = table.to_pandas()
    for c in ("window_start", "window_end", "timestamp"):
        df[c] = df[c].astype(pd.Int64Dtype())
    return df.sort_values(["key", "window_start", "window_end"], kind="stable", ignore_index=True)
