"""``KTable.suppress``, ported from Kafka Streams' ``KTableSuppressProcessorSupplier`` and
``InMemoryTimeOrderedKeyValueChangeBuffer`` (KIP-328).

Each update ``Change(new, old)`` is buffered under its key with a *buffer time*:

* ``until_window_closes``: the window end of the ``Windowed`` key (Kafka's
  ``WindowEndTimeDefinition``); the suppress duration is the upstream windows' grace (for
  session windows: gap + grace), so a window's final result is emitted once the
  processor's observed stream time reaches ``window end + duration``. Tombstones are
  dropped at emission (``safeToDropTombstones``).
* ``until_time_limit(ms)``: the timestamp of the record that first buffered the key
  (``RecordTimeDefinition``); emitted once stream time reaches ``that + ms``.
  Tombstones are emitted.

Semantics kept from Kafka:

* time is the processor's own observed stream time: the largest timestamp of the records
  it has received (never the wall clock);
* "non-resetting": a later update of a buffered key replaces its value but keeps the
  key's place (buffer time) in the queue;
* the prior value: the emitted ``Change`` carries the latest update's new and old value;
* emission order is by (buffer time, serialized key); the emitted record keeps the
  timestamp and headers of the latest update of that key;
* after each record, every entry with ``buffer time <= stream time - duration`` is
  emitted; then, if the buffer holds more than ``max_records`` records (or more than
  ``max_bytes`` bytes), it either emits the oldest entries early (``emit_early_when_full``)
  or fails with :class:`StreamsException` (``shut_down_when_full``, the only mode
  ``until_window_closes`` accepts).

The buffer is persisted, one entry per key, in the op's key-value store (its changelog
restores it), as Kafka's buffer logs it: at each commit, once per key changed since the last
one (its entry, or a tombstone when it was emitted), so a key buffered and emitted between
two commits costs no store write unless an earlier commit wrote it. Readers of the
suppressed table (:func:`buffered_prior`) read the buffer itself. ``max_bytes`` uses an
estimate of the entry size (8 bytes of buffer time plus the pickled key and values), not
Kafka's exact serialized size.
"""
from __future__ import annotations

import heapq
import pickle
import struct
from dataclasses import dataclass
from typing import Any

from ...errors import StreamsException
from ...state.keys import encode_key
from ...windows import Windowed
from ..api import Change, Record
from ..internals import InternalProcessorContext
from .base import OpProcessor

_Q = struct.Struct(">q")


def buffer_sort_key(key: Any) -> bytes:
    """Bytes ordering buffered keys of the same buffer time, as Kafka orders them by their
    serialized key: the key's order-preserving encoding, then for a windowed key its
    window start (and end)."""
    if isinstance(key, Windowed):
        return encode_key(key.key) + _Q.pack(key.window.start) + _Q.pack(key.window.end)
    return encode_key(key)


@dataclass
class _Entry:
    """One buffered key: its buffer time and the latest update (Kafka's BufferValue)."""

    time: int
    sort_key: bytes
    key: Any
    new: Any
    old: Any
    timestamp: int
    headers: list[tuple[str, bytes | None]]
    prior: Any = None
    topic: str = ""

    def stored(self) -> dict[str, Any]:
        """The entry as persisted in the buffer's store (restored by ``_Entry(**stored)``)."""
        return {"time": self.time, "sort_key": self.sort_key, "key": self.key, "new": self.new, "old": self.old,
                "timestamp": self.timestamp, "headers": self.headers, "prior": self.prior, "topic": self.topic}

    def size(self) -> int:
        """Kafka's ``computeRecordSize`` estimate: buffer time (8) + serialized key + the
        prior, old (when not the prior) and new values + the record context (timestamp 8,
        offset 8, topic characters, partition 4, header keys and values). Values are sized
        pickled, keys with the store key encoding: close to, not equal to, Kafka's bytes."""
        n = 8 + len(self.sort_key)
        values = [self.prior, self.new] + ([] if self.old is self.prior else [self.old])
        for v in values:
            if v is not None:
                n += len(pickle.dumps(v, protocol=5))
        n += 8 + 8 + len(self.topic) + 4
        for hk, hv in self.headers:
            n += len(hk) + (len(hv) if hv else 0)
        return n


