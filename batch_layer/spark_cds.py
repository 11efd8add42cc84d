"""A class-data-sharing archive of Spark's classes, so a cold Spark JVM starts faster.

A Spark driver JVM loads and verifies about 20,000 classes before its first job. HotSpot's
dynamic class-data sharing (JEP 350, JDK 13+: ``-XX:ArchiveClassesAtExit`` to write,
``-XX:SharedArchiveFile`` to map) keeps them parsed and verified in a file that later JVMs
map read-only. Measured on a 2-core machine (a session start, a 200,000-row Delta write, a
read and a group-by, then stop; two runs each): 38-41 s wall and 69 s of CPU without the
archive, 25-27 s and 45-49 s with it.

``make setup`` builds the archive (``python -m batch_layer.spark_cds``: a small job over
every kind of work the batch layer does, ~80 s, once); :func:`batch_layer.spark.get_spark`
maps it when it matches. An archive is only valid for the JVM and the class path that wrote
it: the file's name carries a digest of both (the ``java`` that ``spark-submit`` runs and
the name, size and modification time of every jar in ``$SPARK_HOME/jars``), so after a
JDK or PySpark upgrade no archive matches and Spark starts as before, until the next
``make setup``. A JVM that rejects an archive anyway starts without it, silently
(``-Xshare:auto``, CDS logging off).

Environment:

- ``DUET_SPARK_CDS``: ``0`` never maps an archive (default: map it when it matches).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["CDS_ENV", "archive_path", "build_archive", "java_options"]

log = logging.getLogger(__name__)

CDS_ENV = "DUET_SPARK_CDS"
#: HotSpot's options that keep a rejected or mismatched archive silent (it then starts without).
_QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    """The ``java`` that Spark's ``spark-class`` runs: ``$JAVA_HOME/bin/java``, else ``java``
    on ``PATH``; symlinks resolved."""
    home = os.environ.get("JAVA_HOME", "").strip()
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        return None
    return Path(found).resolve()


def _spark_jars() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home()) / "jars"


def _digest(java: Path, jars: Path) -> str:
    h = hashlib.sha256()
    st = java.stat()
    h.update(f"{java}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        h.update(f"{jar.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def archive_path(duet_home: str | Path | None = None) -> Path | None:
    """Where the archive for this machine's ``java`` and PySpark lives:
    ``<duet_home>/cds/spark-<digest>.jsa`` (default ``$DUET_HOME``, else ``<repo>/.duet``);
    None when no ``java`` is found."""
    java = _java()
    if java is None:
        return None
    home = Path(duet_home or os.environ.get("DUET_HOME") or Path(__file__).resolve().parent.parent / ".duet")
    return home / "cds" / f"spark-{_digest(java, _spark_jars())}.jsa"


def java_options() -> str:
    """The driver JVM options mapping the archive, or ``""`` when there is none for this
    ``java`` and PySpark, or ``$DUET_SPARK_CDS`` is ``0``."""
    if os.environ.get(CDS_ENV, "").strip() == "0":
        return ""
    try:
        path = archive_path()
    except OSError as exc:  # a jar vanished while listed: start without the archive
        log.info("no class-data-sharing archive: %s", exc)
        return ""
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


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


def build_archive(duet_home: str | Path | None = None, timeout_s: float = 600) -> Path:
    """Write the archive for this machine's ``java`` and PySpark (see :func:`archive_path`),
    replacing an older one of the same digest; archives of other digests are removed.

    Runs :func:`_workload` in a Spark driver started with ``-XX:ArchiveClassesAtExit``, then
    ends that JVM and waits for it to write the file (~80 s in all on 2 cores).

    Raises:
        BatchLayerError: no ``java`` found, or the JVM wrote no archive (its exit code in the
            message).
        TimeoutError: the JVM had not ended ``timeout_s`` seconds after the job.
    """
    from batch_layer.errors import BatchLayerError
    from batch_layer.spark import get_spark, stop_spark

    path = archive_path(duet_home)
    if path is None:
        raise BatchLayerError("no java found ($JAVA_HOME/bin/java, or java on PATH): cannot build the CDS archive")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    os.environ[CDS_ENV] = "0"  # this JVM writes the archive: it must not map an older one
    spark = get_spark("duet-cds-archive", conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={tmp} {_QUIET}"})
    proc = spark.sparkContext._gateway.proc  # type: ignore[attr-defined]  # pyspark's Popen of the JVM
    with tempfile.TemporaryDirectory(prefix="duet-cds-") as folder:
        _workload(spark, Path(folder))
    stop_spark()
    proc.stdin.close()  # the gateway exits on end of input (PythonGatewayServer), and dumps then
    try:
        code = proc.wait(timeout=timeout_s)
    except Exception as exc:
        raise TimeoutError(f"the Spark JVM writing {tmp} has not ended in {timeout_s} s") from exc
    if not tmp.is_file():
        raise BatchLayerError(f"the Spark JVM wrote no CDS archive (exit code {code})")
    tmp.replace(path)
    for old in path.parent.glob("spark-*.jsa"):
        if old != path:
            old.unlink()
    return path


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"class-data-sharing archive: {build_archive()}", file=sys.stderr)
