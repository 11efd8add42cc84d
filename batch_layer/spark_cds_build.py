"""Writes the class-data-sharing archive of Spark's driver JVM (:mod:`batch_layer.spark_cds`
says where it lives and how a driver maps it): ``python -m batch_layer.spark_cds_build``,
run by ``make setup``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from batch_layer.spark_cds import spark_archive
from speed_layer.runtime.jvm_cds import CDS_ENV, QUIET_OPTIONS, replace_archive, scoped_environment

__all__ = ["build_archive"]


def _workload(spark: object, folder: Path) -> None:
    """A small job over every kind of work the batch layer does: Delta writes, reads and
    merges, group-bys, joins, windows, Arrow and pandas Python functions, persist."""
    import pandas as pd
    from delta.tables import DeltaTable
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    df = spark.range(0, 50_000).selectExpr("id", "id % 97 AS k", "CAST(id AS STRING) AS s",  # type: ignore[attr-defined]
                                           "timestamp_millis(id * 1000) AS ts")
    df.write.format("delta").partitionBy("k").save(str(folder / "t"))
    t = spark.read.format("delta").load(str(folder / "t")).persist(StorageLevel.DISK_ONLY)  # type: ignore[attr-defined]
    t.groupBy("k").agg(F.count("*"), F.sum("id"), F.max("ts")).collect()
    t.join(F.broadcast(t.groupBy("k").count()), "k").repartition(8, "k").sortWithinPartitions("id").count()
    t.withColumn("r", F.row_number().over(Window.partitionBy("k").orderBy("id"))).where("r = 1").collect()
    t.mapInArrow(lambda batches: batches, t.schema).count()
    t.mapInPandas(lambda frames: frames, t.schema).count()
    t.groupBy("k").applyInPandas(lambda g: pd.DataFrame({"k": [g["k"].iloc[0]], "n": [len(g)]}), "k long, n long").collect()
    t.groupBy("k").applyInArrow(lambda table: table.select(["k"]).slice(0, 1), "k long").collect()
    DeltaTable.forPath(spark, str(folder / "t")).alias("a").merge(
        t.where("id < 100").alias("b"), "a.id = b.id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    DeltaTable.forPath(spark, str(folder / "t")).history().collect()
    t.unpersist()


def build_archive(timeout_s: float = 600) -> Path:
    """Write the archive for this machine's ``java`` and PySpark (see :func:`spark_archive`),
    replacing the Spark archives of other digests.

    Runs :func:`_workload` in a Spark driver started with ``-XX:ArchiveClassesAtExit``, then
    ends that JVM and waits for it to write the file (~2 min in all on 2 cores). This
    process' environment is left as it was.

    Raises:
        BatchLayerError: no ``java`` found.
        FileNotFoundError: the JVM wrote no archive.
        TimeoutError: the JVM had not ended ``timeout_s`` seconds after the job.
    """
    from batch_layer.errors import BatchLayerError
    from batch_layer.spark import get_spark, stop_spark

    path = spark_archive()
    if path is None:
        raise BatchLayerError("no java found ($JAVA_HOME/bin/java, or java on PATH): cannot build the CDS archive")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    with scoped_environment({CDS_ENV: "0"}):  # this JVM writes the archive: it must not map an older one
        spark = get_spark("duet-cds-archive",
                          conf={"spark.driver.extraJavaOptions": " ".join([f"-XX:ArchiveClassesAtExit={tmp}", *QUIET_OPTIONS])})
    proc = spark.sparkContext._gateway.proc  # type: ignore[attr-defined]  # pyspark's Popen of the JVM
    with tempfile.TemporaryDirectory(prefix="duet-cds-") as folder:
        _workload(spark, Path(folder))
    stop_spark()
    proc.stdin.close()  # the gateway exits on end of input (PythonGatewayServer), and writes the archive then
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"the Spark JVM writing {tmp} has not ended in {timeout_s} s") from exc
    replace_archive(tmp, path)
    return path


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"class-data-sharing archive: {build_archive()}", file=sys.stderr)
