"""Op type -> batch translation (the batch layer's counterpart of the speed layer's
``speed_layer.processor.factory.PROCESSORS``).

One module per op family: ``sources`` (sources, sinks, KTable/GlobalKTable sources),
``stateless`` (filter, map, flatMap, peek, branch, merge), ``table`` (KTable filter,
mapValues, toStream), ``joins`` (stream-table as-of joins), ``table_joins`` (KTable-KTable
joins' stores), ``aggregate`` (plain, tumbling / hopping, sliding and session
aggregations), ``cogroup`` (cogrouped aggregations), ``table_aggregate`` (``KTable.group_by``
and KGroupedTable count / reduce / aggregate with adder and subtractor), ``stream_joins``
(KStream-KStream windowed joins: inner per key, left / outer per task, replaying the
speed layer's join processors), ``fk_joins`` (KTable-KTable foreign-key joins, KIP-213:
the resolver's records, replayed per left key then per foreign key), ``suppress``
(``suppress(until_window_closes)`` directly over a tumbling / hopping / session
aggregation, and its ``toStream``: per task, replaying the speed layer's aggregate and
suppress processors). An op type missing from :data:`TRANSLATORS` or refused by its
translator's ``check`` (a user Processor, a suppress until a time limit or into an
order-sensitive consumer, a versioned table re-grouped or joined, a cogroup whose inputs
share a topic, a change stream of an aggregation or a join, a stream-stream self-join, a
left / outer stream-stream join with a repartitioned side or an order-sensitive consumer,
a foreign-key join whose tables share an input topic, ...) has no relational form:
``compile_topology`` then runs the plan on the general executor (``batch_layer.general``;
docs/batch-executors.md).

Importing this package does not start Spark.
"""
from __future__ import annotations

from speed_layer.graph import ops
from speed_layer.graph.nodes import GraphNode

from .aggregate import AggregateTranslator
from .base import Translator, Unsupported
from .cogroup import CogroupTranslator
from .fk_joins import ForeignKeyJoinTranslator
from .joins import StreamTableJoinTranslator
from .sources import GlobalStoreTranslator, SinkTranslator, SourceTranslator, TableSourceTranslator
from .stateless import (
    FilterTranslator, FlatMapTranslator, FlatMapValuesTranslator, MapTranslator, MapValuesTranslator, MergeTranslator,
    PassThroughTranslator,
)
from .stream_joins import JoinWindowTranslator, StreamStreamJoinTranslator
from .suppress import SuppressTranslator, ToStreamOrSuppressedTranslator
from .table import TableFilterTranslator, TableMapValuesTranslator
from .table_aggregate import TableAggregateTranslator, TableSelectTranslator
from .table_joins import TableTableJoinTranslator


class ProcessTranslator(Translator):
    """Processor-API nodes are opaque to a relational translation: ``check`` refuses them,
    so a plan that needs one runs on the general executor, which runs the processor."""

    def check(self, node: GraphNode, topology: object) -> None:
        raise Unsupported("a user Processor (Processor API, KStream.process/process_values) has no relational form: "
                          "its state, punctuations and forwarding are opaque; it runs on the general executor")

    def build(self, node: GraphNode, ctx: object) -> None:
        self.check(node, ctx)  # never reached: check fails at compile time


TRANSLATORS: dict[type, Translator] = {
    ops.SourceOp: SourceTranslator(),
    ops.SinkOp: SinkTranslator(),
    ops.FilterOp: FilterTranslator(),
    ops.MapOp: MapTranslator(),
    ops.MapValuesOp: MapValuesTranslator(),
    ops.FlatMapOp: FlatMapTranslator(),
    ops.FlatMapValuesOp: FlatMapValuesTranslator(),
    ops.PeekOp: PassThroughTranslator(),
    ops.BranchOp: PassThroughTranslator(),
    ops.MergeOp: MergeTranslator(),
    ops.ProcessOp: ProcessTranslator(),
    ops.TableSourceOp: TableSourceTranslator(),
    ops.GlobalStoreOp: GlobalStoreTranslator(),
    ops.TableFilterOp: TableFilterTranslator(),
    ops.TableMapValuesOp: TableMapValuesTranslator(),
    ops.ToStreamOp: ToStreamOrSuppressedTranslator(),
    ops.StreamTableJoinOp: StreamTableJoinTranslator(),
    ops.AggregateOp: AggregateTranslator(),
    ops.TableTableJoinOp: TableTableJoinTranslator(),
    ops.TableSelectOp: TableSelectTranslator(),
    ops.TableAggregateOp: TableAggregateTranslator(),
    ops.CogroupOp: CogroupTranslator(),
    ops.JoinWindowStoreOp: JoinWindowTranslator(),
    ops.StreamStreamJoinOp: StreamStreamJoinTranslator(),
    ops.SuppressOp: SuppressTranslator(),
    ops.ForeignKeyJoinOp: ForeignKeyJoinTranslator(),
}

#: op types whose node can be the writer of a view's store
VIEW_WRITERS: tuple[type, ...] = (ops.AggregateOp, ops.TableSourceOp, ops.TableFilterOp, ops.TableMapValuesOp,
                                  ops.TableTableJoinOp, ops.TableAggregateOp, ops.CogroupOp)

__all__ = ["TRANSLATORS", "VIEW_WRITERS", "Translator", "Unsupported"]
