"""Small Delta Lake helpers: Spark for writes/reads in batch jobs, delta-rs (no JVM) for cheap reads.

Table locations are local paths (``str`` or ``Path``) or URIs (``file:///data/lake/raw/t``,
``s3a://bucket/lake/raw/t``, ``hdfs://namenode:8020/lake/raw/t``...): :func:`lake_location`,
:func:`join_location` and :func:`local_path` keep local paths as ``Path`` objects (exactly
as before) and handle URIs as strings, joined with ``/``. Spark resolves a URI with its
Hadoop file systems (``s3a://`` needs hadoop-aws, docs/cluster.md); delta-rs with its own
object stores (credentials from the environment, e.g. ``AWS_*``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlparse

import pyarrow as pa

from batch_layer.delta.storage import delta_uri, spark_uri, storage_options

if TYPE_CHECKING:
    import pyarrow.compute as pc
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "is_uri",
    "join_location",
    "lake_location",
    "local_path",
    "read_arrow",
    "read_table",
    "table_exists",
    "table_version",
    "write_table",
]

WriteMode = Literal["overwrite", "append"]

#: ``scheme:/...`` with a scheme of 2+ characters (so ``C:/`` is no scheme); a URI that went
#: through ``Path()`` has lost one slash (``s3a:/bucket/lake``), hence ``:/`` not ``://``.
_URI_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):/")


def is_uri(location: str | Path) -> bool:
    """True when ``location`` is a URI (``scheme://...``, ``file:/...``), False for a local path."""
    return bool(_URI_RE.match(str(location)))


def lake_location(location: str | Path) -> str | Path:
    """A table or lake location in the form the helpers below take.

    A local path becomes a ``Path`` (unchanged). A URI becomes a ``str`` without a trailing
    ``/``; a URI folded by ``Path()`` (``s3a:/bucket/lake``, ``file:/data/lake``) gets its
    ``//`` back (``s3a://bucket/lake``, ``file:///data/lake``). A URI without an authority
    other than ``file:`` (``hdfs:///lake``) is kept as given, but it does not survive
    ``Path()``: give such lakes with their authority (``hdfs://namenode:8020/lake``).
    """
    text = str(location)
    m = _URI_RE.match(text)
    if m is None:
        return location if isinstance(location, Path) else Path(location)
    scheme, rest = m.group(1), text[m.end():]  # rest: after "scheme:/"
    if scheme.lower() == "file":
        parsed = urlparse(text)
        if text.lower().startswith("file://") and parsed.netloc not in ("", "localhost"):
            return text.rstrip("/")  # file://host/path: left to Hadoop / delta-rs
        path = parsed.path if text.lower().startswith("file://") else rest
        return "file:///" + path.strip("/")
    if not rest.startswith("/"):  # folded by Path(): "s3a:/bucket/lake"
        rest = "/" + rest
    return f"{scheme}:/{rest}".rstrip("/")


def join_location(root: str | Path, *parts: str) -> str | Path:
    """``root`` joined with ``parts``: ``Path`` arithmetic for a local path, ``/`` for a URI."""
    root = lake_location(root)
    if isinstance(root, Path):
        return root.joinpath(*parts)
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts)])


def local_path(location: str | Path) -> Path | None:
    """The local path of ``location`` (a local path or a ``file:`` URI); None for a URI of
    another file system (object storage, HDFS...)."""
    location = lake_location(location)
    if isinstance(location, Path):
        return location
    parsed = urlparse(location)
    if parsed.scheme.lower() == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    return None


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
        writer.save(spark_uri(path))
        return
    from deltalake import write_deltalake

    data = df if isinstance(df, pa.Table) else pa.Table.from_pandas(df, preserve_index=False)
    write_deltalake(
        delta_uri(path),
        data,
        mode=mode,
        partition_by=partition_by,
        schema_mode="overwrite" if mode == "overwrite" else None,
        storage_options=storage_options(path),
    )


def read_table(spark: SparkSession, path: str | Path, version: int | None = None) -> DataFrame:
    """The Delta table at ``path`` as a Spark DataFrame (latest version, or ``version``)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(spark_uri(path))


def table_exists(path: str | Path) -> bool:
    """True when ``path`` holds a Delta table (a ``_delta_log`` folder with at least one
    commit); for a remote URI, delta-rs asks the object store (credentials from the
    environment)."""
    local = local_path(path)
    if local is None:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(delta_uri(lake_location(path)), storage_options=storage_options(path))
    log = local / "_delta_log"
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

    dt = DeltaTable(delta_uri(path), version=version, storage_options=storage_options(path))
    return dt.to_pyarrow_dataset().to_table(columns=columns, filter=filter)


def table_version(path: str | Path) -> int | None:
    """The latest version of the Delta table at ``path``, or None if there is no table."""
    if not table_exists(path):
        return None
    from deltalake import DeltaTable

    return DeltaTable(delta_uri(path), storage_options=storage_options(path)).version()
