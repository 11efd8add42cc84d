"""KTable-KTable joins, primary-key and foreign-key: the DSL side (Kafka's
KTableImpl#doJoin and KTableImpl#doJoinOnForeignKey).

``KTable.join/left_join/outer_join`` dispatch to :func:`table_join`:

* ``join(other, joiner, named=None, materialized=None)``: primary-key join (KIP-77
  semantics). Graph: ``KTABLE-JOINTHIS-n+1`` under this table, ``KTABLE-JOINOTHER-n+2``
  under the other, both into ``KTABLE-MERGE-n`` (materialized into the ``materialized``
  store when given). Both tables must be co-partitioned.
* ``join(other, foreign_key_extractor, joiner, named=None, materialized=None)``: foreign-key
  join (KIP-213), also ``left_join``. Runs through two internal topics
  (``KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-n-topic``, co-partitioned with the other
  table, and ``KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-m-topic``, back to this table's
  partitions) and the subscription store ``KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-k``; no
  co-partitioning of the two tables is needed.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from ..errors import TopologyException
from ..graph.nodes import InternalTopic, StoreSpec
from ..graph.ops import ForeignKeyJoinOp, SinkOp, SourceOp, TableSourceOp, TableTableJoinOp
from ..options import Materialized, Named
from ..processor.builtin.fk_join import response_partition, subscription_partition
from ..processor.builtin.joins import TableValueGetter
from ..serde import Serdes
from ..state.keys import ORDERED_KEY

if TYPE_CHECKING:
    from .ktable import KTable

__all__ = ["table_join", "value_getter"]


def table_join(table: "KTable", other: "KTable", kind: str, *args: Any, **kwargs: Any) -> "KTable":
    """Dispatch ``KTable.join/left_join/outer_join``.

    ``join(other, joiner, named=None, materialized=None)`` (primary key) or
    ``join(other, foreign_key_extractor, joiner, named=None, materialized=None, *,
    extractor_with_key=False)`` (foreign key: two callables). See
    :func:`primary_key_join` and :func:`foreign_key_join`.

    Raises:
        TopologyException: for an outer foreign-key join (Kafka has none), a non-KTable
            ``other``, or a missing joiner.
    """
    from .ktable import KTable

    if not isinstance(other, KTable):
        raise TopologyException(f"a KTable can only be joined with a KTable here, got {type(other).__name__}")
    fk_extractor = kwargs.pop("foreign_key_extractor", None)
    if fk_extractor is None and len(args) >= 2 and callable(args[0]) and callable(args[1]):
        fk_extractor, args = args[0], args[1:]
    if fk_extractor is not None:
        if kind == "outer":
            raise TopologyException("KTable-KTable foreign-key joins are inner or left joins only (KIP-213)")
        return foreign_key_join(table, other, fk_extractor, *args, left=kind == "left", **kwargs)
    return primary_key_join(table, other, kind, *args, **kwargs)


def primary_key_join(
    table: "KTable",
    other: "KTable",
    kind: str,
    joiner: Callable[[Any, Any], Any] | None = None,
    named: Named | str | None = None,
    materialized: Materialized | None = None,
) -> "KTable":
    """KTable-KTable join on the primary key (Kafka's KTableKTable*Join, KIP-77).

    Each update of either table looks up the other table's current value and emits
    ``Change(new_result, old_result)`` with ``joiner(left, right)``:

    * inner: a result when both sides have a value; a delete (or a change to a row whose
      partner is absent) emits nothing unless the partner exists, then a tombstone;
    * left: every left row yields ``joiner(left, right_or_None)``; a left delete emits a
      tombstone; right updates emit only for existing left rows;
    * outer: ``joiner(left_or_None, right_or_None)`` while either side exists; a tombstone
      when both are gone.

    The output timestamp is the larger of both rows' timestamps (the updated row's when the
    other side is absent). Null keys are dropped. With ``materialized``, results go into
    that store (``KTABLE-MERGE-STATE-STORE-n`` when unnamed) and, with caching enabled, are
    forwarded on cache flush (commit).

    Raises:
        TopologyException: if ``joiner`` is missing or a table cannot be read by key.
    """
    from .builder import kv_store_spec
    from .kstream import _n

    if joiner is None or not callable(joiner):
        raise TopologyException("a KTable-KTable join needs joiner(left_value, right_value)")
    b = table.builder
    topo = b.topology
    store = None
    if materialized is not None:
        store = materialized.store_name or topo.names.store_name("KTABLE-MERGE")
    jname = _n(named)
    merge = jname or topo.names.new("KTABLE-MERGE")
    join_this = f"{jname}-join-this" if jname else topo.names.new("KTABLE-JOINTHIS")
    join_other = f"{jname}-join-other" if jname else topo.names.new("KTABLE-JOINOTHER")
    if kind in ("left", "outer"):
        table._enable_sending_old_values(True)
    if kind == "outer":
        other._enable_sending_old_values(True)
    this_getter = value_getter(table)
    other_getter = value_getter(other)
    topo.copartition_groups.append(frozenset(table.source_topics + other.source_topics))
    topo.add_node(join_this, TableTableJoinOp(kind, joiner, True, "this", other_getter.store, other_getter),  # type: ignore[arg-type]
                  (table.node,), other_getter.store_names())
    topo.add_node(join_other, TableTableJoinOp(kind, joiner, False, "other", this_getter.store, this_getter),  # type: ignore[arg-type]
                  (other.node,), this_getter.store_names())
    stores: tuple[str, ...] = ()
    key_serde = table.key_serde
    if store is not None:
        assert materialized is not None
        m = replace(materialized, key_serde=materialized.key_serde or table.key_serde)
        topo.add_store(kv_store_spec(store, m))
        stores = (store,)
        key_serde = m.key_serde
    topo.add_node(merge, TableTableJoinOp(kind, joiner, True, "merge", store=store), (join_this, join_other), stores)  # type: ignore[arg-type]
    if store is not None:
        topo.store_writers[store] = merge
    return _JoinResultTable(b, merge, table.source_topics + other.source_topics, store=store, key_serde=key_serde,
                            value_serde=None if materialized is None else materialized.value_serde,
                            join_parents=(table, other), join_kind=kind, joiner=joiner)


def foreign_key_join(
    table: "KTable",
    other: "KTable",
    foreign_key_extractor: Callable[..., Any],
    joiner: Callable[[Any, Any], Any] | None = None,
    named: Named | str | None = None,
    materialized: Materialized | None = None,
    *,
    left: bool = False,
    extractor_with_key: bool = False,
) -> "KTable":
    """KTable-KTable foreign-key join (KIP-213): each row of this table joins the row of
    ``other`` whose key is ``foreign_key_extractor(value)`` (``(key, value)`` with
    ``extractor_with_key``); results are keyed by this table's key.

    * updates of this table: a new/changed row emits ``joiner(value, other_value)`` when
      the foreign row exists (inner), or always (left: ``joiner(value, None)`` if absent);
      a row whose foreign key changed to a missing row emits a tombstone (inner); a deleted
      row emits a tombstone (possibly "unnecessary": it cannot be known whether a result
      existed); an inner-join row with a null foreign key is dropped (``dropped-records``)
      after retracting its old result; a left-join row with a null foreign key joins None
      (KIP-962);
    * updates of ``other``: every row of this table currently referencing that key is
      re-joined (in primary-key order), a delete yields tombstones (inner) or
      ``joiner(value, None)`` (left);
    * results computed for an outdated left value are dropped (value hash mismatch).

    Timestamps: ``max(left row, right row)`` for results triggered by the left side, the
    right row's for results triggered by the right side. With a named ``materialized`` the
    result table is stored (``KTABLE-FK-JOIN-OUTPUT-STATE-STORE-n`` is generated
    otherwise, unused as Kafka).

    Raises:
        TopologyException: if ``joiner`` is missing or a table cannot be read by key.
    """
    from .builder import kv_store_spec
    from .ktable import KTable
    from .kstream import _n

    if joiner is None or not callable(joiner) or not callable(foreign_key_extractor):
        raise TopologyException("a foreign-key join needs foreign_key_extractor(value) and joiner(left, right)")
    b = table.builder
    topo = b.topology
    nm = _n(named)

    def name(suffix: str, prefix: str) -> str:
        return f"{nm}{suffix}" if nm else topo.names.new(prefix)

    sub_topic = name("-subscription-registration", "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION") + "-topic"
    send = name("-subscription-registration-processor", "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION")
    sub_sink = name("-subscription-registration-sink", "KTABLE-SINK")
    sub_source = name("-subscription-registration-source", "KTABLE-SOURCE")
    sub_store = name("-subscription-store", "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE")
    receive = name("-subscription-receive", "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR")
    join_foreign = name("-subscription-join-foreign", "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR")
    foreign_table = name("-foreign-join-subscription", "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR")
    resp_topic = name("-subscription-response", "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE") + "-topic"
    resp_sink = name("-subscription-response-sink", "KTABLE-SINK")
    resp_source = name("-subscription-response-source", "KTABLE-SOURCE")
    resolver = name("-subscription-response-resolver", "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR")
    result = name("-result", "KTABLE-FK-JOIN-OUTPUT")
    m = materialized or Materialized()
    result_store = m.store_name or topo.names.store_name("KTABLE-FK-JOIN-OUTPUT")
    queryable = m.store_name is not None

    other._enable_sending_old_values(True)
    table._enable_sending_old_values(True)
    this_getter = value_getter(table)
    other_getter = value_getter(other)
    hash_store = this_getter.store if not this_getter.steps else None
    pk_serde, fk_serde = table.key_serde, other.key_serde
    if fk_serde is None and other.source_topics and all(t in topo.internal_topics for t in other.source_topics):
        fk_serde = ORDERED_KEY  # the right table is fed by repartition topics: keyed as they are
    keys = dict(key_serde=pk_serde, foreign_key_serde=fk_serde)

    topo.add_node(send, ForeignKeyJoinOp("subscribe", foreign_key_extractor, left=left, extractor_with_key=extractor_with_key,
                                         hash_store=hash_store, **keys), (table.node,), (hash_store,) if hash_store else ())  # type: ignore[arg-type]
    topo.add_internal_topic(InternalTopic(sub_topic))
    topo.add_node(sub_sink, SinkOp(sub_topic, None, fk_serde, None, subscription_partition, repartition=True), (send,))
    topo.add_node(sub_source, SourceOp((sub_topic,), fk_serde, None, repartition=True))
    topo.copartition_groups.append(frozenset((sub_topic,) + other.source_topics))
    topo.add_store(StoreSpec(sub_store, "timestamped_key_value", Serdes.Bytes(), None))
    topo.add_node(receive, ForeignKeyJoinOp("receive", stores=(sub_store,), **keys), (sub_source,), (sub_store,))  # type: ignore[arg-type]
    topo.add_node(join_foreign, ForeignKeyJoinOp("join_foreign", getter=other_getter, **keys), (receive,), other_getter.store_names())  # type: ignore[arg-type]
    topo.add_node(foreign_table, ForeignKeyJoinOp("foreign_table", stores=(sub_store,), **keys), (other.node,), (sub_store,))  # type: ignore[arg-type]
    topo.add_internal_topic(InternalTopic(resp_topic))
    topo.add_node(resp_sink, SinkOp(resp_topic, None, pk_serde, None, response_partition, repartition=True), (join_foreign, foreign_table))
    topo.add_node(resp_source, SourceOp((resp_topic,), pk_serde, None, repartition=True))
    topo.copartition_groups.append(frozenset((resp_topic,) + table.source_topics))
    topo.add_node(resolver, ForeignKeyJoinOp("resolve", joiner=joiner, left=left, getter=this_getter, hash_store=hash_store, **keys),  # type: ignore[arg-type]
                  (resp_source,), this_getter.store_names())
    topo.add_node(result, TableSourceOp(None), (resolver,))
    out = KTable(b, result, table.source_topics + (resp_topic,), key_serde=pk_serde, value_serde=m.value_serde, kind="source",
                 pending_store=kv_store_spec(result_store, replace(m, key_serde=m.key_serde or pk_serde)), queryable=queryable)
    if queryable:
        out._ensure_materialized()
    return out


def value_getter(table: "KTable") -> TableValueGetter:
    """How to read ``table`` by key (Kafka's ``KTableImpl#valueGetterSupplier``): its store
    (a lazily materialized source table is materialized now, as Kafka's
    ``KTableSource#materialize``), else its parent's getter plus the filter/mapValues step,
    else the join view of a non-materialized KTable-KTable join.

    Raises:
        TopologyException: for a table that cannot be read by key (e.g. after suppress).
    """
    from ..graph.ops import SuppressOp, TableFilterOp, TableMapValuesOp

    kind = getattr(table, "_kind", "other")
    if kind == "source" or table._store is not None:
        store = table.store
        if store is None:
            raise TopologyException(f"{table.node}: this KTable has no store and cannot be read by key in a join")
        return TableValueGetter(store=store)
    if isinstance(table, _JoinResultTable):
        this, other = table._join_parents
        return TableValueGetter(join=(table._join_kind, table._joiner, value_getter(this), value_getter(other)))  # type: ignore[arg-type]
    op = table.builder.topology.nodes[table.node].op
    if kind in ("filter", "map_values") and isinstance(op, (TableFilterOp, TableMapValuesOp)) and table._parent is not None:
        parent = value_getter(table._parent)
        return replace(parent, steps=parent.steps + (op,))
    if kind == "suppress" and isinstance(op, SuppressOp) and table._parent is not None:
        # Kafka's KTableSuppressProcessorSupplier#view: the buffer's prior value for a
        # buffered key, the parent's value otherwise
        return TableValueGetter(suppress=(op.store, value_getter(table._parent)))
    raise TopologyException(f"{table.node}: cannot look up a KTable produced by {type(op).__name__} in a join")


def _join_result_table_class() -> type:
    from .ktable import KTable

    class JoinResultTable(KTable):
        """The KTable of a primary-key KTable-KTable join. Asking it for old values
        forces both joined tables to send theirs (Kafka's
        ``KTableKTableJoinMerger#enableSendingOldValues``)."""

        def __init__(self, *args: Any, join_parents: tuple["KTable", "KTable"], join_kind: str,
                     joiner: Callable[[Any, Any], Any], **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._join_parents = join_parents
            self._join_kind = join_kind
            self._joiner = joiner

        def _enable_sending_old_values(self, force_materialization: bool) -> bool:
            for parent in self._join_parents:
                parent._enable_sending_old_values(True)
            return True

    return JoinResultTable


_JoinResultTable: Any = _join_result_table_class()
