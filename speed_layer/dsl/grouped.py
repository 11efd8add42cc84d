"""Grouped and windowed streams and grouped tables: the aggregation entry points."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from ..errors import TopologyException
from ..graph.nodes import StoreSpec
from ..graph.ops import AggregateOp, TableAggregateOp
from ..options import Grouped, Materialized, Named
from ..windows import EmitStrategy, SessionWindows, SlidingWindows, TimeWindows
from .ktable import KTable

if TYPE_CHECKING:
    from .builder import StreamsBuilder
    from .kstream import KStream


def aggregation_store_spec(store: str, materialized: Materialized, windows: Any) -> StoreSpec:
    """The store of a KGroupedStream (or cogrouped) aggregation: a timestamped key-value
    store, or a window store (time and sliding windows) or session store, with Kafka's
    default retention (time windows: size + grace; sliding: 2 * time difference + grace;
    session: gap + grace) unless ``materialized`` sets one.

    Raises:
        TopologyException: if the given retention is shorter than that minimum (Kafka
        raises IllegalArgumentException with the same message).
    """
    from .builder import kv_store_spec

    m = materialized
    if windows is None:
        return kv_store_spec(store, m)
    if isinstance(windows, TimeWindows):
        min_ret, what = windows.size_ms + windows.grace_ms, "its window size plus the grace period"
        detail = f"size=[{windows.size_ms}], grace=[{windows.grace_ms}]"
        size = windows.size_ms
    elif isinstance(windows, SlidingWindows):
        min_ret, what = windows.time_difference_ms * 2 + windows.grace_ms, "2 * time difference plus the grace period"
        detail = f"time difference=[{windows.time_difference_ms}], grace=[{windows.grace_ms}]"
        size = windows.time_difference_ms
    elif isinstance(windows, SessionWindows):
        min_ret, what = windows.gap_ms + windows.grace_ms, "the session inactivity gap plus the grace period"
        detail = f"gap=[{windows.gap_ms}], grace=[{windows.grace_ms}]"
        size = None
    else:
        raise TypeError(f"unsupported windows {windows!r}")
    if m.retention_ms is not None and m.retention_ms < min_ret:
        kind = "session" if size is None else "window"
        raise TopologyException(f"The retention period of the {kind} store {store} must be no smaller than {what}. "
                                f"Got {detail}, retention=[{m.retention_ms}]")
    retention = m.retention_ms if m.retention_ms is not None else min_ret
    # Kafka's SessionStoreMaterializer and SlidingWindowStoreMaterializer cache no store of an
    # ON_WINDOW_CLOSE aggregation; its WindowStoreMaterializer caches one of time windows
    strategy = getattr(windows, "emit_strategy", None)
    caching = m.caching_enabled and not (isinstance(windows, (SessionWindows, SlidingWindows))
                                         and strategy is not None and strategy.emits_on_close)
    if size is None:
        return StoreSpec(store, "session", m.key_serde, m.value_serde, in_memory=m.store_type == "in_memory", caching=caching,
                         logging=m.logging_enabled, retention_ms=retention)
    return StoreSpec(store, "window", m.key_serde, m.value_serde, in_memory=m.store_type == "in_memory", caching=caching,
                     logging=m.logging_enabled, retention_ms=retention, window_size_ms=size)


def _agg_node(gs: "KGroupedStream", op_kind: str, initializer: Any, aggregator: Any, materialized: Materialized | None,
              named: Named | str | None, windows: Any = None, merger: Any = None) -> KTable:
    """Add a KGroupedStream aggregation, allocating names in Kafka's order: (an extra store
    index burnt by ``count(materialized)`` with an unnamed Materialized), the store name
    ``KSTREAM-AGGREGATE|REDUCE-STATE-STORE-<n>``, the processor name, then the repartition
    nodes (when the key changed) through ``<grouped name or store>-repartition``."""
    b = gs.stream.builder
    topo = b.topology
    m = materialized or Materialized()
    prefix = "KSTREAM-REDUCE" if op_kind == "reduce" else "KSTREAM-AGGREGATE"
    if op_kind == "count" and materialized is not None and materialized.store_name is None:
        topo.names.store_name(prefix)  # Kafka burns a store index in count(Materialized) for compatibility
    store = m.store_name or topo.names.store_name(prefix)
    name = b._name(named.name if isinstance(named, Named) else named, prefix)
    spec = aggregation_store_spec(store, m, windows)
    parent = gs._repartitioned_node(store)
    grace = 0 if windows is None else windows.grace_ms
    topo.add_store(spec)
    topo.add_node(name, AggregateOp(op_kind, store, initializer, aggregator, windows, merger), (parent.node,), (store,))  # type: ignore[arg-type]
    topo.store_writers[store] = name
    return KTable(b, name, parent.source_topics, store=store, windowed=windows is not None, grace_ms=grace, kind="aggregate")


class KGroupedStream:
    """A stream grouped by key, ready to aggregate (Kafka's KGroupedStream)."""

    def __init__(self, stream: "KStream", grouped: Grouped) -> None:
        self.stream = stream
        self.grouped = grouped
        self._repartition: "KStream | None" = None

    def _repartitioned_node(self, store: str) -> "KStream":
        """The stream to aggregate: this one, or (after a key change) the repartition source
        through ``<grouped name or store>-repartition``. With a user-given grouped name the
        repartition topic is created once and shared by every aggregation of this grouped
        stream (Kafka's GroupedStreamAggregateBuilder); the names are still allocated."""
        s = self.stream
        if not s.repartition_required:
            return s
        g = self.grouped
        if self._repartition is not None and g.name is not None:
            s.builder._burn_repartition_names()
            return self._repartition
        self._repartition = s._maybe_repartition(store, g)
        return self._repartition

    def count(self, materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """Count records per key (Kafka's ``KGroupedStream#count``): a KTable whose rows'
        timestamps are the largest timestamp (ms) counted. Stateful (timestamped key-value
        store ``KSTREAM-AGGREGATE-STATE-STORE-<n>``, cached unless disabled); records with a
        null key or value are dropped (``dropped-records``); repartitions first when the key
        was changed. ``count(Materialized)`` without a store name allocates one extra name
        index, as Kafka does."""
        return _agg_node(self, "count", None, None, materialized, named)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``reducer(aggregate, value)``; the first value of a key is its aggregate (Kafka's
        ``KGroupedStream#reduce``, store ``KSTREAM-REDUCE-STATE-STORE-<n>``). Null keys and
        values are dropped; timestamps as ``count``."""
        return _agg_node(self, "reduce", None, reducer, materialized, named)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``aggregator(key, value, aggregate)`` starting from ``initializer()`` (Kafka's
        ``KGroupedStream#aggregate``). Null keys and values are dropped; timestamps as
        ``count``."""
        return _agg_node(self, "aggregate", initializer, aggregator, materialized, named)

    def windowed_by(self, windows: TimeWindows | SlidingWindows | SessionWindows) -> "TimeWindowedKStream | SessionWindowedKStream":
        """Window the aggregation: time (tumbling/hopping), sliding or session windows."""
        if isinstance(windows, SessionWindows):
            return SessionWindowedKStream(self, windows)
        return TimeWindowedKStream(self, windows)

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]) -> Any:
        """Start a cogroup of several grouped streams into one aggregate (KIP-150)."""
        from .cogroup import CogroupedKStream

        return CogroupedKStream(self.stream.builder).cogroup(self, aggregator)


class TimeWindowedKStream:
    """A grouped stream with time or sliding windows; results are keyed by ``Windowed``."""

    def __init__(self, grouped: KGroupedStream, windows: TimeWindows | SlidingWindows) -> None:
        self.grouped = grouped
        self.windows = windows

    def emit_strategy(self, strategy: EmitStrategy) -> "TimeWindowedKStream":
        """Choose when the aggregation emits (KIP-825; Kafka's
        ``TimeWindowedKStream#emitStrategy`` / ``SlidingWindowedKStream#emitStrategy`` since
        3.3). ``EmitStrategy.on_window_update()`` (default): each window update is
        forwarded. ``EmitStrategy.on_window_close()``: each window is forwarded once, as
        ``Change(final aggregate, None)`` with its largest record timestamp, when stream
        time passes ``window end + grace``; windows are looked for at most once per
        ``__emit.interval.ms.kstreams.windowed.aggregation__`` ms of wall-clock time
        (1000 by default, 0 in the TopologyTestDriver), in window-start then key order;
        late records are still dropped and counted. Returns this windowed stream."""
        if not isinstance(strategy, EmitStrategy):
            raise TypeError(f"emit_strategy takes an EmitStrategy, got {strategy!r}")
        self.windows = replace(self.windows, emit_strategy=strategy)
        return self

    def count(self, materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """Count per key and window; a KTable keyed by ``Windowed(key, Window(start, end))``.

        Time windows (Kafka's KStreamWindowAggregate): ``[start, end)`` epoch-aligned; null
        keys are dropped; a window takes records while ``end > observed stream time -
        grace`` (later ones are dropped and counted). Sliding windows (KIP-450, Kafka's
        KStreamSlidingWindowAggregate): ``[start, start + time difference]`` inclusive,
        exposed with ``end = start + time difference``; null keys and values are dropped.
        The store is a window store kept ``size + grace`` ms (sliding: 2 * difference +
        grace) unless ``materialized`` sets a longer retention.

        Raises:
            TopologyException: if the retention given is shorter than that minimum.
        """
        return _agg_node(self.grouped, "count", None, None, materialized, named, self.windows)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``reducer(aggregate, value)`` per key and window (see ``count``)."""
        return _agg_node(self.grouped, "reduce", None, reducer, materialized, named, self.windows)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``aggregator(key, value, aggregate)`` per key and window from ``initializer()``
        (see ``count``)."""
        return _agg_node(self.grouped, "aggregate", initializer, aggregator, materialized, named, self.windows)


class SessionWindowedKStream:
    """A grouped stream with session windows; ``aggregate`` also takes a ``merger``."""

    def __init__(self, grouped: KGroupedStream, windows: SessionWindows) -> None:
        self.grouped = grouped
        self.windows = windows

    def emit_strategy(self, strategy: EmitStrategy) -> "SessionWindowedKStream":
        """Choose when the session aggregation emits (KIP-825; Kafka's
        ``SessionWindowedKStream#emitStrategy`` since 3.3). ``EmitStrategy.on_window_update()``
        (default): every session update, merge tombstones included.
        ``EmitStrategy.on_window_close()``: each session is forwarded once, as
        ``Change(final aggregate, None)`` stamped with its end, when stream time passes
        ``end + gap + grace``; merges are not forwarded; sessions are looked for at most
        once per ``__emit.interval.ms.kstreams.windowed.aggregation__`` ms of wall-clock
        time, in end, start, then key order. Returns this windowed stream."""
        if not isinstance(strategy, EmitStrategy):
            raise TypeError(f"emit_strategy takes an EmitStrategy, got {strategy!r}")
        self.windows = replace(self.windows, emit_strategy=strategy)
        return self

    def count(self, materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """Count per key and session (Kafka's KStreamSessionWindowAggregate): a record joins
        every session of its key within the inactivity gap (ms), merged sessions are
        forwarded as tombstones, then the merged session; each update is stamped with the
        session end. A record is dropped when its merged session ends before observed
        stream time - gap - grace; only null keys are dropped otherwise. The session store
        (cached by default, kept gap + grace ms) folds a removal and a re-put of one session
        within one commit into one update."""
        return _agg_node(self.grouped, "count", None, None, materialized, named, self.windows)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``reducer(aggregate, value)`` per session; merged sessions are combined with the
        reducer (see ``count``)."""
        return _agg_node(self.grouped, "reduce", None, reducer, materialized, named, self.windows)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], merger: Callable[[Any, Any, Any], Any],
                  materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """Per-session aggregate from ``initializer()``; ``merger(key, agg1, agg2)``
        combines the sessions a record bridges: as Kafka, the initial aggregate is merged
        with each found session in store order, then ``aggregator`` adds the record."""
        return _agg_node(self.grouped, "aggregate", initializer, aggregator, materialized, named, self.windows, merger)


class KGroupedTable:
    """A re-grouped table (after ``KTable.group_by``; Kafka's KGroupedTable). Its
    aggregations always read through the repartition topic
    ``<grouped name or store name>-repartition``, whose records carry ``Change`` values
    (subtract the old row, add the new one). Results are KTables whose timestamp is the
    largest timestamp of the rows that built them."""

    def __init__(self, builder: "StreamsBuilder", select_node: str, grouped: Grouped) -> None:
        self.builder = builder
        self.select_node = select_node
        self.grouped = grouped
        self._repartition_source: str | None = None

    def _agg(self, kind: str, initializer: Any, adder: Any, subtractor: Any, materialized: Materialized | None, named: Named | str | None) -> KTable:
        """Names in Kafka's order (KGroupedTableImpl#doAggregate): store
        ``KTABLE-AGGREGATE|REDUCE-STATE-STORE-<n>``, sink ``KSTREAM-SINK-<n>`` (or
        ``<named>-sink``), source ``KSTREAM-SOURCE-<n>`` (or ``<named>-source``), processor
        ``KTABLE-AGGREGATE|REDUCE-<n>`` (or ``<named>``). No null-key filter (table keys are
        never null)."""
        from ..graph.nodes import InternalTopic
        from ..graph.ops import SinkOp, SourceOp
        from .builder import kv_store_spec

        topo = self.builder.topology
        m = materialized or Materialized()
        prefix = "KTABLE-REDUCE" if kind == "reduce" else "KTABLE-AGGREGATE"
        store = m.store_name or topo.names.store_name(prefix)
        given = named.name if isinstance(named, Named) else named
        sink = f"{given}-sink" if given else topo.names.new("KSTREAM-SINK")
        source = f"{given}-source" if given else topo.names.new("KSTREAM-SOURCE")
        name = given or topo.names.new(prefix)
        topic = f"{self.grouped.name or store}-repartition"
        if self._repartition_source is None or self.grouped.name is None:
            g = self.grouped
            topo.add_internal_topic(InternalTopic(topic))
            topo.add_node(sink, SinkOp(topic, None, g.key_serde, None, None, repartition=True), (self.select_node,))
            topo.add_node(source, SourceOp((topic,), g.key_serde, None, repartition=True), ())
            self._repartition_source = source
        topo.add_store(kv_store_spec(store, m))
        topo.add_node(name, TableAggregateOp(kind, store, initializer, adder, subtractor), (self._repartition_source,), (store,))  # type: ignore[arg-type]
        topo.store_writers[store] = name
        return KTable(self.builder, name, (topic,), store=store)

    def count(self, materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """Rows per new key: +1 for an added row, -1 for a removed or moved one. A count
        that drops to 0 stays in the table as 0 (Kafka's KTableAggregate)."""
        return self._agg("count", None, None, None, materialized, named)

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``adder(agg, new_value)`` and ``subtractor(agg, old_value)``; the first value of a
        key is its aggregate. A result of None deletes the row (a tombstone downstream)."""
        return self._agg("reduce", None, adder, subtractor, materialized, named)

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any], subtractor: Callable[[Any, Any, Any], Any],
                  materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``adder(key, new_value, agg)`` and ``subtractor(key, old_value, agg)``, starting
        from ``initializer()``; the subtractor runs first (KIP-904)."""
        return self._agg("aggregate", initializer, adder, subtractor, materialized, named)
