"""Operation specs: what each graph node does. Frozen dataclasses holding user functions.

Records flowing out of KStream nodes carry plain values; records flowing out of KTable
nodes carry :class:`speed_layer.processor.api.Change` values (new and old value). Each
executor maps an op type to its own implementation: the speed layer to a Processor, the
batch layer to a PySpark translation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from ..options import StreamPartitioner, Suppressed, TimestampExtractor
from ..serde import Serde
from ..windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows

__all__ = [
    "Op", "SourceOp", "SinkOp", "FilterOp", "MapOp", "MapValuesOp", "FlatMapOp", "FlatMapValuesOp",
    "PeekOp", "BranchOp", "MergeOp", "ProcessOp", "TableSourceOp", "ToStreamOp", "AggregateOp",
    "TableSelectOp", "TableAggregateOp", "StreamTableJoinOp", "JoinWindowStoreOp",
    "StreamStreamJoinOp", "TableTableJoinOp", "SuppressOp", "TableMapValuesOp", "TableFilterOp",
    "GlobalStoreOp", "CogroupOp", "ForeignKeyJoinOp",
]


class Op:
    """Base of all operation specs."""

    #: the name part Kafka uses in generated names, e.g. ``KSTREAM-FILTER``.
    kafka_prefix: str = "KSTREAM-PROCESSOR"


@dataclass(frozen=True)
class SourceOp(Op):
    """Reads ``topics`` (or an internal repartition topic when ``repartition``)."""

    topics: tuple[str, ...]
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    timestamp_extractor: TimestampExtractor | None = None
    offset_reset: str | None = None
    repartition: bool = False
    kafka_prefix = "KSTREAM-SOURCE"


@dataclass(frozen=True)
class SinkOp(Op):
    """Writes to ``topic`` or to the topic ``topic_extractor(key, value, record_context)``
    returns; ``repartition`` marks an internal repartition topic."""

    topic: str | None
    topic_extractor: Callable[[Any, Any, Any], str] | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None
    repartition: bool = False
    kafka_prefix = "KSTREAM-SINK"


@dataclass(frozen=True)
class FilterOp(Op):
    """Keeps records where ``predicate(key, value)`` is true (false with ``negate``)."""

    predicate: Callable[[Any, Any], bool]
    negate: bool = False
    kafka_prefix = "KSTREAM-FILTER"


@dataclass(frozen=True)
class MapOp(Op):
    """``mapper(key, value) -> (new_key, new_value)``; ``key_only`` for selectKey
    (``mapper(key, value) -> new_key``). Changes the key: marks repartition required."""

    mapper: Callable[[Any, Any], Any]
    key_only: bool = False
    kafka_prefix = "KSTREAM-MAP"


@dataclass(frozen=True)
class MapValuesOp(Op):
    """``mapper(value)`` or, ``with_key``, ``mapper(key, value)``."""

    mapper: Callable[..., Any]
    with_key: bool = False
    kafka_prefix = "KSTREAM-MAPVALUES"


@dataclass(frozen=True)
class FlatMapOp(Op):
    """``mapper(key, value) -> iterable of (key, value)``."""

    mapper: Callable[[Any, Any], Any]
    kafka_prefix = "KSTREAM-FLATMAP"


@dataclass(frozen=True)
class FlatMapValuesOp(Op):
    """``mapper(value) -> iterable of values`` (``with_key``: ``mapper(key, value)``)."""

    mapper: Callable[..., Any]
    with_key: bool = False
    kafka_prefix = "KSTREAM-FLATMAPVALUES"


@dataclass(frozen=True)
class PeekOp(Op):
    """Calls ``action(key, value)``; forwards the record unless ``terminal`` (foreach)."""

    action: Callable[[Any, Any], None]
    terminal: bool = False
    kafka_prefix = "KSTREAM-PEEK"


@dataclass(frozen=True)
class BranchOp(Op):
    """Sends each record to the child of the first matching predicate (``None`` = default
    branch); ``children`` are the branch node names in predicate order."""

    predicates: tuple[Callable[[Any, Any], bool] | None, ...]
    children: tuple[str, ...]
    kafka_prefix = "KSTREAM-BRANCH"


@dataclass(frozen=True)
class MergeOp(Op):
    """Forwards records from all parents."""

    kafka_prefix = "KSTREAM-MERGE"


@dataclass(frozen=True)
class ProcessOp(Op):
    """A user processor from the Processor API: ``supplier()`` returns a new Processor per
    task. ``values_only`` for ``process_values`` (the key must not change)."""

    supplier: Callable[[], Any]
    values_only: bool = False
    kafka_prefix = "KSTREAM-PROCESSOR"


@dataclass(frozen=True)
class GlobalStoreOp(Op):
    """Updates a global store from its source topic (``Topology.add_global_store``);
    ``supplier`` None means "put key/value into the store" (a GlobalKTable)."""

    store: str
    supplier: Callable[[], Any] | None = None
    kafka_prefix = "KTABLE-SOURCE"


@dataclass(frozen=True)
class TableSourceOp(Op):
    """Turns a record stream into a table: keeps the latest value per key in ``store`` (if
    materialized) and forwards ``Change(new, old)``; null keys are dropped. Used by
    ``StreamsBuilder.table`` and ``KStream.to_table``."""

    store: str | None
    kafka_prefix = "KTABLE-SOURCE"


@dataclass(frozen=True)
class TableFilterOp(Op):
    """KTable filter: a value failing the predicate becomes a tombstone (as Kafka's
    KTableFilter). ``send_old_values`` (Kafka's sendOldValues): when set, old values are
    filtered too and an update whose new and old value both fail is not forwarded; when
    not set, old values are dropped and every failing update is forwarded as a tombstone.
    ``store`` materializes the filtered table."""

    predicate: Callable[[Any, Any], bool]
    negate: bool = False
    store: str | None = None
    send_old_values: bool = True
    kafka_prefix = "KTABLE-FILTER"


@dataclass(frozen=True)
class TableMapValuesOp(Op):
    """KTable mapValues on new and old values; tombstones stay tombstones."""

    mapper: Callable[..., Any]
    with_key: bool = False
    store: str | None = None
    kafka_prefix = "KTABLE-MAPVALUES"


@dataclass(frozen=True)
class ToStreamOp(Op):
    """KTable -> KStream: forwards each change's new value (tombstones as None);
    ``mapper(key, value) -> new key`` when given."""

    mapper: Callable[[Any, Any], Any] | None = None
    kafka_prefix = "KTABLE-TOSTREAM"


AggKind = Literal["count", "reduce", "aggregate"]


@dataclass(frozen=True)
class AggregateOp(Op):
    """KGroupedStream aggregation into ``store``: ``count``, ``reduce(agg, value)`` or
    ``aggregate(initializer(), aggregator(key, value, agg))``, optionally windowed
    (time, sliding or session windows; sessions also take ``merger(key, agg1, agg2)``).
    Emits ``Change(new, old)`` keyed by the key, or by ``Windowed(key, window)``."""

    kind: AggKind
    store: str
    initializer: Callable[[], Any] | None = None
    aggregator: Callable[..., Any] | None = None
    windows: TimeWindows | SlidingWindows | SessionWindows | None = None
    merger: Callable[[Any, Any, Any], Any] | None = None
    #: Kafka's sendOldValues: off until a downstream table operation asks for old values
    #: (``KTable#filter``, joins, ``group_by``, ``suppress``); off, ``Change.old`` is None
    send_old_values: bool = False
    kafka_prefix = "KSTREAM-AGGREGATE"


@dataclass(frozen=True)
class CogroupOp(Op):
    """One input of a cogrouped aggregation (KIP-150; Kafka's CogroupedStreamAggregateBuilder):
    ``aggregator(key, value, agg)`` folds this node's records into ``store``, which every
    input of the cogroup shares (starting from ``initializer()``), optionally windowed
    (``merger(key, agg1, agg2)`` for session windows). Each input is its own node
    (``COGROUPKSTREAM-AGGREGATE-<n>``); their outputs meet in a ``MergeOp`` node
    (``COGROUPKSTREAM-MERGE-<n>``, Kafka's KTablePassThrough)."""

    store: str
    initializer: Callable[[], Any]
    aggregator: Callable[[Any, Any, Any], Any]
    windows: TimeWindows | SlidingWindows | SessionWindows | None = None
    merger: Callable[[Any, Any, Any], Any] | None = None
    kafka_prefix = "COGROUPKSTREAM-AGGREGATE"


@dataclass(frozen=True)
class TableSelectOp(Op):
    """KTable.groupBy: ``selector(key, value) -> (new_key, new_value)`` applied to the new
    and the old value; forwards the old pair as a subtraction and the new as an addition."""

    selector: Callable[[Any, Any], Any]
    kafka_prefix = "KTABLE-SELECT"


@dataclass(frozen=True)
class TableAggregateOp(Op):
    """KGroupedTable aggregation: ``subtractor(key, old, agg)`` then ``adder(key, new, agg)``
    (``count``: +1/-1; ``reduce(adder(agg, v), subtractor(agg, v))``)."""

    kind: AggKind
    store: str
    initializer: Callable[[], Any] | None = None
    adder: Callable[..., Any] | None = None
    subtractor: Callable[..., Any] | None = None
    kafka_prefix = "KTABLE-AGGREGATE"

    def functions(self) -> tuple[Callable[[], Any] | None, Callable[[Any, Any, Any], Any], Callable[[Any, Any, Any], Any]]:
        """``(initializer, adder(key, value, agg), subtractor(key, value, agg))`` for every
        kind, as the speed layer's processor and the batch layer's fold both apply them;
        reduce's initializer is None (the first value is the aggregate)."""
        if self.kind == "count":
            return (lambda: 0), (lambda k, v, agg: agg + 1), (lambda k, v, agg: agg - 1)
        if self.kind == "reduce":
            adder, subtractor = self.adder, self.subtractor
            assert adder is not None and subtractor is not None
            return None, (lambda k, v, agg: adder(agg, v)), (lambda k, v, agg: subtractor(agg, v))
        assert self.adder is not None and self.subtractor is not None
        return self.initializer, self.adder, self.subtractor


@dataclass(frozen=True)
class StreamTableJoinOp(Op):
    """KStream-KTable (or GlobalKTable) join: looks up ``table_store`` by the record key
    (or by ``key_selector(key, value)`` for a GlobalKTable) and emits
    ``joiner(value, table_value)`` (``joiner(key, value, table_value)`` when
    ``joiner_with_key``); ``left`` also emits unmatched records with table_value None.
    ``table_node`` names the KTable node joined (its store is ``table_store``)."""

    table_store: str
    joiner: Callable[..., Any]
    left: bool = False
    key_selector: Callable[[Any, Any], Any] | None = None
    global_table: bool = False
    table_node: str | None = None
    joiner_with_key: bool = False
    grace_ms: int | None = None
    kafka_prefix = "KSTREAM-JOIN"


@dataclass(frozen=True)
class JoinWindowStoreOp(Op):
    """One side of a KStream-KStream join (Kafka's KStreamJoinWindow, node
    ``KSTREAM-WINDOWED-n``): forwards each record, then puts it (non-null key) into its
    retain-duplicates window ``store`` at window start = record timestamp."""

    store: str
    windows: JoinWindows
    kafka_prefix = "KSTREAM-WINDOWED"


@dataclass(frozen=True)
class StreamStreamJoinOp(Op):
    """One side of a KStream-KStream join (Kafka's KStreamKStreamJoinLeftSide/RightSide):
    joins each record of this side with the other side's window store ``other_store``.
    ``this_is_left`` tells which argument of ``joiner(left, right)`` (or ``joiner(key, left,
    right)`` with ``joiner_with_key``) this side supplies; ``left_outer``/``right_outer``
    say which side's unmatched records are emitted, once the window closes, through the
    shared ``outer_store`` (KIP-633 / KAFKA-10847). ``key_serde`` orders the outer store's
    keys; ``emit_interval_ms`` throttles outer emission on wall-clock time (None: the
    config's value, else Kafka's 1000 ms)."""

    this_store: str
    other_store: str
    joiner: Callable[..., Any]
    windows: JoinWindows
    this_is_left: bool
    left_outer: bool
    right_outer: bool
    outer_store: str | None = None
    joiner_with_key: bool = False
    key_serde: Serde[Any] | None = None
    emit_interval_ms: int | None = None
    kafka_prefix = "KSTREAM-JOINTHIS"


@dataclass(frozen=True)
class TableTableJoinOp(Op):
    """A KTable-KTable join node (Kafka's KTableKTable{Inner,Left,Right,Outer}Join and
    KTableKTableJoinMerger). ``role`` "this"/"other": the processor of one side, looking the
    other table up through ``other_getter`` (a ``TableValueGetter``; ``other_store`` is its
    base store) on each change of this side; ``joiner(left, right)`` whatever the side.
    ``role`` "merge": forwards both sides' results, materialized in ``store`` when set."""

    kind: Literal["inner", "left", "outer"]
    joiner: Callable[[Any, Any], Any] | None = None
    this_is_left: bool = True
    role: Literal["this", "other", "merge"] = "this"
    other_store: str | None = None
    other_getter: Any = None
    store: str | None = None
    kafka_prefix = "KTABLE-JOINTHIS"


@dataclass(frozen=True)
class ForeignKeyJoinOp(Op):
    """One processor of a KTable-KTable foreign-key join (KIP-213), by ``role``:
    "subscribe" (SubscriptionSendProcessor: left changes -> subscriptions keyed by FK),
    "receive" (SubscriptionReceiveProcessor: maintains the subscription store),
    "join_foreign" (SubscriptionJoinProcessor: looks the right table up),
    "foreign_table" (ForeignTableJoinProcessor: right changes -> responses to subscribers),
    "resolve" (ResponseJoinProcessor: drops stale responses, applies the joiner).
    ``getter`` is a ``TableValueGetter`` (the right table for join_foreign, the left table
    for subscribe/resolve); ``stores`` holds the subscription store; ``hash_store`` names the
    store whose value serde hashes left values; ``key_serde``/``foreign_key_serde`` order
    the subscription store's combined keys."""

    role: Literal["subscribe", "receive", "join_foreign", "foreign_table", "resolve"]
    foreign_key_extractor: Callable[..., Any] | None = None
    joiner: Callable[[Any, Any], Any] | None = None
    left: bool = False
    stores: tuple[str, ...] = ()
    getter: Any = None
    extractor_with_key: bool = False
    hash_store: str | None = None
    key_serde: Serde[Any] | None = None
    foreign_key_serde: Serde[Any] | None = None
    kafka_prefix = "KTABLE-FK-JOIN"


@dataclass(frozen=True)
class SuppressOp(Op):
    """KTable.suppress with ``suppressed`` (final results or a time limit)."""

    suppressed: Suppressed
    store: str
    grace_ms: int = 0
    windowed: bool = True
    kafka_prefix = "KTABLE-SUPPRESS"
