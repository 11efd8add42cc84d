"""The general executor: any topology, Processor-API nodes included, recomputed in Spark by
the speed layer's own processors, one task per sub-topology and partition, over history
sorted in event-time order (see :mod:`batch_layer.general.plan`).

``batch_layer.compiler.compile_topology`` chooses it for topologies (or views) that the
relational translations do not cover, or always with ``BatchOptions(executor="general")``.

Public names: :func:`store_rows` (a store's content as view rows, for comparing with a
``TopologyTestDriver``) and :func:`full_history` (the topology as batch runs it: window and
session stores never expire).
"""
from __future__ import annotations

from .run import GeneralPlan
from .store_rows import ViewRow, store_rows
from .topology import FULL_HISTORY_MS, full_history

__all__ = ["FULL_HISTORY_MS", "GeneralPlan", "ViewRow", "full_history", "store_rows"]
