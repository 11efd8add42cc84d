"""Grouped and windowed streams and grouped tables: the aggregation entry points."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..errors import TopologyException
from ..graph.nodes import StoreSpec
from ..graph.ops import AggregateOp, TableAggregateOp
from ..options import Grouped, Materialized, Named
from ..windows import SessionWindows, SlidingWindows, TimeWindows
from .ktable import KTable

if TYPE_CHECKING:
    from .builder import StreamsBuilder
    from .kstream import KStream


def _agg_node(stream: "KStream", grouped: Grouped, op_kind: str, initializer: Any, aggregator: Any, materialized: Materialized | None,
              named: Named | str | None, windows: Any = None, merger: Any = None) -> KTable:
    from .builder import kv_store_spec

    b = stream.builder
    topo = b.topology
    m = materialized or Materialized()
    store = m.store_name or topo.names.store_name("KSTREAM-AGGREGATE" if op_kind != "reduce" else "KSTREAM-REDUCE")
    s = stream._maybe_repartition(store, grouped)
    name = b._name(named.name if isinstance(named, Named) else named, "KSTREAM-AGGREGATE" if op_kind != "reduce" else "KSTREAM-REDUCE")
    grace = 0
    if windows is None:
        spec = kv_store_spec(store, m)
    elif isinstance(windows, TimeWindows):
        grace = windows.grace_ms
        min_ret = windows.size_ms + windows.grace_ms
        if m.retention_ms is not None and m.retention_ms < min_ret:
            raise TopologyException(f"The retention period of the window store {store} must be no smaller than its window size plus the grace period. Got size=[{windows.size_ms}], grace=[{windows.grace_ms}], retention=[{m.retention_ms}]")
        spec = StoreSpec(store, "window", m.key_serde, m.value_serde, in_memory=m.store_type == "in_memory", caching=m.caching_enabled,
                         logging=m.logging_enabled, retention_ms=m.retention_ms or min_ret, window_size_ms=windows.size_ms)
    elif isinstance(windows, SlidingWindows):
        grace = windows.grace_ms
        min_ret = windows.time_difference_ms * 2 + windows.grace_ms
        spec = StoreSpec(store, "window", m.key_serde, m.value_serde, in_memory=m.store_type == "in_memory", caching=m.caching_enabled,
                         logging=m.logging_enabled, retention_ms=max(m.retention_ms or 0, min_ret), window_size_ms=windows.time_difference_ms)
    elif isinstance(windows, SessionWindows):
        grace = windows.grace_ms
        min_ret = windows.gap_ms + windows.grace_ms
        spec = StoreSpec(store, "session", m.key_serde, m.value_serde, in_memory=m.store_type == "in_memory", caching=False,
                         logging=m.logging_enabled, retention_ms=max(m.retention_ms or 0, min_ret))
    else:
        raise TypeError(f"unsupported windows {windows!r}")
    topo.add_store(spec)
    topo.add_node(name, AggregateOp(op_kind, store, initializer, aggregator, windows, merger), (s.node,), (store,))  # type: ignore[arg-type]
    topo.store_writers[store] = name
    return KTable(b, name, s.source_topics, store=store, windowed=windows is not None, grace_ms=grace)


class KGroupedStream:
    """A stream grouped by key, ready to aggregate (Kafka's KGroupedStream)."""

    def __init__(self, stream: "KStream", grouped: Grouped) -> None:
        self.stream = stream
        self.grouped = grouped

    def count(self, materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """Count records per key (null keys/values are skipped)."""
        return _agg_node(self.stream, self.grouped, "count", None, None, materialized, named)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``reducer(aggregate, value)``; the first value of a key is its aggregate."""
        return _agg_node(self.stream, self.grouped, "reduce", None, reducer, materialized, named)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``aggregator(key, value, aggregate)`` starting from ``initializer()``."""
        return _agg_node(self.stream, self.grouped, "aggregate", initializer, aggregator, materialized, named)

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

    def count(self, materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        return _agg_node(self.grouped.stream, self.grouped.grouped, "count", None, None, materialized, named, self.windows)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        return _agg_node(self.grouped.stream, self.grouped.grouped, "reduce", None, reducer, materialized, named, self.windows)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        return _agg_node(self.grouped.stream, self.grouped.grouped, "aggregate", initializer, aggregator, materialized, named, self.windows)


class SessionWindowedKStream:
    """A grouped stream with session windows; ``aggregate`` also takes a ``merger``."""

    def __init__(self, grouped: KGroupedStream, windows: SessionWindows) -> None:
        self.grouped = grouped
        self.windows = windows

    def count(self, materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        return _agg_node(self.grouped.stream, self.grouped.grouped, "count", None, None, materialized, named, self.windows)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        return _agg_node(self.grouped.stream, self.grouped.grouped, "reduce", None, reducer, materialized, named, self.windows)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], merger: Callable[[Any, Any, Any], Any],
                  materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``merger(key, agg1, agg2)`` combines two sessions that a record bridges."""
        return _agg_node(self.grouped.stream, self.grouped.grouped, "aggregate", initializer, aggregator, materialized, named, self.windows, merger)


class KGroupedTable:
    """A re-grouped table (after ``KTable.group_by``), always repartitioned."""

    def __init__(self, builder: "StreamsBuilder", select_node: str, grouped: Grouped) -> None:
        self.builder = builder
        self.select_node = select_node
        self.grouped = grouped

    def _agg(self, kind: str, initializer: Any, adder: Any, subtractor: Any, materialized: Materialized | None, named: Named | str | None) -> KTable:
        from .builder import kv_store_spec

        topo = self.builder.topology
        m = materialized or Materialized()
        store = m.store_name or topo.names.store_name("KTABLE-AGGREGATE" if kind != "reduce" else "KTABLE-REDUCE")
        src = self.builder._repartition(self.select_node, self.grouped.name or store, key_serde=self.grouped.key_serde)
        name = self.builder._name(named.name if isinstance(named, Named) else named, "KTABLE-AGGREGATE" if kind != "reduce" else "KTABLE-REDUCE")
        topo.add_store(kv_store_spec(store, m))
        topo.add_node(name, TableAggregateOp(kind, store, initializer, adder, subtractor), (src,), (store,))  # type: ignore[arg-type]
        topo.store_writers[store] = name
        return KTable(self.builder, name, (f"{self.grouped.name or store}-repartition",), store=store)

    def count(self, materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """Rows per new key: +1 for an added row, -1 for a removed or moved one."""
        return self._agg("count", None, None, None, materialized, named)

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``adder(agg, new_value)`` and ``subtractor(agg, old_value)``."""
        return self._agg("reduce", None, adder, subtractor, materialized, named)

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any], subtractor: Callable[[Any, Any, Any], Any],
                  materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """``adder(key, new_value, agg)`` and ``subtractor(key, old_value, agg)``."""
        return self._agg("aggregate", initializer, adder, subtractor, materialized, named)
