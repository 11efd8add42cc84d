"""The topology and config as the batch layer runs them: window and session stores that
never expire (:func:`full_history`, also the topology a ``TopologyTestDriver`` compared with
batch runs), every store in memory (:func:`in_memory`), and processing errors that never
fail a recompute (:func:`batch_config`)."""
from __future__ import annotations

from dataclasses import replace

from speed_layer.config import StreamsConfig
from speed_layer.topology import Topology

__all__ = ["FULL_HISTORY_MS", "batch_config", "full_history", "in_memory"]


def batch_config(config: StreamsConfig) -> StreamsConfig:
    """The config tasks run with in batch: a record whose deserialization or processing
    fails is never fatal to a recompute of history. ``log_and_fail`` becomes
    ``log_and_continue`` (the record is dropped and counted, as the relational path
    does); ``dead_letter`` stays (the record goes to the dead-letter topic, an output).

    Both wall-clock emit throttles (``__emit.interval.ms.kstreams.outer.join.spurious.results.fix__``
    and ``__emit.interval.ms.kstreams.windowed.aggregation__``) are 0: batch emits on event
    time alone, as Kafka's TopologyTestDriver does. With the 1000 ms default a recompute that
    runs in less than a second would never scan for unmatched outer-join records or closed
    windows."""
    updates: dict[str, object] = {"emit_interval_ms_kstreams_outer_join_spurious_results_fix": 0,
                                  "emit_interval_ms_kstreams_windowed_aggregation": 0}
    for field_name in ("deserialization_exception_handler", "processing_exception_handler"):
        if getattr(config, field_name) == "log_and_fail":
            updates[field_name] = "log_and_continue"
    return config.model_copy(update=updates)


#: the retention of window and session stores in batch (ms): nothing expires
FULL_HISTORY_MS = 2**62


def full_history(topology: Topology) -> Topology:
    """A copy of ``topology`` whose window and session stores never expire, so that a
    store's content after the whole input holds every window ever computed: a batch view
    of a windowed store is the final value of EVERY window (contracts.md), as the speed
    layer's view topic holds it, while the store itself drops windows older than its
    retention.

    Results do not change: a record reaches a window only while stream time is before
    the window's end + grace <= retention (Kafka's rule), and joins fetch within their
    window, so retention only decides what is kept, never what is computed.
    """
    stores = {name: replace(spec, retention_ms=FULL_HISTORY_MS) if spec.kind in ("window", "session") else spec
              for name, spec in topology.stores.items()}
    return replace(topology, stores=stores)


def in_memory(topology: Topology) -> Topology:
    """:func:`full_history` with every store in memory (batch state lives for one task run)."""
    stores = {name: replace(spec, in_memory=True) for name, spec in full_history(topology).stores.items()}
    return replace(topology, stores=stores)
