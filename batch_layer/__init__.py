"""duet's batch layer: Kafka -> Delta ingestion, Delta IO, and the Topology -> PySpark
compiler that recomputes the speed layer's views over the whole history.

Importing this package starts no Spark and imports no pyspark: the public names below are
loaded on first use.

* :func:`compile_topology` -> :class:`BatchPlan` (``plan.execute(spark, lake)``)
* :func:`run_batch` -> :class:`BatchResult`; :func:`read_view` (pandas, via delta-rs)
* :class:`BatchCompileError`, :class:`BatchOptions`, :class:`BatchViews`
"""
from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "compiler": ["BatchPlan", "compile_topology"],
        "errors": ["BatchCompileError", "BatchLayerError"],
        "model": ["BatchOptions"],
        "run": ["BatchResult", "read_view", "run_batch", "view_path"],
        "views": ["BatchViews"],
    },
)
