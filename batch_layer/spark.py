"""One local SparkSession per process, with Delta Lake configured from the jars of `make setup`.

Usage::

    from batch_layer.spark import get_spark, stop_spark
    spark = get_spark()
    ...
    stop_spark()

Environment:
- ``DUET_SPARK_MASTER``: Spark master URL (default ``local[2]``).
- ``DUET_HOME``: where ``jars/delta`` lives (default ``<repo>/.duet``).
- ``DUET_SPARK_DRIVER_MEMORY``: driver heap (default ``1g``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from batch_layer.errors import BatchLayerError
from speed_layer.runtime.paths import delta_jars_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["delta_jars", "get_spark", "stop_spark"]

DEFAULT_MASTER = "local[2]"

_lock = threading.Lock()
_spark: SparkSession | None = None


def delta_jars() -> list[Path]:
    """All jars in ``<duet_home>/jars/delta`` (sorted); raise `BatchLayerError` naming ``make setup`` when
    delta-spark's or delta-storage's jar is missing."""
    folder = delta_jars_dir()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    names = [j.name for j in jars]
    if not all(any(n.startswith(prefix) for n in names) for prefix in ("delta-spark", "delta-storage")):
        raise BatchLayerError(
            f"Delta Lake jars not found in {folder} (expected delta-spark_*.jar and delta-storage-*.jar). "
            "Run `make setup` to fetch them, or point DUET_HOME at a folder holding jars/delta."
        )
    return jars


def get_spark(app_name: str = "duet") -> SparkSession:
    """Return the process-wide SparkSession with Delta configured, starting it on first call (~8 s).

    Later calls return the same session whatever ``app_name`` they pass.
    """
    global _spark
    with _lock:
        if _spark is not None and not _is_stopped(_spark):
            return _spark
        jars = delta_jars()
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        # Keep the JVM off the network name service and quiet before log4j is reconfigured.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

        from pyspark.sql import SparkSession

        builder = (
            SparkSession.builder.appName(app_name)
            .master(os.environ.get("DUET_SPARK_MASTER", DEFAULT_MASTER))
            .config("spark.jars", ",".join(str(j) for j in jars))
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", os.environ.get("DUET_SPARK_DRIVER_MEMORY", "1g"))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.sql.execution.arrow.pyspark.fallback.enabled", "true")
            .config("spark.pyspark.python", sys.executable)
            .config("spark.databricks.delta.snapshotPartitions", "2")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_log4j2_config()}")
        )
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        _spark = spark
        return spark


_LOG4J2 = """\
# duet: Spark's JVM logs to stderr, WARN during start-up (pyspark's shell prints a banner when the
# root level is not WARN), then get_spark() lowers the root to ERROR.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""


def _log4j2_config() -> Path:
    """A log4j2 properties file keeping the JVM quiet from its first line (written once per user)."""
    path = Path(tempfile.gettempdir()) / f"duet-spark-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        tmp.replace(path)
    return path


def stop_spark() -> None:
    """Stop the process-wide SparkSession if one is running (the next `get_spark` starts a new one)."""
    global _spark
    with _lock:
        if _spark is not None:
            _spark.stop()
            _spark = None


def _is_stopped(spark: SparkSession) -> bool:
    sc = spark.sparkContext
    return sc._jsc is None  # type: ignore[attr-defined]
