"""Cogrouped streams (KIP-150; Kafka's ``CogroupedKStream``): several grouped streams with
the same key type aggregated into ONE table, each with its own aggregator.

    totals = (clicks.group_by_key().cogroup(lambda k, v, agg: agg + v)
              .cogroup(purchases.group_by_key(), lambda k, v, agg: agg + 10 * v)
              .aggregate(lambda: 0))

Stateful: one store (timestamped key-value, or window/session store when windowed) shared
by one aggregation processor per input (``COGROUPKSTREAM-AGGREGATE-<n>``), whose results
meet in ``COGROUPKSTREAM-MERGE-<n>``. Records with a null key or value are dropped; an
input whose key was changed is repartitioned first through
``<grouped name or store>-repartition``; the inputs must be co-partitioned. The result's
timestamp is the largest timestamp of the records in it. Names and their order are
Kafka's (``CogroupedStreamAggregateBuilder``): the store, the repartitions, then the
aggregation nodes and the merge node (``<named>-cogroup-agg-<i>`` and
``<named>-cogroup-merge`` when ``named`` is given).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..graph.ops import CogroupOp, MergeOp
from ..options import Materialized, Named
from ..windows import SessionWindows, SlidingWindows, TimeWindows
from .ktable import KTable

if TYPE_CHECKING:
    from .builder import StreamsBuilder
    from .grouped import KGroupedStream

Aggregator = Callable[[Any, Any, Any], Any]


class CogroupedKStream:
    """Grouped streams and their aggregators, in the order they were cogrouped."""

    def __init__(self, builder: "StreamsBuilder") -> None:
        self.builder = builder
        self._patterns: dict[int, tuple["KGroupedStream", Aggregator]] = {}

    def cogroup(self, grouped_stream: "KGroupedStream", aggregator: Aggregator) -> "CogroupedKStream":
        """Add ``grouped_stream`` with ``aggregator(key, value, agg) -> agg``. Cogrouping the
        same grouped stream again replaces its aggregator (Kafka keeps a LinkedHashMap).
        Returns this object (mutable, as Kafka's)."""
        if grouped_stream is None or aggregator is None:
            raise ValueError("grouped_stream and aggregator can't be None")
        key = id(grouped_stream)
        self._patterns[key] = (grouped_stream, aggregator)
        return self

    def windowed_by(self, windows: TimeWindows | SlidingWindows | SessionWindows) -> "WindowedCogroupedKStream":
        """Aggregate per time, sliding or session window (results keyed by ``Windowed``)."""
        return WindowedCogroupedKStream(self, windows)

    def aggregate(self, initializer: Callable[[], Any], materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """One aggregate per key, starting from ``initializer()``; returns the KTable of it.

        Raises:
            TopologyException: if the retention of a windowed store is too short.
        """
        return _build(self, initializer, materialized, named, None, None)


class WindowedCogroupedKStream:
    """A cogrouped stream with windows (Kafka's TimeWindowedCogroupedKStream and
    SessionWindowedCogroupedKStream)."""

    def __init__(self, cogrouped: CogroupedKStream, windows: TimeWindows | SlidingWindows | SessionWindows) -> None:
        self.cogrouped = cogrouped
        self.windows = windows

    def aggregate(self, initializer: Callable[[], Any], merger: Callable[[Any, Any, Any], Any] | Materialized | None = None,
                  materialized: Materialized | None = None, named: Named | str | None = None) -> KTable:
        """Per-window aggregates from ``initializer()``. Session windows need
        ``merger(key, agg1, agg2)`` (the second argument), which combines two sessions that
        a record bridges.

        Raises:
            ValueError: session windows without a merger.
        """
        if isinstance(merger, Materialized):
            materialized, merger = merger, None
        if isinstance(self.windows, SessionWindows) and merger is None:
            raise ValueError("session windows need a session merger")
        return _build(self.cogrouped, initializer, materialized, named, self.windows, merger)


def _build(cg: CogroupedKStream, initializer: Callable[[], Any], materialized: Materialized | None, named: Named | str | None,
           windows: Any, merger: Any) -> KTable:
    from .grouped import aggregation_store_spec

    if not cg._patterns:
        raise ValueError("nothing to cogroup")
    b = cg.builder
    topo = b.topology
    m = materialized or Materialized()
    given = named.name if isinstance(named, Named) else named
    store = m.store_name or topo.names.store_name("COGROUPKSTREAM-AGGREGATE")
    spec = aggregation_store_spec(store, m, windows)
    # repartitions first (Kafka's processRepartitions), then copartitioning of all inputs
    parents = [(gs._repartitioned_node(store), agg) for gs, agg in cg._patterns.values()]
    topics: set[str] = set()
    for s, _ in parents:
        topics.update(s.source_topics)
    if len(parents) > 1:
        topo.copartition_groups.append(frozenset(topics))
    topo.add_store(spec)
    agg_nodes = []
    for i, (s, agg) in enumerate(parents):
        name = f"{given}-cogroup-agg-{i}" if given else topo.names.new("COGROUPKSTREAM-AGGREGATE")
        topo.add_node(name, CogroupOp(store, initializer, agg, windows, merger), (s.node,), (store,))
        agg_nodes.append(name)
    merge = f"{given}-cogroup-merge" if given else topo.names.new("COGROUPKSTREAM-MERGE")
    topo.add_node(merge, MergeOp(), tuple(agg_nodes))
    topo.store_writers[store] = agg_nodes[0]
    grace = 0 if windows is None else windows.grace_ms
    return KTable(b, merge, tuple(sorted(topics)), store=store, windowed=windows is not None, grace_ms=grace)