class SuppressProcessor(OpProcessor):
    """``SuppressOp``: buffers table updates and emits them as the module docstring says."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        s = self.op.suppressed
        self.store: Any = context.get_state_store(self.op.store)
        self.final = s.kind == "window_close"
        self.duration = self.op.grace_ms if self.final else s.time_limit_ms
        self.max_records = s.buffer.max_records
        self.max_bytes = s.buffer.max_bytes
        self.shut_down_when_full = s.buffer.shut_down_when_full
        self.observed_stream_time = -1
        self.entries: dict[bytes, _Entry] = {}
        #: keys changed since the last commit, in order (written by :meth:`write_pending`)
        self.dirty: dict[bytes, None] = {}
        #: keys whose entry the store holds (a tombstone is written only for them)
        self.persisted: set[bytes] = set()
        #: each buffered key's size estimate (:meth:`_Entry.size`, which pickles the values),
        #: kept only under a ``max_bytes`` bound: computed once per update, never on eviction
        self.sizes: dict[bytes, int] | None = None if self.max_bytes is None else {}
        self.queue: list[tuple[int, bytes]] = []
        self.size_bytes = 0
        for _, e in self.store.all():  # restore the buffer from its store (changelog)
            entry = _Entry(**e)
            self.entries[entry.sort_key] = entry
            self.persisted.add(entry.sort_key)
            self._account(entry)
            heapq.heappush(self.queue, (entry.time, entry.sort_key))
        self.store.pending_writer = self.write_pending
        self.store.suppress_entries = self.entries

    # ------------------------------------------------------------------ buffer
    def _buffer_time(self, record: Record[Any, Any]) -> int:
        if self.final:
            if not isinstance(record.key, Windowed):
                raise StreamsException(f"{self.node.name}: until_window_closes needs windowed keys, got {record.key!r}")
            return record.key.window.end
        return record.timestamp

    def write_pending(self) -> None:
        """Write each key changed since the last commit to the store (and its changelog):
        its entry, or a tombstone if the store holds an earlier one (the task's commit
        calls it, after the caches' flushes)."""
        entries, persisted, put = self.entries, self.persisted, self.store.put
        for sk in self.dirty:
            entry = entries.get(sk)
            if entry is not None:
                put(sk, entry.stored())
                persisted.add(sk)
            elif sk in persisted:
                put(sk, None)
                persisted.discard(sk)
        self.dirty.clear()

    def _account(self, entry: _Entry) -> None:
        """Add ``entry``'s size to ``size_bytes`` in place of its key's previous one (only
        under a ``max_bytes`` bound: unbounded and ``max_records`` buffers never size)."""
        sizes = self.sizes
        if sizes is not None:
            n = entry.size()
            self.size_bytes += n - sizes.get(entry.sort_key, 0)
            sizes[entry.sort_key] = n

    def _unaccount(self, sort_key: bytes) -> None:
        if self.sizes is not None:
            self.size_bytes -= self.sizes.pop(sort_key)

    def _put(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        sk = buffer_sort_key(record.key)
        prev = self.entries.get(sk)
        meta = self.context.record_metadata()
        topic = meta.topic if meta is not None else ""
        if prev is None:
            entry = _Entry(self._buffer_time(record), sk, record.key, change.new, change.old, record.timestamp, list(record.headers),
                           change.old, topic)
            self.entries[sk] = entry
            heapq.heappush(self.queue, (entry.time, sk))
        else:
            entry = _Entry(prev.time, sk, record.key, change.new, change.old, record.timestamp, list(record.headers), prev.prior, topic)
            self.entries[sk] = entry
        self._account(entry)
        self.dirty[sk] = None

    def _min_time(self) -> int | None:
        return self.queue[0][0] if self.queue else None

    def _evict_one(self) -> None:
        _, sk = heapq.heappop(self.queue)
        entry = self.entries.pop(sk)
        self._unaccount(sk)
        self.dirty[sk] = None
        if entry.new is not None or not self.final:
            self.forward(Record(entry.key, Change(entry.new, entry.old), entry.timestamp, entry.headers))

    def _over_capacity(self) -> bool:
        return (self.max_records is not None and len(self.entries) > self.max_records) or (
            self.max_bytes is not None and self.size_bytes > self.max_bytes
        )

    # ------------------------------------------------------------------ processing
    def process(self, record: Record[Any, Any]) -> None:
        self.observed_stream_time = max(self.observed_stream_time, record.timestamp)
        self._put(record)
        expiry = self.observed_stream_time - self.duration
        while self.queue and self.queue[0][0] <= expiry:
            self._evict_one()
        if self._over_capacity():
            if self.shut_down_when_full:
                raise StreamsException(
                    f"{self.node.name} buffer exceeded its max capacity. Currently [{len(self.entries)}/{self.max_records}] "
                    f"records and [{self.size_bytes}/{self.max_bytes}] bytes."
                )
            while self.queue and self._over_capacity():
                self._evict_one()


def buffered_prior(buffer_store: Any, key: Any) -> tuple[bool, Any]:
    """``(buffered, prior)``: whether the suppress buffer of ``buffer_store`` holds ``key``
    and, if so, the value last emitted for it (Kafka's
    ``InMemoryTimeOrderedKeyValueChangeBuffer#priorValueForBuffered``). Reads the
    processor's buffer, which is ahead of the store between commits."""
    sk = buffer_sort_key(key)
    entries: dict[bytes, _Entry] | None = getattr(buffer_store, "suppress_entries", None)
    if entries is not None:
        entry = entries.get(sk)
        return (False, None) if entry is None else (True, entry.prior)
    stored = buffer_store.get(sk)  # the processor is not initialized in this task yet
    return (False, None) if stored is None else (True, stored.get("prior"))
