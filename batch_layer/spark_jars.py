"""Where a classic Spark session's jars (Delta's, and S3A's on an object-store lake) go:
``spark.jars`` (the driver serves them, every executor copies them at start), or, when they
are installed at the same path on every node, the driver's and executors' class paths
(``$DUET_SPARK_JARS_ON_WORKERS``; docs/cluster.md).
"""
from __future__ import annotations

import os
from pathlib import Path

from batch_layer.errors import SparkConfigError

__all__ = ["JARS_ON_WORKERS_ENV", "jar_settings", "jars_on_workers"]

#: ``1``: the Delta (and S3A) jars folder is at the same path on every worker (:func:`jar_settings`)
JARS_ON_WORKERS_ENV = "DUET_SPARK_JARS_ON_WORKERS"


def jars_on_workers() -> bool:
    """``$DUET_SPARK_JARS_ON_WORKERS`` (``0`` or ``1``, default ``0``): whether the Delta jars
    folder (with the S3A jars) is at the same path on every worker, one image for all or a
    shared mount (see :func:`jar_settings`).

    Raises:
        SparkConfigError: the value is neither ``0`` nor ``1``.
    """
    value = os.environ.get(JARS_ON_WORKERS_ENV, "0").strip() or "0"
    if value not in ("0", "1"):
        raise SparkConfigError(f"{JARS_ON_WORKERS_ENV}={value!r}: allowed values are 0 and 1")
    return value == "1"


def jar_settings(jars: list[Path], extra_jars: list[str], on_workers: bool) -> dict[str, str]:
    """The Spark settings that put ``jars`` (absolute paths) and the user's ``extra_jars``
    on the driver's and the executors' class paths.

    By default all go in ``spark.jars``: the driver serves them and every executor copies
    them into its work folder when it starts (~660 MB with the S3A jars, for each executor).
    ``on_workers`` (the jars are at the same path on every node) puts ``jars`` on
    ``spark.driver.extraClassPath`` and ``spark.executor.extraClassPath`` instead, Spark's
    setting for jars installed on the nodes: each JVM loads them where they are, nothing is
    served or copied (a ``local:`` URI in ``spark.jars`` still copies each jar within the
    node). ``extra_jars`` stay in ``spark.jars`` either way.
    """
    if not on_workers:
        return {"spark.jars": ",".join([str(j) for j in jars] + extra_jars)}
    path = os.pathsep.join(str(j) for j in jars)
    return {"spark.jars": ",".join(extra_jars), "spark.driver.extraClassPath": path,
            "spark.executor.extraClassPath": path}
