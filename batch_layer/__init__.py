"""duet's batch layer: Kafka -> Delta ingestion, Delta IO, and the Topology -> PySpark
compiler that recomputes the speed layer's views over the whole history.

Importing this package starts no Spark and imports no pyspark: the public names below are
loaded on first use.

* :func:`compile_topology` -> :class:`BatchPlan` (``plan.execute(spark, lake)``)
* :func:`run_batch` -> :class:`BatchResult`; :func:`read_view` (pandas, via delta-rs)
* :class:`BatchCompileError`, :class:`BatchOptions`, :class:`BatchViews`
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "BatchCompileError": "batch_layer.compiler",
    "BatchOptions": "batch_layer.compiler",
    "BatchPlan": "batch_layer.compiler",
    "BatchViews": "batch_layer.compiler",
    "compile_topology": "batch_layer.compiler",
    "BatchResult": "batch_layer.run",
    "run_batch": "batch_layer.run",
    "read_view": "batch_layer.run",
    "view_path": "batch_layer.run",
    "BatchLayerError": "batch_layer.errors",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'batch_layer' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
