"""The topology graph: frozen node dataclasses read by every executor (runtime, test driver,
batch compiler). Nothing here imports Kafka or Spark."""
from .ops import *  # noqa: F401,F403
from .ops import __all__ as _ops_all
from .nodes import GraphNode, StoreSpec, InternalTopic, SubTopology

__all__ = [*_ops_all, "GraphNode", "StoreSpec", "InternalTopic", "SubTopology"]
