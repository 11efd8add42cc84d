"""The speed layer's current view rows, tailed from the view output topics into memory.

A serving process reads the contract (docs/contracts.md: one view output topic per
materialized view, named like the store) and nothing else of the speed layer: one consumer
per process, every partition of every view topic assigned manually from the beginning (no
consumer group, no offset commit), ``isolation.level=read_committed``. So any number of
serving replicas follow the same topics independently of the speed instances, of their
rebalances and restarts (docs/live-serving.md gives the design and the alternatives).

Per view the table holds the latest value of each ``(key, window_start, window_end)`` (a
tombstone deletes it), as a source KTable of the topic would, but only the rows that are not
closed at the view's *prune watermark*: the batch watermark of the served snapshot, applied
:data:`PRUNE_DELAY_S` after a new snapshot is first seen (a request that took the previous
snapshot just before still finds the rows it needs). Memory therefore holds the fresh edge,
not the history. A watermark that moves back (a lake rebuilt) re-reads the topic.

The speed layer's *stream time* of a view, as this table knows it, is the largest record
timestamp read from its topic (ms): a windowed aggregate's output record carries the largest
timestamp of the records in its window (Kafka Streams' ``KStreamWindowAggregate``), so it
trails the aggregation's stream time by what the speed layer's cache has not flushed yet
(one ``commit.interval.ms`` at most) and by the records it dropped as late.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from serving.errors import SpeedSourceError
from serving.views.model import ViewSpec
from serving.views.speed import decode_view_key

__all__ = ["LiveRow", "LiveState", "LiveViews", "PRUNE_DELAY_S"]

log = logging.getLogger(__name__)

#: seconds a new batch watermark is served before the rows it closes leave the live table
PRUNE_DELAY_S = 30.0
#: seconds between two looks at the served views (new view topics, new watermarks)
VIEWS_CHECK_S = 1.0
#: records taken per ``consume`` call
CONSUME_BATCH = 2_000
#: decoded records put in per hold of the lock readers take
APPLY_CHUNK = 200

#: ``(window_start, window_end)`` of a row, ``(None, None)`` for a table row
Window = tuple[int | None, int | None]


@dataclass(frozen=True)
class LiveRow:
    """One current row of a view topic (times in epoch ms)."""

    key: str
    window_start: int | None
    window_end: int | None
    value: str
    timestamp: int


@dataclass(frozen=True)
class LiveState:
    """What the live table of a view knows (:meth:`LiveViews.state`).

    Attributes:
        stream_time_ms: the largest record timestamp read from the view topic (``None``:
            no record yet).
        caught_up: whether every partition was read up to the end offset it had when it was
            assigned (before, answers may lack speed rows the topic already holds).
        rows: rows held (the open windows at the prune watermark).
        error: the last consumer error, ``None`` when reading works.
        skipped: records of any view topic skipped since the start because they break the
            contract (a key that is not the windowed JSON, a value that is not UTF-8).
    """

    stream_time_ms: int | None
    caught_up: bool
    rows: int
    error: str | None = None
    skipped: int = 0


@dataclass
class _ViewTable:
    spec: ViewSpec
    rows: dict[str, dict[Window, tuple[str, int]]] = field(default_factory=dict)
    count: int = 0
    stream_time_ms: int | None = None
    pending: dict[int, int] = field(default_factory=dict)  # partition -> end offset at assignment
    applied_ms: int | None = None  # the prune watermark applied
    next_ms: tuple[int | None, float] | None = None  # a newer watermark and when it was seen

    def closed(self, window: Window, timestamp: int) -> bool:
        w = self.applied_ms
        if w is None:
            return False
        if not self.spec.windowed:
            return timestamp <= w  # the batch answers a table key not updated after W
        return window[1] is not None and self.spec.is_closed(window[1], w)

    def put(self, key: str, window: Window, value: str | None, timestamp: int) -> None:
        windows = self.rows.get(key)
        if value is None or self.closed(window, timestamp):
            if windows is not None and windows.pop(window, None) is not None:
                self.count -= 1
                if not windows:
                    del self.rows[key]
            return
        if windows is None:
            windows = self.rows[key] = {}
        if window not in windows:
            self.count += 1
        windows[window] = (value, timestamp)

    def prune(self) -> None:
        for key in list(self.rows):
            windows = self.rows[key]
            for window, (_, ts) in list(windows.items()):
                if self.closed(window, ts):
                    del windows[window]
                    self.count -= 1
            if not windows:
                del self.rows[key]


class LiveViews:
    """Follows the view output topics of the served views (a daemon thread) and answers
    their current rows by key.

    Args:
        bootstrap: Kafka bootstrap servers (``host:port[,...]``).
        views: returns the served views, ``{view: (spec, batch watermark ms or None)}``;
            called from the thread every :data:`VIEWS_CHECK_S` (a view appearing is
            followed from then on, its topic from the beginning).
        config: extra librdkafka consumer settings.
        clock: monotonic clock in seconds (the prune delay).

    :meth:`start` starts the thread, :meth:`close` stops it (also as a context manager).
    """

    def __init__(self, bootstrap: str, views: Callable[[], Mapping[str, tuple[ViewSpec, int | None]]],
                 config: dict[str, Any] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap = bootstrap
        self._views = views
        self._config = dict(config or {})
        self._clock = clock
        self._lock = threading.Lock()
        self._tables: dict[str, _ViewTable] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._bad_records = 0
        self._missing: set[str] = set()  # served views whose topic does not exist (at the last look)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> LiveViews:
        """Start following (idempotent). Returns ``self``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="duet-serving-live", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread and close the consumer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> LiveViews:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads -------------------------------------------------------------------------------
    def rows(self, view: str, key: str) -> list[LiveRow]:
        """The current rows of ``key`` in ``view`` (any order; ``[]`` when none or the view is
        not followed)."""
        with self._lock:
            table = self._tables.get(view)
            windows = None if table is None else table.rows.get(key)
            items = [] if windows is None else list(windows.items())
        return [LiveRow(key, ws, we, value, ts) for (ws, we), (value, ts) in items]

    def view_rows(self, view: str) -> list[LiveRow]:
        """Every current row of ``view`` (any order)."""
        with self._lock:
            table = self._tables.get(view)
            items = [] if table is None else [(k, list(w.items())) for k, w in table.rows.items()]
        return [LiveRow(k, ws, we, value, ts) for k, windows in items for (ws, we), (value, ts) in windows]

    def keys(self, view: str) -> set[str]:
        """The keys with current rows in ``view``."""
        with self._lock:
            table = self._tables.get(view)
            return set() if table is None else set(table.rows)

    def state(self, view: str) -> LiveState:
        """What is known of ``view`` (a view not followed yet: nothing, not caught up)."""
        with self._lock:
            table = self._tables.get(view)
            if table is None:
                return LiveState(None, False, 0, self._error, self._bad_records)
            return LiveState(table.stream_time_ms, not table.pending, table.count, self._error, self._bad_records)

    def wait_caught_up(self, timeout_s: float = 30.0, views: Iterable[str] | None = None) -> bool:
        """Wait until ``views`` (default: every followed view, at least one) are followed and
        caught up; ``False`` at the timeout (seconds), or at once when the topic of one of
        ``views`` does not exist."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                names = list(self._tables) if views is None else list(views)
                tables = [self._tables.get(v) for v in names]
                if names and all(t is not None and not t.pending for t in tables):
                    return True
                if views is not None and self._missing.intersection(names):
                    return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        from confluent_kafka import Consumer

        from speed_layer.admin import reader_config

        consumer = Consumer(reader_config(self.bootstrap, {
            "group.id": f"duet-serving-live-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 20,
            **self._config,
        }))
        next_check = 0.0
        try:
            while not self._stop.is_set():
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + VIEWS_CHECK_S
                    try:
                        self._follow(consumer)
                    except Exception as exc:  # the broker or the lake away: keep serving, retry
                        log.exception("serving: cannot follow the view topics")
                        self._error = f"{type(exc).__name__}: {exc}"
                if not self._tables:
                    self._stop.wait(0.1)
                    continue
                try:
                    self._apply(consumer.consume(CONSUME_BATCH, timeout=0.05))
                except Exception as exc:  # a fatal client error: say so in state(), retry
                    log.exception("serving: reading the view topics failed")
                    self._error = f"{type(exc).__name__}: {exc}"
                    self._stop.wait(1.0)
        finally:
            consumer.close()

    def _follow(self, consumer: Any) -> None:
        """Assign the topics of newly served views; take up new watermarks; prune."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        now = self._clock()
        for view, (spec, watermark) in self._views().items():
            table = self._tables.get(view)
            if table is not None and table.spec != spec:  # the view was redefined: read it again
                self._unassign(consumer, view)
                table = None
            if table is None:
                partitions = self._partitions(consumer, view)
                if partitions is None:
                    self._missing.add(view)
                    continue
                self._missing.discard(view)
                table = _ViewTable(spec, applied_ms=watermark)
                for p in partitions:
                    low, high = consumer.get_watermark_offsets(TopicPartition(view, p), timeout=10)
                    if high > low:
                        table.pending[p] = high
                with self._lock:
                    self._tables[view] = table
                consumer.incremental_assign([TopicPartition(view, p, OFFSET_BEGINNING) for p in partitions])
                log.info("serving: following view topic %s (%d partitions)", view, len(partitions))
                continue
            self._take_watermark(consumer, view, table, watermark, now)
        self._error = None

    def _take_watermark(self, consumer: Any, view: str, table: _ViewTable, watermark: int | None,
                        now: float) -> None:
        if watermark == table.applied_ms:
            table.next_ms = None
            return
        if table.applied_ms is not None and (watermark is None or watermark < table.applied_ms):
            log.warning("serving: the batch watermark of %s moved back (%s -> %s): reading its topic again",
                        view, table.applied_ms, watermark)
            self._unassign(consumer, view)
            return
        if table.next_ms is None or table.next_ms[0] != watermark:
            table.next_ms = (watermark, now)
        elif now - table.next_ms[1] >= PRUNE_DELAY_S:
            with self._lock:
                table.applied_ms, table.next_ms = watermark, None
                table.prune()

    def _unassign(self, consumer: Any, view: str) -> None:
        from confluent_kafka import TopicPartition

        with self._lock:
            self._tables.pop(view, None)
        assigned = [tp for tp in consumer.assignment() if tp.topic == view]
        if assigned:
            consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition) for tp in assigned])

    @staticmethod
    def _partitions(consumer: Any, topic: str) -> list[int] | None:
        """The partitions of ``topic``, ``None`` while it does not exist (not produced yet)."""
        md = consumer.list_topics(topic, timeout=10)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            return None
        return sorted(tmd.partitions)

    def _apply(self, messages: list[Any]) -> None:
        """Decode ``messages`` (no lock held: only this thread changes the tables), then put
        them in under the lock, :data:`APPLY_CHUNK` at a time, so readers wait at most for a
        chunk of dict updates."""
        from confluent_kafka import KafkaError

        decoded: list[tuple[_ViewTable, Any, tuple[str, Window] | None, str | None]] = []
        for msg in messages:
            err = msg.error()
            table = self._tables.get(msg.topic())
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if table is not None and msg.offset() >= table.pending.get(msg.partition(), 0):
                        decoded.append((table, msg, None, None))
                    continue
                self._error = str(err)
                log.warning("serving: error reading view topic %s: %s", msg.topic(), err)
                continue
            if table is None:  # unassigned meanwhile
                continue
            try:
                key, start, end = decode_view_key(msg.key(), table.spec.windowed)
                value = msg.value()
                text = None if value is None else value.decode("utf-8")
            except (SpeedSourceError, UnicodeDecodeError) as exc:
                self._bad_records += 1
                n = self._bad_records
                if n <= 10 or (n & (n - 1)) == 0:  # the first ten, then at every power of two
                    log.error("serving: skipped a record of %s[%d]@%d that breaks the view topic contract "
                              "(%d so far): %s", msg.topic(), msg.partition(), msg.offset(), n, exc)
                decoded.append((table, msg, None, None))  # its offset still counts for catching up
                continue
            decoded.append((table, msg, (key, (start, end)), text))
        for first in range(0, len(decoded), APPLY_CHUNK):
            with self._lock:
                for table, msg, row, text in decoded[first:first + APPLY_CHUNK]:
                    p = msg.partition()
                    if msg.error() is not None:  # end of the partition
                        table.pending.pop(p, None)
                        continue
                    if p in table.pending and msg.offset() >= table.pending[p] - 1:
                        del table.pending[p]
                    if row is None:
                        continue
                    ts = msg.timestamp()[1]
                    if table.stream_time_ms is None or ts > table.stream_time_ms:
                        table.stream_time_ms = ts
                    table.put(row[0], row[1], text, ts)
