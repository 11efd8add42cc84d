"""KStream-KStream and KTable-KTable join processors, and KTable value getters.

Semantics ported from Kafka Streams 4.x:

* ``JoinWindowProcessor`` is ``KStreamJoinWindow``: forward, then put into the side's
  retain-duplicates window store (window start = record timestamp).
* ``StreamStreamJoinProcessor`` is ``KStreamKStreamJoin`` with its Left/RightSide: inner
  results on each match (timestamp = max of both records); for left/outer joins, records
  without a match are parked in the shared outer-join store (keys ordered
  ``<timestamp><left/right flag><key>``) and emitted once stream time passes their window
  end plus grace ("no spurious results", KIP-633/KAFKA-10847, Kafka >= 3.1), throttled by
  wall-clock time as Kafka's ``emit.interval.ms.kstreams.outer.join.spurious.results.fix``.
* ``TableTableJoinProcessor`` is ``KTableKTableInnerJoin``/``LeftJoin``/``RightJoin``/
  ``OuterJoin``; ``TableTableMergeProcessor`` is ``KTableKTableJoinMerger``.
* ``TableValueGetter`` is Kafka's ``KTableValueGetterSupplier``: read a table's current
  value by key from its store, through filter/mapValues steps and join views.

Old values: the speed layer always propagates ``Change.old`` (Kafka's ``sendOldValues``
enabled), so join processors also compute the joined old value as Kafka does in that mode.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable

from ...state.keys import ORDERED_KEY
from ...state.stores import KeyValueStore, SessionStore, ValueAndTimestamp, VersionedKeyValueStore, WindowStore
from ..api import Change, Record
from ..internals import InternalProcessorContext
from .aggregate import _Forwarding
from .base import OpProcessor

#: Kafka's default of ``__emit.interval.ms.kstreams.outer.join.spurious.results.fix__``.
DEFAULT_OUTER_JOIN_EMIT_INTERVAL_MS = 1000

_LONG_MAX = 2**63 - 1
_TS = struct.Struct(">q")


def _jlong(x: int) -> int:
    """Wrap to a Java ``long`` (Kafka's time arithmetic overflows on ``Long.MAX_VALUE``)."""
    return ((x + 2**63) % 2**64) - 2**63


# ---------------------------------------------------------------------------- value getters
@dataclass(frozen=True)
class TableValueGetter:
    """How to read a KTable's current value by key (Kafka's KTableValueGetterSupplier).

    Either ``store`` (the table's materialized store) or ``join`` (``(kind, joiner,
    left_getter, right_getter)``: the view of a non-materialized KTable-KTable join), then
    ``steps`` (``TableFilterOp``/``TableMapValuesOp`` specs) applied in order. A getter
    returns ``ValueAndTimestamp`` or None (absent or filtered out)."""

    store: str | None = None
    steps: tuple[Any, ...] = ()
    join: tuple[str, Callable[[Any, Any], Any], "TableValueGetter", "TableValueGetter"] | None = None
    #: ``(buffer_store, parent_getter)`` of a suppressed KTable (Kafka's
    #: KTableSuppressProcessorSupplier#view)
    suppress: tuple[str, "TableValueGetter"] | None = None

    def store_names(self) -> tuple[str, ...]:
        """Every store the getter reads (to connect to the processor using it)."""
        if self.store is not None:
            return (self.store,)
        if self.suppress is not None:
            parent = self.suppress[1].store_names()
            return (self.suppress[0],) + tuple(s for s in parent if s != self.suppress[0])
        assert self.join is not None
        out = self.join[2].store_names()
        return out + tuple(s for s in self.join[3].store_names() if s not in out)


def getter_from_graph(topology: Any, name: str) -> TableValueGetter:
    """The ``TableValueGetter`` of the KTable node ``name`` read from the graph alone (for a
    stream-table join whose table has no store of its own): a node materialized in a store
    reads it; an unmaterialized filter/mapValues is its parent's getter plus the step; a
    suppression is the buffer's view over its parent (Kafka's
    KTableSuppressProcessorSupplier#view).

    Raises:
        TopologyException: for a node that cannot be read by key.
    """
    from ...errors import TopologyException
    from ...graph.ops import SuppressOp, TableFilterOp, TableMapValuesOp

    node = topology.nodes[name]
    op = node.op
    if isinstance(op, SuppressOp):
        return TableValueGetter(suppress=(op.store, getter_from_graph(topology, node.parents[0])))
    store = getattr(op, "store", None)
    if isinstance(store, str):
        return TableValueGetter(store=store)
    if isinstance(op, (TableFilterOp, TableMapValuesOp)) and node.parents:
        parent = getter_from_graph(topology, node.parents[0])
        return TableValueGetter(store=parent.store, steps=parent.steps + (op,), join=parent.join, suppress=parent.suppress)
    raise TopologyException(f"{name}: cannot look up a KTable produced by {type(op).__name__} in a join")


def read_store(store: Any, key: Any) -> ValueAndTimestamp | None:
    """The current value of ``key`` in any table store (latest version of a versioned
    store; ``Windowed`` keys for window and session stores)."""
    if isinstance(store, VersionedKeyValueStore):
        vr = store.get(key)
        return None if vr is None else ValueAndTimestamp(vr.value, vr.timestamp)
    if isinstance(store, KeyValueStore):
        return store.get_with_timestamp(key)
    if isinstance(store, WindowStore):
        rows = store.fetch_with_timestamps(key.key, key.window.start, key.window.start)
        return rows[0][1] if rows else None
    if isinstance(store, SessionStore):
        v = store.fetch_session(key.key, key.window.start, key.window.end)
        return None if v is None else ValueAndTimestamp(v, key.window.end)
    raise TypeError(f"cannot read table values from {type(store).__name__}")


class BoundGetter:
    """A ``TableValueGetter`` bound to a task's stores."""

    def __init__(self, spec: TableValueGetter, context: Any) -> None:
        self.spec = spec
        self.store = context.get_state_store(spec.store) if spec.store is not None else None
        self.left: BoundGetter | None = None
        self.right: BoundGetter | None = None
        self.buffer: Any = None
        self.parent: BoundGetter | None = None
        if spec.join is not None:
            self.left = BoundGetter(spec.join[2], context)
            self.right = BoundGetter(spec.join[3], context)
        if spec.suppress is not None:
            self.buffer = context.get_state_store(spec.suppress[0])
            self.parent = BoundGetter(spec.suppress[1], context)

    @property
    def base_store(self) -> Any:
        """The store read directly (no join view, no steps), or None."""
        return self.store if not self.spec.steps else None

    def get(self, key: Any) -> ValueAndTimestamp | None:
        if self.store is not None:
            vt = read_store(self.store, key)
        elif self.buffer is not None:
            vt = self._suppressed(key)
        else:
            vt = self._join(key)
        for step in self.spec.steps:
            if vt is None or vt.value is None:
                return None
            vt = _apply_step(step, key, vt)
        return None if vt is None or vt.value is None else vt

    def _suppressed(self, key: Any) -> ValueAndTimestamp | None:
        # Kafka's InMemoryTimeOrderedKeyValueChangeBuffer#priorValueForBuffered: a buffered
        # key reads as the value last emitted for it (its prior value), with an unknown
        # timestamp (-1); a key not buffered reads through to the parent table
        from .suppress import buffered_prior

        assert self.parent is not None
        buffered, prior = buffered_prior(self.buffer, key)
        if buffered:
            return None if prior is None else ValueAndTimestamp(prior, -1)
        return self.parent.get(key)

    def _join(self, key: Any) -> ValueAndTimestamp | None:
        # Kafka's KTableKTable{Inner,Left,Outer}JoinValueGetter
        assert self.spec.join is not None and self.left is not None and self.right is not None
        kind, joiner = self.spec.join[0], self.spec.join[1]
        v1 = self.left.get(key)
        if kind == "outer":
            v2 = self.right.get(key)
            if v1 is None and v2 is None:
                return None
            ts = max(-1 if v1 is None else v1.timestamp, -1 if v2 is None else v2.timestamp)
            return ValueAndTimestamp(joiner(None if v1 is None else v1.value, None if v2 is None else v2.value), ts)
        if v1 is None:
            return None
        v2 = self.right.get(key)
        if v2 is None:
            if kind == "inner":
                return None
            return ValueAndTimestamp(joiner(v1.value, None), v1.timestamp)
        return ValueAndTimestamp(joiner(v1.value, v2.value), max(v1.timestamp, v2.timestamp))


def _apply_step(step: Any, key: Any, vt: ValueAndTimestamp) -> ValueAndTimestamp | None:
    from ...graph.ops import TableFilterOp, TableMapValuesOp

    if isinstance(step, TableFilterOp):
        keep = bool(step.predicate(key, vt.value)) != step.negate
        return vt if keep else None
    if isinstance(step, TableMapValuesOp):
        v = step.mapper(key, vt.value) if step.with_key else step.mapper(vt.value)
        return None if v is None else ValueAndTimestamp(v, vt.timestamp)
    raise TypeError(f"unsupported table getter step {type(step).__name__}")


# ---------------------------------------------------------------------------- stream-stream
class JoinWindowProcessor(OpProcessor):
    """Kafka's KStreamJoinWindow: forward the record, then buffer it in the window store.
    Records whose window start is already expired (older than retention = before + after
    + grace behind the store's stream time) are not stored; they are counted as
    ``expired-window-record-drop`` (a store metric in Kafka, not ``dropped-records``)."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: WindowStore = context.get_state_store(self.op.store)

    def process(self, record: Record[Any, Any]) -> None:
        self.forward(record)
        if record.key is None or record.value is None:
            return
        expired = self.store.observed_stream_time >= 0 and record.timestamp <= self.store.observed_stream_time - self.store.retention_ms
        if expired:
            # its later partners' results are lost; they take their own, later, timestamps
            self.context.inc_metric("expired-window-record-drop")
            w = self.op.windows
            self.context.record_expired_join(self.op.store, record.timestamp, record.timestamp + w.before_ms + w.after_ms)
        self.store.put(record.key, record.value, record.timestamp, record.timestamp)


class _TimeTracker:
    """Kafka's KStreamImplJoin.TimeTracker, shared by both sides of one join in one task."""

    def __init__(self) -> None:
        self.stream_time = -1
        self.min_time = _LONG_MAX
        self.next_time_to_emit = 0
        self.emit_interval_ms = DEFAULT_OUTER_JOIN_EMIT_INTERVAL_MS

    def advance_stream_time(self, ts: int) -> None:
        self.stream_time = max(self.stream_time, ts)

    def update_min_time(self, ts: int) -> None:
        self.min_time = min(self.min_time, ts)


class StreamStreamJoinProcessor(OpProcessor):
    """One side of a KStream-KStream join (see the module docstring).

    Per record: advance the shared stream time; an outer side forwards a null-key record
    at once as ``joiner(value, None)`` (KIP-962); other null-key or null-value records are
    dropped (``dropped-records``); when the record carries the stream time, closed
    unmatched records are emitted from the outer store; then every record of the other
    window store with a timestamp in ``[ts - before, ts + after]`` joins (in timestamp, then
    arrival order) and removes that record from the outer store; an unmatched record of an
    outer side is parked in the outer store, or emitted at once when its window end is
    already behind stream time."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        op = self.op
        self.other: WindowStore = context.get_state_store(op.other_store)
        self.outer_store: KeyValueStore | None = context.get_state_store(op.outer_store) if op.outer_store else None
        self.outer = op.left_outer if op.this_is_left else op.right_outer
        w = op.windows
        self.join_before, self.join_after = (w.before_ms, w.after_ms) if op.this_is_left else (w.after_ms, w.before_ms)
        self.grace = w.grace_ms
        self.key_serde = op.key_serde or ORDERED_KEY
        if self.outer_store is not None:
            # both sides of an outer join share one tracker per task (Kafka's
            # TimeTrackerSupplier), found under their shared outer store's name
            self.tracker = context.task_local(("join-time-tracker", op.outer_store), _TimeTracker)
            self.tracker.emit_interval_ms = self._emit_interval(context)
        else:
            self.tracker = _TimeTracker()

    def _emit_interval(self, context: Any) -> int:
        if self.op.emit_interval_ms is not None:
            return int(self.op.emit_interval_ms)
        # Kafka's KStreamKStreamJoin#init: InternalConfig.getLong(appConfigs,
        # EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, 1000L)
        return int(context.app_config.outer_join_emit_interval_ms)

    # joiner(left, right) whatever side this is
    def _join(self, key: Any, left: Any, right: Any) -> Any:
        return self.op.joiner(key, left, right) if self.op.joiner_with_key else self.op.joiner(left, right)

    def _join_this(self, key: Any, this: Any, other: Any) -> Any:
        return self._join(key, this, other) if self.op.this_is_left else self._join(key, other, this)

    def process(self, record: Record[Any, Any]) -> None:
        ts = record.timestamp
        tracker = self.tracker
        tracker.advance_stream_time(ts)
        if self.outer and record.key is None and record.value is not None:
            self.forward(record.with_value(self._join_this(None, record.value, None)))
            return
        if record.key is None or record.value is None:
            self.dropped("null key or value", record)
            return
        if ts == tracker.stream_time and self.outer_store is not None:
            self._emit_non_joined(record)
        time_from = max(0, ts - self.join_before)
        time_to = max(0, ts + self.join_after)
        other = self.other
        if other.observed_stream_time >= 0 and time_from <= other.observed_stream_time - other.retention_ms:
            self._expired_lookup(ts, time_to)
        matches = other.fetch_with_timestamps(record.key, time_from, time_to)
        for other_ts, vt in matches:
            self._emit_inner(record, other_ts, vt.value)
        if self.outer and not matches:
            if self.outer_store is None or time_to < tracker.stream_time:
                self.forward(record.with_value(self._join_this(record.key, record.value, None)))
            else:
                tracker.update_min_time(ts)
                k = self._outer_key(record.key, ts, self.op.this_is_left)
                values = self.outer_store.get(k) or []
                self.outer_store.put(k, values + [record.value], ts)

    def _expired_lookup(self, ts: int, time_to: int) -> None:
        """The record's join window starts at or before the other window store's retention
        (its stream time minus before + after + grace): the other side's records it would join
        there are expired and its results with them are lost. Kafka's KStreamKStreamJoin
        fetches what is left without a trace; duet counts the record as
        ``expired-window-record-drop`` (the summary's ``expired_join_drops``, as a record the
        store drops on put) and reports the timestamps the lost results would have had,
        ``[ts, max(ts, time_to)]`` (a result takes the larger of its two timestamps), so the
        agreement report can name the windows that miss them."""
        self.context.inc_metric("expired-window-record-drop")
        self.context.record_expired_join(self.op.other_store, ts, max(ts, time_to))

    def _emit_inner(self, record: Record[Any, Any], other_ts: int, other_value: Any) -> None:
        if self.outer_store is not None:
            k = self._outer_key(record.key, other_ts, not self.op.this_is_left)
            if self.outer_store.get(k) is not None:
                self.outer_store.put(k, None, other_ts)
        joined = self._join_this(record.key, record.value, other_value)
        self.forward(Record(record.key, joined, max(record.timestamp, other_ts), record.headers))

    # outer store keys: <8-byte timestamp><1 if left side else 0><key bytes> (Kafka's
    # TimestampedKeyAndJoinSide serialization), so iteration is by time, right before left
    def _outer_key(self, key: Any, ts: int, is_left: bool) -> bytes:
        return _TS.pack(ts) + (b"\x01" if is_left else b"\x00") + (self.key_serde.serialize(key) or b"")

    def _emit_non_joined(self, record: Record[Any, Any]) -> None:
        tracker = self.tracker
        assert self.outer_store is not None
        if _jlong(tracker.min_time + self.join_after + self.grace) >= tracker.stream_time:
            return
        now = self.context.current_system_time_ms()
        if now < tracker.next_time_to_emit:
            return
        tracker.next_time_to_emit = now + tracker.emit_interval_ms
        tracker.min_time = _LONG_MAX
        w = self.op.windows
        prev: bytes | None = None
        left_open = right_open = False
        for kb, values in list(self.outer_store.all()):
            ts = _TS.unpack_from(kb)[0]
            is_left = kb[8:9] == b"\x01"
            tracker.min_time = ts
            if left_open and right_open:
                break
            lookback = w.after_ms if is_left else w.before_ms
            if tracker.min_time + lookback + self.grace >= tracker.stream_time:
                if is_left:
                    left_open = True
                else:
                    right_open = True
                continue
            key = self.key_serde.deserialize(kb[9:])
            for v in values:
                joined = self._join(key, v, None) if is_left else self._join(key, None, v)
                self.forward(Record(key, joined, ts, record.headers))
            if prev is not None and prev != kb:
                self.outer_store.put(prev, None, ts)
            prev = kb
        if prev is not None:
            self.outer_store.put(prev, None, tracker.stream_time)


# ---------------------------------------------------------------------------- table-table
class TableTableJoinProcessor(OpProcessor):
    """One side of a KTable-KTable join. With ``v2`` the other table's current value:

    * inner (KTableKTableInnerJoin): nothing when ``v2`` is absent; else
      ``Change(joiner(new, v2) or None, joiner(old, v2) or None)``;
    * left, left side (KTableKTableLeftJoin): ``v2`` may be absent (then nothing only when
      new and old are both None); new/old joined when not None;
    * left, right side (KTableKTableRightJoin): nothing when the left value is absent; else
      both new and old are joined even when None (``joiner(left, None)``);
    * outer (KTableKTableOuterJoin): nothing only when ``v2``, new and old are all absent;
      each of new/old is joined unless it and ``v2`` are both None.

    The result's timestamp is ``max(record, v2)`` (the record's when ``v2`` is absent).
    Null keys and out-of-order updates of a versioned table (``Change.is_latest`` False,
    KIP-914) are dropped (``dropped-records``)."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.getter = BoundGetter(self.op.other_getter, context)

    def _j(self, this: Any, other: Any) -> Any:
        return self.op.joiner(this, other) if self.op.this_is_left else self.op.joiner(other, this)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            self.dropped("null key", record)
            return
        change: Change[Any] = record.value
        if not change.is_latest:
            # Kafka's KTableKTable*Join: "Skipping out-of-order record from versioned table"
            self.dropped("out-of-order versioned table update", record)
            return
        vt2 = self.getter.get(record.key)
        v2 = None if vt2 is None else vt2.value
        kind = self.op.kind
        right_side_of_left = kind == "left" and not self.op.this_is_left
        if v2 is None and (kind == "inner" or right_side_of_left):
            return
        if v2 is None:
            if change.new is None and change.old is None:
                return
            ts = record.timestamp
        else:
            assert vt2 is not None
            ts = max(record.timestamp, vt2.timestamp)
        if right_side_of_left:
            new, old = self._j(change.new, v2), self._j(change.old, v2)
        elif kind == "outer":
            new = self._j(change.new, v2) if (v2 is not None or change.new is not None) else None
            old = self._j(change.old, v2) if (v2 is not None or change.old is not None) else None
        else:
            new = self._j(change.new, v2) if change.new is not None else None
            old = self._j(change.old, v2) if change.old is not None else None
        self.forward(Record(record.key, Change(new, old), ts, record.headers))


class TableTableMergeProcessor(_Forwarding):
    """Kafka's KTableKTableJoinMerger: forwards both sides' results; with a ``store`` it
    puts each new value (None deletes) with the record timestamp and forwards directly, or
    through the store's record cache when caching is enabled."""

    def init(self, context: InternalProcessorContext) -> None:
        super().init(context)
        self.store: KeyValueStore | None = context.get_state_store(self.op.store) if self.op.store else None
        self.caching = False
        if self.store is not None:
            self._install_flush(self.store)

    def process(self, record: Record[Any, Any]) -> None:
        if self.store is not None:
            self.store.put(record.key, record.value.new, record.timestamp)
            if self.caching:
                return
        self.forward(record)


def table_table_processor(node: Any) -> OpProcessor:
    """The processor of a TableTableJoinOp node: a join side, or the merger."""
    return TableTableMergeProcessor(node) if node.op.role == "merge" else TableTableJoinProcessor(node)
