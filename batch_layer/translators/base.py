"""What every translator implements, and the compile-time "cannot translate" signal."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode

from ..model import TABLE_OPS

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext

def table_root(topology: "Topology", name: str) -> GraphNode:
    """The node under table ``name``'s filter / mapValues stages (a KTable source, or the op
    the table comes from)."""
    node = topology.nodes[name]
    while isinstance(node.op, (ops.TableFilterOp, ops.TableMapValuesOp)):
        node = topology.nodes[node.parents[0]]
    return node


def has_versioned_store(topology: "Topology", node: GraphNode) -> bool:
    """Whether ``node`` materializes a versioned store (KIP-914)."""
    spec = topology.stores.get(getattr(node.op, "store", None) or "")
    return spec is not None and spec.kind == "versioned"


class Unsupported(Exception):
    """Raised by a translator at compile time: ``reason`` says why the node cannot run in
    batch. The compiler turns it into a :class:`batch_layer.compiler.BatchCompileError`
    naming the node and the views that need it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Translator(ABC):
    """Translates one op type into PySpark.

    * :meth:`dependencies`: the nodes whose output this node reads (default: its parents);
      a stream-table join also reads its table node, a source of an internal topic the
      sinks writing that topic.
    * :meth:`check`: raise :class:`Unsupported` if this node (as configured) cannot be
      translated. Runs at compile time, only for nodes upstream of a requested view.
    * :meth:`build`: at execution time, the node's output representation
      (``StreamPipe``, ``TableChain`` or ``ViewRep``) from its dependencies' (``ctx``).
    """

    def dependencies(self, node: GraphNode, topology: "Topology") -> tuple[str, ...]:
        return node.parents

    def check(self, node: GraphNode, topology: "Topology") -> None:
        return None

    @abstractmethod
    def build(self, node: GraphNode, ctx: "ExecContext") -> Any:
        """The node's output representation, built from its dependencies' in ``ctx``."""


def require_table_parent(node: GraphNode, topology: "Topology", what: str) -> None:
    """Raise :class:`Unsupported` unless ``node``'s single parent is a KTable op."""
    if len(node.parents) != 1 or not isinstance(topology.nodes[node.parents[0]].op, TABLE_OPS):
        parent = node.parents[0] if node.parents else None
        kind = type(topology.nodes[parent].op).__name__ if parent else "none"
        raise Unsupported(
            f"{what} is only translated over a KTable source/filter/mapValues, but its parent "
            f"{parent!r} is a {kind} (an aggregation's update stream is not reproduced in batch: "
            "read the aggregation's store as a view instead)"
        )
