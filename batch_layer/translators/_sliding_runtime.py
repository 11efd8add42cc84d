"""Worker-side code of the sliding-window translation (KIP-450; ``aggregate``): per key,
the speed layer's own ``SlidingWindowAggregateProcessor`` replays the key's records in
batch order over an in-memory window store (no cache, no changelog, no expiry), and the
key's windows are read back as view rows.

Sliding windows are not a function of each record alone (a record creates its left window
from the previous record's, and the previous record's right window; a record at a
timestamp already seen only updates windows), so the translation runs the processor's
code instead of re-deriving it. Stream time is reset per key: with the input in batch
order a record is never older than the stream time its task has observed, so neither the
per-key nor the per-task stream time drops anything (grace never matters in batch). An
aggregator that raises drops the record after the windows it already updated, as in the
speed layer. Emission (``ON_WINDOW_CLOSE`` included) only forwards, so it is skipped: the
store's content is the same.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

from speed_layer.graph.nodes import GraphNode, StoreSpec
from speed_layer.processor.api import Record
from speed_layer.processor.builtin.sliding import SlidingWindowAggregateProcessor
from speed_layer.state.factories import build_store
from speed_layer.state.keys import decode_key

from ..general.store_rows import key_text
from ..general.topology import FULL_HISTORY_MS
from ._folds import _Fold
from ._records import Errors, add_error
from ._replay_context import ReplayContext
from ._values import decode_value


class _ReplayProcessor(SlidingWindowAggregateProcessor):
    """The processor without emission (see the module docstring)."""

    def _maybe_forward_final(self, record: Record[Any, Any], close_time: int) -> None:
        return None


def _discard(record: Record[Any, Any]) -> None:
    """Forwards go nowhere: the view is the store (emission is skipped, see above)."""


class SlidingFold(_Fold):
    """Sliding-window count / reduce / aggregate of a bucket of keys (rows of
    :data:`_records.AGG_SCHEMA`): view rows ``(key, start, start + D, value, timestamp)``
    of every window of the store."""

    def __init__(self, node: str, op: Any, errors_acc: Any, spec: StoreSpec) -> None:
        super().__init__(node, op, errors_acc)
        self.spec = replace(spec, in_memory=True, caching=False, logging=False, retention_ms=FULL_HISTORY_MS)

    def fold(self, keys: Iterable[tuple[bytes, Iterable[tuple[Any, ...]]]], blk: int, errs: Errors) -> list[tuple[Any, ...]]:
        rows = []
        store = build_store(self.spec, None, None)
        proc = _ReplayProcessor(GraphNode(self.node, self.op))
        proc.init(ReplayContext({self.spec.name: store}, _discard))  # the view is the store
        d = self.op.windows.time_difference_ms
        for _gk, recs in keys:
            proc.observed_stream_time = -1
            key: Any = None
            last = (-1, -1, -1)
            for _, ts, p, o, src, _seq, kb, vb in recs:
                key, last = decode_key(kb), (src, p, o)
                try:
                    proc.process(Record(key, decode_value(vb), ts))
                except Exception:  # noqa: BLE001 - dropped (windows already updated stay updated)
                    add_error(errs, self.node, last)
            for start, vt in store.fetch_with_timestamps(key, 0, 2**62):
                text = self.to_json(vt.value, errs, last)
                if text is not None:
                    rows.append((key_text(key), start, start + d, text, vt.timestamp))
        return rows
