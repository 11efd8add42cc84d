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
snapshot just before still finds the rows it needs). A watermark that moves back (a lake
rebuilt) re-reads the topic.

The rows are in a RocksDB database per view (:class:`~serving.views.live_store.LiveRowStore`),
in a folder of this process below ``state_dir`` (default ``$DUET_SERVING_LIVE_DIR``, else
``<duet_home>/state/serving-live``), removed by :meth:`LiveViews.close`; the next process
removes a folder a crashed one left (:mod:`serving.views.live_dir`). Memory is therefore bounded by the
process's shared RocksDB block cache and write buffers (128 MiB,
:func:`~speed_layer.state.backends.shared_memory`), however far the batch watermark lags; the
rows take disk. Nothing is kept across processes: a serving process (a replica, a restart)
reads its view topics from the beginning, as before the store. Readers take no lock the
consumer thread holds while it writes (each read is a RocksDB iterator over an implicit
snapshot, each write one atomic batch: see live_store.py).

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
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.errors import SpeedSourceError
from serving.views.live_dir import LiveDir
from serving.views.live_dir import claim as claim_live_dir
from serving.views.live_store import LiveRow, LiveRowStore, Put
from serving.views.model import ViewSpec
from serving.views.speed import decode_view_key

__all__ = ["LiveRow", "LiveState", "LiveViews", "PRUNE_DELAY_S"]

log = logging.getLogger(__name__)

#: seconds a new batch watermark is served before the rows it closes leave the live table
PRUNE_DELAY_S = 30.0
#: seconds between two looks at the served views (new view topics, new watermarks)
VIEWS_CHECK_S = 1.0
#: records taken per ``consume`` call (written to the stores in one batch per view)
CONSUME_BATCH = 2_000


