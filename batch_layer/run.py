"""Run the batch layer: compile, execute, write the views and the batch watermark.

Outputs (docs/contracts.md):

* ``<lake>/views/<store>``: Delta (overwritten by Spark ``format("delta")``), one row per
  table key (and window): ``key string, window_start long, window_end long, value string
  (JSON), timestamp long`` (ms; window bounds null when not windowed).
* ``<lake>/views/_batch.json``: ``{"watermark_ms": int, "finished_at": iso8601, "views":
  {store: {"rows": int}}, "dropped": int}``; the watermark is the largest (extracted) record
  timestamp of the stream sources' input, ``-1`` when they had no record.

The lake is a local path or a URI (``file:///data/lake``, ``s3a://bucket/lake``,
``hdfs://namenode:8020/lake``; docs/cluster.md): Spark reads and writes the tables through
its Hadoop file systems, ``_batch.json`` is written with pyarrow's file systems.
"""
from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speed_layer.config import StreamsConfig
from speed_layer.topology import Topology

from .compiler import BatchOptions, compile_topology
from .delta.io import lake_location, local_path
from .delta.layout import LakeLayout
from .delta.storage import delta_uri, is_object_store, spark_uri, storage_options, write_text

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BatchResult", "run_batch", "read_view", "view_path"]

log = logging.getLogger(__name__)


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


def view_path(lake: str | Path, store: str) -> Path | str:
    """``<lake>/views/<store>``: a ``Path`` for a local lake, a ``str`` for a lake URI."""
    return LakeLayout(lake).batch_view(store)


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
        lake: the lake root: a local path, or a URI with an authority (``s3a://bucket/lake``,
            ``hdfs://namenode:8020/lake``) or ``file:///...``; the executors must reach it
            (on a cluster: object storage, HDFS or a shared mount, not a driver-local folder).
        views, config, options: see :func:`batch_layer.compiler.compile_topology`.
        input_frames: raw input DataFrames by topic instead of the lake's Delta tables.

    Returns:
        :class:`BatchResult`.

    Raises:
        BatchCompileError: the topology (upstream of a requested view) cannot be translated.
        BatchLayerError: a raw input table is missing; a lake URI without an authority
            (``hdfs:///lake``); ``spark`` is a Spark Connect session.
    """
    from .errors import BatchLayerError
    from .spark import is_connect

    if is_connect(spark):
        raise BatchLayerError(
            "the batch layer needs a classic SparkSession: its executors use SparkContext accumulators, "
            "broadcasts and RDD partitions, which Spark Connect does not offer. Unset SPARK_REMOTE and point "
            "spark.master at the cluster instead (DUET_SPARK_MASTER=spark://HOST:PORT, yarn or k8s://...)."
        )
    started = time.monotonic()
    lake = lake_location(lake)
    if isinstance(lake, str) and lake.split("://", 1)[-1].startswith("/") and not lake.lower().startswith("file:"):
        raise BatchLayerError(
            f"lake URI {lake!r} has no authority: give it in full, e.g. hdfs://namenode:8020/lake or s3a://bucket/lake"
        )
    if is_object_store(lake):  # s3a:// reads and writes with the AWS settings of this process
        from .spark_s3a import configure_s3a

        configure_s3a(spark, str(lake))
    plan = compile_topology(topology, views=views, config=config, options=options)
    frames = plan.execute(spark, lake, input_frames=input_frames)
    try:
        rows = _write_views(spark, frames, lake, plan.options.write_concurrency)
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
    _write_json(LakeLayout(lake).batch_info, doc)
    return BatchResult(rows, watermark, time.monotonic() - started, dropped, by_node, joins)


def _write_views(spark: "SparkSession", frames: dict[str, "DataFrame"], lake: str | Path,
                 concurrency: int) -> dict[str, int]:
    """Write each view of ``frames`` to ``<lake>/views/<store>`` (overwrite), up to
    ``concurrency`` Spark jobs at once (one driver thread each; PySpark pins each Python
    thread to a JVM thread); returns the rows written per store, in ``frames``' order.

    Raises:
        the first exception of a write (after the others ended); Ctrl-C is raised in the
        calling thread and the SparkContext's jobs are cancelled.
    """
    from .delta.io import write_table

    def write(store: str) -> int:
        path = view_path(lake, store)
        write_table(frames[store], path, mode="overwrite")
        return _rows_of(spark, path)

    stores = list(frames)
    if concurrency <= 1 or len(stores) <= 1:
        return {store: write(store) for store in stores}
    pool = ThreadPoolExecutor(max_workers=min(concurrency, len(stores)), thread_name_prefix="duet-view-write")
    try:
        futures = {store: pool.submit(write, store) for store in stores}
        wait(futures.values())  # every write ends (or fails) before the first error is raised
        return {store: futures[store].result() for store in stores}
    except KeyboardInterrupt:
        spark.sparkContext.cancelAllJobs()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _rows_of(spark: "SparkSession", path: str | Path) -> int:
    """Rows of the Delta table at ``path`` from its file statistics (no scan); counted by
    Spark when a file has no ``num_records`` statistic or delta-rs cannot read the log."""
    import pyarrow as pa
    from deltalake import DeltaTable

    try:
        col = pa.table(DeltaTable(delta_uri(path), storage_options=storage_options(path))
                       .get_add_actions(flatten=True)).column("num_records")
    except Exception as e:  # noqa: BLE001 - a log delta-rs cannot read: Spark counts
        log.debug("row count of %s from delta-rs failed (%s: %s); counting with Spark", path, type(e).__name__, e)
    else:
        if col.null_count == 0:
            return int(sum(col.to_pylist()))
    return spark.read.format("delta").load(spark_uri(path)).count()


def _write_json(path: str | Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` at ``path``: atomically (temporary file + rename) on a local path or a
    ``file:`` URI; with one pyarrow file-system write on other URIs (``s3a://`` is written as
    ``s3://``; credentials from the environment).

    Raises:
        OSError: the file cannot be written (pyarrow raises ``OSError`` subclasses too).
    """
    text = json.dumps(doc, indent=2) + "\n"
    local = local_path(path)
    if local is None and is_object_store(path):
        write_text(path, text)  # one PutObject (s3:// and s3a:// alike, AWS settings of the environment)
        return
    if local is None:
        from pyarrow import fs as pafs

        uri = str(path)
        scheme, rest = uri.split("://", 1)
        if scheme.lower() in ("s3a", "s3n"):
            uri = f"s3://{rest}"
        filesystem, inner = pafs.FileSystem.from_uri(uri)
        with filesystem.open_output_stream(inner) as out:
            out.write(text.encode("utf-8"))
        return
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(local)


def read_view(lake: str | Path, store: str) -> "pd.DataFrame":
    """The batch view ``<lake>/views/<store>`` (the lake a local path or a URI) as pandas
    (delta-rs, no JVM), sorted by ``key, window_start, window_end``; integer columns as
    nullable ``Int64``.

    Raises:
        deltalake.exceptions.TableNotFoundError: if the view was never written.
    """
    import pandas as pd
    from deltalake import DeltaTable

    path = view_path(lake, store)
    table = DeltaTable(delta_uri(path), storage_options=storage_options(path)).to_pyarrow_table()
    df = table.to_pandas()
    for c in ("window_start", "window_end", "timestamp"):
        df[c] = df[c].astype(pd.Int64Dtype())
    return df.sort_values(["key", "window_start", "window_end"], kind="stable", ignore_index=True)
