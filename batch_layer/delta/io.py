"""Small Delta Lake helpers: Spark for writes/reads in batch jobs, delta-rs (no JVM) for cheap reads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

if TYPE_CHECKING:
    import pyarrow.compute as pc
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["read_arrow", "read_table", "table_exists", "table_version", "write_table"]

WriteMode = Literal["overwrite", "append"]


def write_table(
    df: DataFrame | pa.Table | Any,
    path: str | Path,
    mode: WriteMode = "overwrite",
    partition_by: list[str] | None = None,
) -> None:
    """Write ``df`` as a Delta table at ``path`` (created if missing).

    A Spark DataFrame is written with Spark's Delta writer; a ``pyarrow.Table`` (or a pandas
    DataFrame) with delta-rs. ``overwrite`` replaces the data (and the schema when it changed);
    ``append`` adds to it.
    """
    if mode not in ("overwrite", "append"):
        raise ValueError(f"mode must be 'overwrite' or 'append', not {mode!r}")
    if hasattr(df, "write") and hasattr(df, "sparkSession"):
        writer = df.write.format("delta").mode(mode)
        if mode == "overwrite":
            writer = writer.option("overwriteSchema", "true")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(str(path))
        return
    from deltalake import write_deltalake

    data = df if isinstance(df, pa.Table) else pa.Table.from_pandas(df, preserve_index=False)
    write_deltalake(
        str(path),
        data,
        mode=mode,
        partition_by=partition_by,
        schema_mode="overwrite" if mode == "overwrite" else None,
    )


def read_table(spark: SparkSession, path: str | Path, version: int | None = None) -> DataFrame:
    """The Delta table at ``path`` as a Spark DataFrame (latest version, or ``version``)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(path))


def table_exists(path: str | Path) -> bool:
    """True when ``path`` holds a Delta table (a ``_delta_log`` folder with at least one commit)."""
    log = Path(path) / "_delta_log"
    return log.is_dir() and any(log.glob("*.json"))


def read_arrow(
    path: str | Path,
    columns: list[str] | None = None,
    filter: pc.Expression | None = None,  # noqa: A002 - mirrors pyarrow's name
    version: int | None = None,
) -> pa.Table:
    """Read the Delta table at ``path`` with delta-rs into Arrow (no JVM).

    ``filter`` is a ``pyarrow.compute`` expression (e.g. ``pc.field("partition") == 0``);
    files are pruned with the Delta statistics where possible.
    """
    from deltalake import DeltaTable

    dt = DeltaTable(str(path), version=version)
    return dt.to_pyarrow_dataset().to_table(columns=columns, filter=filter)


def table_version(path: str | Path) -> int | None:
    """The latest version of the Delta table at ``path``, or None if there is no table."""
    if not table_exists(path):
        return None
    from deltalake import DeltaTable

    return DeltaTable(str(path)).version()