@dataclass(frozen=True)
class LiveState:
    """What the live table of a view knows (:meth:`LiveViews.state`).

    Attributes:
        stream_time_ms: the largest record timestamp read from the view topic (``None``:
            no record yet).
        caught_up: whether every partition was read up to the end offset it had when it was
            assigned (before, answers may lack speed rows the topic already holds).
        rows: rows held (the open windows at the prune watermark), estimated by RocksDB
            (:attr:`LiveRowStore.count <serving.views.live_store.LiveRowStore.count>`).
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
    store: LiveRowStore
    stream_time_ms: int | None = None
    pending: dict[int, int] = field(default_factory=dict)  # partition -> end offset at assignment
    next_ms: tuple[int | None, float] | None = None  # a newer watermark and when it was seen

    @property
    def applied_ms(self) -> int | None:
        """The prune watermark applied."""
        return self.store.applied_ms


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
        state_dir: the base folder of the row stores' folder (default
            :func:`serving.views.live_dir.default_base`); this process's folder below it is
            made at the first view followed and removed by :meth:`close`.

    :meth:`start` starts the thread, :meth:`close` stops it (also as a context manager).
    """

    def __init__(self, bootstrap: str, views: Callable[[], Mapping[str, tuple[ViewSpec, int | None]]],
                 config: dict[str, Any] | None = None, clock: Callable[[], float] = time.monotonic,
                 state_dir: str | Path | None = None) -> None:
        self.bootstrap = bootstrap
        self._views = views
        self._config = dict(config or {})
        self._clock = clock
        self._lock = threading.Lock()  # the table map and each table's pending / stream time
        self._state_dir = state_dir
        self._dir: LiveDir | None = None  # the row stores' folder, claimed at the first view
        self._stores_made = 0
        self._tables: dict[str, _ViewTable] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._bad_records = 0
        self._missing: set[str] = set()  # served views whose topic does not exist (at the last look)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> LiveViews:
        """Claim the row stores' folder and start following (idempotent). Returns ``self``.

        Raises:
            OSError: the folder's base (``state_dir``) cannot be created or written.
        """
        self._claim()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="duet-serving-live", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread, close the consumer, close the row stores and delete their directory."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("serving: the live views' thread did not stop in %.0f s; closing its stores", timeout_s)
            self._thread = None
        with self._lock:
            tables, self._tables = list(self._tables.values()), {}
        for table in tables:
            table.store.destroy()
        if self._dir is not None:
            self._dir.release()
            self._dir = None

    def __enter__(self) -> LiveViews:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads -------------------------------------------------------------------------------
    # Reads take no lock: a dict lookup is atomic, and a store answers from a RocksDB
    # snapshot while the consumer thread writes (a table being replaced answers nothing).
    def rows(self, view: str, key: str) -> list[LiveRow]:
        """The current rows of ``key`` in ``view`` (any order; ``[]`` when none or the view is
        not followed)."""
        table = self._tables.get(view)
        return [] if table is None else table.store.rows(key)

    def view_rows(self, view: str) -> list[LiveRow]:
        """Every current row of ``view`` (any order)."""
        table = self._tables.get(view)
        return [] if table is None else table.store.view_rows()

    def latest_rows(self, view: str, windows: int) -> list[LiveRow]:
        """The current rows of the ``windows`` latest window ends of ``view`` (tumbling and
        hopping views: of its latest ``windows`` windows; sessions: of the sessions ending
        last; tables: of the rows updated last), any order: their cost is those rows, not the
        table (:meth:`LiveRowStore.latest_rows <serving.views.live_store.LiveRowStore.latest_rows>`)."""
        table = self._tables.get(view)
        return [] if table is None else table.store.latest_rows(windows)

    def keys(self, view: str) -> set[str]:
        """The keys with current rows in ``view``."""
        table = self._tables.get(view)
        return set() if table is None else table.store.keys()

    def state(self, view: str) -> LiveState:
        """What is known of ``view`` (a view not followed yet: nothing, not caught up)."""
        with self._lock:
            table = self._tables.get(view)
            if table is None:
                return LiveState(None, False, 0, self._error, self._bad_records)
            return LiveState(table.stream_time_ms, not table.pending, table.store.count, self._error,
                             self._bad_records)

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
                pending: dict[int, int] = {}
                for p in partitions:
                    low, high = consumer.get_watermark_offsets(TopicPartition(view, p), timeout=10)
                    if high > low:
                        pending[p] = high
                table = self._new_table(view, spec, watermark)
                table.pending = pending
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
            assert watermark is not None  # a watermark gone is a watermark moved back (above)
            removed = table.store.prune(watermark)  # readers go on meanwhile
            table.next_ms = None
            log.info("serving: pruned %d rows of %s closed at %d", removed, view, watermark)

    def _new_table(self, view: str, spec: ViewSpec, watermark: int | None) -> _ViewTable:
        """A table of ``view`` with an empty row store in a new directory."""
        self._stores_made += 1
        return _ViewTable(spec, LiveRowStore(spec, self._claim() / f"{self._stores_made:05d}-{view}", watermark))

    def _claim(self) -> Path:
        """This process's folder of the row stores (claimed at the first call)."""
        if self._dir is None:
            self._dir = claim_live_dir(self._state_dir)
            weakref.finalize(self, self._dir.release)  # an interpreter exiting without close()
        return self._dir.path

    def _unassign(self, consumer: Any, view: str) -> None:
        from confluent_kafka import TopicPartition

        with self._lock:
            table = self._tables.pop(view, None)
        if table is not None:
            table.store.destroy()
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
        """Decode ``messages``, write each view's rows to its store in one batch (no lock
        held: only this thread writes, readers read RocksDB snapshots), then take up the
        offsets read (catching up) and the stream time under the lock."""
        from confluent_kafka import KafkaError

        puts: dict[str, tuple[_ViewTable, list[Put]]] = {}
        read: list[tuple[_ViewTable, Any, bool]] = []  # (table, message, whether it is a row)
        for msg in messages:
            err = msg.error()
            table = self._tables.get(msg.topic())
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if table is not None and msg.offset() >= table.pending.get(msg.partition(), 0):
                        read.append((table, msg, False))
                    continue
                self._error = str(err)
                log.warning("serving: error reading view topic %s: %s", msg.topic(), err)
                continue
            if table is None:  # unassigned meanwhile
                continue
            try:
                key, start, end = decode_view_key(msg.key(), table.spec.windowed)
                value = msg.value()
                if value is not None:
                    value.decode("utf-8")  # the store keeps the bytes; answers decode them
            except (SpeedSourceError, UnicodeDecodeError) as exc:
                self._bad_records += 1
                n = self._bad_records
                if n <= 10 or (n & (n - 1)) == 0:  # the first ten, then at every power of two
                    log.error("serving: skipped a record of %s[%d]@%d that breaks the view topic contract "
                              "(%d so far): %s", msg.topic(), msg.partition(), msg.offset(), n, exc)
                read.append((table, msg, False))  # its offset still counts for catching up
                continue
            puts.setdefault(msg.topic(), (table, []))[1].append((key, start, end, value, msg.timestamp()[1]))
            read.append((table, msg, True))
        for table, rows in puts.values():
            table.store.write(rows)
        with self._lock:
            for table, msg, is_row in read:
                p = msg.partition()
                if msg.error() is not None:  # end of the partition
                    table.pending.pop(p, None)
                    continue
                if p in table.pending and msg.offset() >= table.pending[p] - 1:
                    del table.pending[p]
                if is_row:
                    ts = msg.timestamp()[1]
                    if table.stream_time_ms is None or ts > table.stream_time_ms:
                        table.stream_time_ms = ts
