"""Spark accumulators of the worker-side code: the records dropped per node and the
largest timestamp read (see :mod:`._records`, "Errors")."""
from __future__ import annotations

from typing import Any

from pyspark.accumulators import AccumulatorParam

from ._records import Errors


class ErrorsParam(AccumulatorParam):
    """Accumulates ``{node: set of record ids}`` (set union: idempotent on recomputation)."""

    def zero(self, value: Errors) -> Errors:
        return {}

    def addInPlace(self, a: Errors, b: Errors) -> Errors:  # noqa: N802 - pyspark's name
        for node, ids in b.items():
            a.setdefault(node, set()).update(ids)
        return a


class MaxParam(AccumulatorParam):
    """Accumulates the maximum of ints (``-1`` when nothing was seen)."""

    def zero(self, value: int) -> int:
        return -1

    def addInPlace(self, a: int, b: int) -> int:  # noqa: N802
        return a if a >= b else b


def flush(errors_acc: Any, errs: Errors, wm_acc: Any = None, wm: int = -1) -> None:
    if errs:
        errors_acc.add(errs)
    if wm_acc is not None and wm >= 0:
        wm_acc.add(wm)

