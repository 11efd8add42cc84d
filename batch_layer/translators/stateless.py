"""Stateless KStream ops: filter, map / selectKey, mapValues, flatMap, flatMapValues, peek,
branch, merge. Each becomes a step of a fused ``mapInPandas`` chain (see ``_plan``), with the
speed layer's processor semantics (``speed_layer/processor/builtin/stateless.py``):

* ``peek`` is a no-op in batch (its action is a side effect of the live stream);
* ``branch``: a record goes to the child of the FIRST matching predicate (None = default);
* ``merge``: the union of its parents.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode

from ._chain import BranchSelectStep, FilterStep, FlatMapStep, MapStep, MapValuesStep, Step
from ._plan import StreamPipe
from .base import Translator, Unsupported

if TYPE_CHECKING:
    from speed_layer.topology import Topology

    from ._plan import ExecContext


class _StepTranslator(Translator):
    @abstractmethod
    def step(self, node: GraphNode) -> Step:
        """The fused step that computes ``node`` record by record."""

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        return ctx.stream(node.parents[0]).then(self.step(node))


class FilterTranslator(_StepTranslator):
    def step(self, node: GraphNode) -> Step:
        return FilterStep(node.name, node.op.predicate, node.op.negate)


class MapTranslator(_StepTranslator):
    def step(self, node: GraphNode) -> Step:
        return MapStep(node.name, node.op.mapper, node.op.key_only)


class MapValuesTranslator(_StepTranslator):
    def step(self, node: GraphNode) -> Step:
        return MapValuesStep(node.name, node.op.mapper, node.op.with_key)


class FlatMapTranslator(_StepTranslator):
    def step(self, node: GraphNode) -> Step:
        return FlatMapStep(node.name, node.op.mapper, values_only=False, with_key=True)


class FlatMapValuesTranslator(_StepTranslator):
    def step(self, node: GraphNode) -> Step:
        return FlatMapStep(node.name, node.op.mapper, values_only=True, with_key=node.op.with_key)


class PassThroughTranslator(Translator):
    """peek (a no-op in batch) and branch (its children select their records)."""

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        return ctx.stream(node.parents[0])


class MergeTranslator(Translator):
    """Union of the parents; a parent that is a branch node contributes the records whose
    first matching predicate is this child's."""

    def check(self, node: GraphNode, topology: "Topology") -> None:
        for p in node.parents:
            if isinstance(topology.nodes[p].op, ops.CogroupOp):
                raise Unsupported("a cogroup's change stream (its COGROUPKSTREAM-MERGE node) is not reproduced "
                                  "relationally; its store is (read it as a view)")

    def build(self, node: GraphNode, ctx: "ExecContext") -> StreamPipe:
        pipes = []
        for p in node.parents:
            pipe = ctx.stream(p)
            pop = ctx.plan.topology.nodes[p].op
            if isinstance(pop, ops.BranchOp) and node.name in pop.children:
                pipe = pipe.then(BranchSelectStep(p, pop.predicates, pop.children.index(node.name)))
            pipes.append(pipe)
        return StreamPipe.union(pipes)
