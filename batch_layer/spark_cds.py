"""The class-data-sharing archive of Spark's driver JVM (:mod:`speed_layer.runtime.jvm_cds`).

Measured on a 2-core machine (a session start, a 200,000-row Delta write, a read and a
group-by, then stop; two runs each): 37-41 s wall and 66-69 s of CPU without the archive,
25-26 s and 45-47 s with it.

``make setup`` writes it (``python -m batch_layer.spark_cds_build``: a small job over every
kind of work the batch layer does, ~2 min, once); :func:`batch_layer.spark.driver_java_options`
maps it when it matches the ``java`` that ``spark-submit`` runs and ``$SPARK_HOME/jars``.
"""

from __future__ import annotations

from pathlib import Path

from speed_layer.runtime.jvm_cds import archive_options, archive_path, resolve_java

__all__ = ["java_options", "spark_archive"]


def _spark_jars() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home()) / "jars"


def spark_archive() -> Path | None:
    """Where the archive for this machine's ``java`` (``$JAVA_HOME/bin/java``, else ``java``
    on ``PATH``) and PySpark's jars lives; None when no ``java`` is found."""
    java = resolve_java()
    return archive_path("spark", java, _spark_jars().glob("*.jar")) if java else None


def java_options() -> str:
    """The driver JVM options mapping the archive, or ``""`` (no archive for this ``java`` and
    PySpark, or ``$DUET_CDS`` is ``0``)."""
    return " ".join(archive_options(spark_archive))
