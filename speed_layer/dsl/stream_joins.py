"""KStream-KStream joins: the DSL side (Kafka's KStreamImpl#doJoin and KStreamImplJoin).

``KStream.join/left_join/outer_join(other_stream, joiner, windows, stream_joined=None)``
dispatch here. The graph built is Kafka's::

    this  -> [repartition] -> KSTREAM-WINDOWED-a -> KSTREAM-JOINTHIS-c  \\
                                                                          KSTREAM-MERGE-e
    other -> [repartition] -> KSTREAM-WINDOWED-b -> KSTREAM-JOINOTHER-d /

with ``OUTERTHIS`` for an outer join's this side and ``OUTEROTHER`` for the other side of
left and outer joins, two retain-duplicates window stores ``<join node>-store`` (retention
``before + after + grace``, window size ``before + after``) and, for left/outer joins, the
shared outer-join store ``KSTREAM-OUTERSHARED-c-store``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..errors import TopologyException
from ..graph.nodes import StoreSpec
from ..graph.ops import JoinWindowStoreOp, MergeOp, StreamStreamJoinOp
from ..options import StreamJoined
from ..serde import Serdes
from ..windows import JoinWindows

if TYPE_CHECKING:
    from .kstream import KStream

__all__ = ["stream_stream_join"]


def stream_stream_join(
    this: "KStream",
    other: "KStream",
    kind: str,
    joiner: Callable[..., Any],
    windows: JoinWindows,
    stream_joined: StreamJoined | None = None,
    *,
    with_key: bool = False,
) -> "KStream":
    """Windowed KStream-KStream ``kind`` ("inner", "left" or "outer") join.

    Semantics (Kafka >= 3.1, ``KStreamKStreamJoin``):

    * a record of either side joins every record of the other side with the same key and
      a timestamp in ``[t - before, t + after]`` (from the other side's view: ``[t - after,
      t + before]``); each match emits ``joiner(left_value, right_value)`` (or
      ``joiner(key, left, right)`` with ``with_key``) keyed by the record key, with
      timestamp ``max(left_ts, right_ts)``, in the other side's timestamp order;
    * records with a null key or value are dropped (``dropped-records``), except that
      left/outer joins forward a null-key left (outer: either side) record at once as
      ``joiner(value, None)`` (KIP-962);
    * left/outer joins emit an unmatched record as ``joiner(value, None)`` (outer: also
      ``joiner(None, value)`` for the right side) with its own timestamp, only once stream
      time (the largest timestamp seen by both sides) passes ``t + after + grace`` (right
      side: ``t + before + grace``) and no match came -- never a spurious early result;
      emission happens when a later record arrives, at most once per
      ``emit.interval.ms.kstreams.outer.join.spurious.results.fix`` (1000 ms) of wall-clock
      time, in ``(timestamp, right-before-left, key)`` order;
    * records older than the window store retention are not stored (no later record can
      join them) and are counted as ``expired-window-record-drop``.

    Repartitions a side that was marked for repartitioning (key changed): through
    ``<name>-left-repartition`` / ``<name>-right-repartition`` when ``stream_joined`` has a
    name, else ``<node>-repartition``; both sides must be co-partitioned.

    Args:
        other: the right-hand stream.
        joiner: ``joiner(left_value, right_value)``.
        windows: a :class:`JoinWindows` (before, after, grace in ms).
        stream_joined: serdes, processor-name prefix (``name``), store-name prefix
            (``store_name``), in-memory stores and changelog logging.

    Raises:
        TopologyException: if ``windows`` is not a JoinWindows.
    """
    from .kstream import KStream

    if not isinstance(windows, JoinWindows):
        raise TopologyException(f"a KStream-KStream join needs JoinWindows, got {type(windows).__name__}")
    if not callable(joiner):
        raise TopologyException("joiner must be callable")
    sj = stream_joined or StreamJoined()
    b = this.builder
    topo = b.topology
    name = sj.name
    left, right = this, other
    if left.repartition_required:
        left = _repartition_for_join(left, f"{name}-left" if name else left.node, sj.key_serde, sj.value_serde)
    if right.repartition_required:
        right = _repartition_for_join(right, f"{name}-right" if name else right.node, sj.key_serde, sj.other_value_serde)
    topo.copartition_groups.append(frozenset(left.source_topics + right.source_topics))

    left_outer = kind in ("left", "outer")
    right_outer = kind == "outer"
    this_suffix = "-outer-this-join" if right_outer else "-this-join"
    other_suffix = "-outer-other-join" if left_outer else "-other-join"
    this_windowed = f"{name}-this-windowed" if name else topo.names.new("KSTREAM-WINDOWED")
    other_windowed = f"{name}-other-windowed" if name else topo.names.new("KSTREAM-WINDOWED")
    this_prefix = "KSTREAM-OUTERTHIS" if right_outer else "KSTREAM-JOINTHIS"
    join_this_generated = topo.names.new(this_prefix)
    join_other_generated = topo.names.new("KSTREAM-OUTEROTHER" if left_outer else "KSTREAM-JOINOTHER")
    join_this = f"{name}{this_suffix}" if name else join_this_generated
    join_other = f"{name}{other_suffix}" if name else join_other_generated
    merge = f"{name}-merge" if name else topo.names.new("KSTREAM-MERGE")

    base = sj.store_name
    this_store = (f"{base}{this_suffix}" if base else join_this_generated) + "-store"
    other_store = (f"{base}{other_suffix}" if base else join_other_generated) + "-store"
    size = windows.before_ms + windows.after_ms
    for store, value_serde in ((this_store, sj.value_serde), (other_store, sj.other_value_serde)):
        topo.add_store(StoreSpec(store, "window", sj.key_serde, value_serde, in_memory=sj.in_memory, logging=sj.logging_enabled,
                                 retention_ms=size + windows.grace_ms, window_size_ms=size, retain_duplicates=True))
    outer_store: str | None = None
    if left_outer:
        shared_suffix = "-outer-shared-join" if right_outer else "-left-shared-join"
        outer_name = f"{base}{shared_suffix}" if base else "KSTREAM-OUTERSHARED" + join_this_generated[len(this_prefix):]
        outer_store = outer_name + "-store"
        topo.add_store(StoreSpec(outer_store, "key_value", Serdes.Bytes(), None, in_memory=sj.in_memory, logging=sj.logging_enabled))
    shared = (outer_store,) if outer_store else ()

    topo.add_node(this_windowed, JoinWindowStoreOp(this_store, windows), (left.node,), (this_store,))
    topo.add_node(other_windowed, JoinWindowStoreOp(other_store, windows), (right.node,), (other_store,))
    common = dict(joiner=joiner, windows=windows, left_outer=left_outer, right_outer=right_outer, outer_store=outer_store,
                  joiner_with_key=with_key, key_serde=sj.key_serde)
    topo.add_node(join_this, StreamStreamJoinOp(this_store, other_store, this_is_left=True, **common), (this_windowed,), (other_store,) + shared)  # type: ignore[arg-type]
    topo.add_node(join_other, StreamStreamJoinOp(other_store, this_store, this_is_left=False, **common), (other_windowed,), (this_store,) + shared)  # type: ignore[arg-type]
    topo.add_node(merge, MergeOp(), (join_this, join_other))
    return KStream(b, merge, left.source_topics + right.source_topics, key_serde=sj.key_serde)


def _repartition_for_join(stream: "KStream", base: str, key_serde: Any, value_serde: Any) -> "KStream":
    """Kafka's KStreamImpl#repartitionForJoin: ``<base>-repartition`` (null keys dropped unless
    the join is a left or outer one, KIP-962: see ``builder.relax_null_key_repartitions``)."""
    from .kstream import KStream

    src = stream.builder._repartition(stream.node, base, key_serde=key_serde, value_serde=value_serde)
    return KStream(stream.builder, src, (f"{base}-repartition",), key_serde=key_serde, value_serde=value_serde)
