"""The rows of one view's live table in a RocksDB database (serving's KTable of a view topic).

A :class:`LiveRowStore` holds the latest value of each ``(key, window_start, window_end)``
of one view output topic (a tombstone deletes it), as a source KTable's store would, minus
the rows closed at its *applied watermark* (:attr:`LiveRowStore.applied_ms`). It lives in a
RocksDB database opened with the speed layer's :func:`~speed_layer.state.backends.open_rdict`:
the write-ahead log off and the process's shared block cache and write-buffer manager
(:func:`~speed_layer.state.backends.shared_memory`), so the memory it takes is bounded by
that budget (128 MiB, memtables charged to it), not by the rows; the rows are files on disk.
Nothing is durable: the database is scratch space of one serving process, which reads its
view topics from the beginning at start (docs/live-serving.md).

Layout (two column families; integers are big-endian with the sign bit flipped, so byte
order is numeric order):

* default: ``b"r" + len(key) (4 bytes) + key (UTF-8) [+ window_start + window_end (8 bytes
  each)]`` -> ``timestamp (8 bytes) + value``: the rows, a key's windows contiguous and in
  window order (the length prefix keeps one key's rows apart from a longer key that starts
  alike);
* ``close``: ``close time (8 bytes) + the row's key without its b"r"`` -> ``b""``: the rows by
  *close time*, the watermark at which a row is closed (a windowed row:
  ``spec.close_time_ms(end)``; a table row: its timestamp, as the batch answers a table key
  not updated after ``W``).

Writes are blind (no read): a record puts its row and its close-time entry, a tombstone
deletes both. A windowed row's close time follows from its window, so its entry is always
the one written; a table row updated with a new timestamp leaves its earlier entry behind,
which a prune reaching it checks against the row's timestamp (and drops). A prune to ``W``
reads the close-time entries in ``(previous W, W]``, deletes their rows and range-deletes
those entries: its cost is the rows it removes, never the rows it keeps. No entry at or
below the previous ``W`` exists then (a row closed at the applied watermark is deleted, not
written), so the scan never walks over the tombstones of earlier prunes.

The row count (:attr:`LiveRowStore.count`) is exact after each prune (one pass over the keys
kept, :meth:`LiveRowStore.count_rows`) plus what RocksDB's ``rocksdb.estimate-num-keys`` of
the rows' column family grew by since: the writes read nothing, as reading each row before
writing it (to know whether it is new) tripled the apply's CPU time at 1 M rows and grew with
the files (docs/live-serving.md); a row rewritten since the prune may count more than once
until a flush merges its versions.

Concurrency: one writer (serving's consumer thread: :meth:`write`, :meth:`prune`,
:meth:`destroy`), any number of readers, who take no lock the writer holds. RocksDB is safe
for concurrent reads and writes, a write is one atomic ``WriteBatch``, and each read iterates
over the implicit snapshot its iterator takes: a reader of :meth:`rows`, :meth:`view_rows`
or :meth:`keys` sees every write batch before its call and none after it
(:meth:`latest_rows` reads twice and leaves out a row deleted in between). Only :meth:`destroy` waits, for the readers inside a call to leave
(a counter, held for an increment, not for the read); a read after it answers nothing.
"""

from __future__ import annotations

import shutil
import struct
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from serving.views.model import ViewSpec
from speed_layer.state.backends import open_rdict

if TYPE_CHECKING:
    from rocksdict import Rdict

__all__ = ["LiveRow", "LiveRowStore", "Put", "PRUNE_BATCH"]

#: rows deleted per write batch of a prune (bounds the batch's memory)
PRUNE_BATCH = 10_000

_ROW = b"r"
_OFFSET = 1 << 63  # signed -> unsigned, order kept
_U64 = struct.Struct(">Q")
_WINDOW = struct.Struct(">QQ")
_LEN = struct.Struct(">I")
_TS = struct.Struct(">q")
_PAST = b"\xff" * (_WINDOW.size + 1)  # prefix + this: after every row of the prefix


@dataclass(frozen=True)
class LiveRow:
    """One current row of a view topic (times in epoch ms)."""

    key: str
    window_start: int | None
    window_end: int | None
    value: str
    timestamp: int


#: the column family of the close-time entries
CLOSE_CF = "close"

#: a record to write: ``(key, window_start, window_end, value or None for a tombstone, timestamp)``
Put = tuple[str, int | None, int | None, bytes | None, int]


def _u64(ms: int) -> bytes:
    return _U64.pack(ms + _OFFSET)


def _encode_key(key: str) -> bytes:
    raw = key.encode("utf-8", "surrogatepass")  # a JSON key may hold a lone surrogate
    return _ROW + _LEN.pack(len(raw)) + raw


class LiveRowStore:
    """The live rows of one view (``spec``) in a new RocksDB database at ``path``.

    Args:
        spec: the view (windowed or a table; its close time rule).
        path: a directory that does not exist yet (created; removed by :meth:`destroy`).
        watermark_ms: the applied watermark to start at (``None``: nothing is closed).

    Attributes:
        applied_ms: the watermark rows are closed at (``None``: none is).
    """

    def __init__(self, spec: ViewSpec, path: Path, watermark_ms: int | None = None) -> None:
        if path.exists():
            raise FileExistsError(f"the live store of {spec.name} needs a new directory, {path} exists")
        self.spec = spec
        self.path = path
        self.applied_ms = watermark_ms
        self._counted = (0, 0)  # (exact rows, RocksDB's estimate) at the last prune
        self._close_after = 0 if not spec.windowed else spec.close_time_ms(0) or 0  # close = end + this
        self._db: Rdict = open_rdict(path, column_families=(CLOSE_CF,))
        self._by_close: Rdict = self._db.get_column_family(CLOSE_CF)
        self._close_cf = self._db.get_column_family_handle(CLOSE_CF)
        self._readers = 0
        self._closed = False
        self._gate = threading.Condition()

    # -- writes (one thread) -------------------------------------------------------------------
    def close_time(self, window_end: int | None, timestamp: int) -> int:
        """The watermark (ms) at which a row is closed: ``spec.close_time_ms(window_end)`` for a
        windowed row, the row's ``timestamp`` for a table row.

        Raises:
            ValueError: a windowed row without a window end.
        """
        if not self.spec.windowed:
            return timestamp
        if window_end is None:
            raise ValueError(f"a row of windowed view {self.spec.name} without a window end")
        return window_end + self._close_after

    def write(self, puts: Iterable[Put]) -> None:
        """Apply ``puts`` in order in one atomic write batch, reading nothing: the latest value
        per row; a tombstone, or a row closed at :attr:`applied_ms`, deletes the row. A record
        costs two puts (the row and its close-time entry) or two deletes in the batch.

        Raises:
            ValueError: a windowed row without a window.
            rocksdict.DbClosedError: after :meth:`destroy`.
        """
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        put, delete, pack_ts, cf = batch.put, batch.delete, _TS.pack, self._close_cf
        windowed, applied, close_after = self.spec.windowed, self.applied_ms, self._close_after
        for key, start, end, value, ts in puts:
            row = _encode_key(key)
            if windowed:
                if start is None or end is None:
                    raise ValueError(f"a row of windowed view {self.spec.name} without a window")
                row += _WINDOW.pack(start + _OFFSET, end + _OFFSET)
                close = end + close_after
            else:
                close = ts
            if applied is not None and close <= applied:
                delete(row)  # closed: the batch answers it (its entry, at or below applied, is gone)
            elif value is None:
                delete(row)
                delete(_u64(close) + row[1:], cf)  # a table row's earlier entry: checked at the prune
            else:
                put(row, pack_ts(ts) + value)
                put(_u64(close) + row[1:], b"", cf)
        if not batch.is_empty():
            self._db.write(batch)

    @property
    def count(self) -> int:
        """The rows held, estimated: exact at the last prune, plus the growth of RocksDB's
        ``rocksdb.estimate-num-keys`` of the rows since (a row rewritten since may count more
        than once until a flush merges its versions; ``0`` after :meth:`destroy`)."""
        exact, estimated = self._counted
        with self._reading() as db:
            return 0 if db is None else max(0, exact + self._estimate(db) - estimated)

    @staticmethod
    def _estimate(db: Rdict) -> int:
        return int(db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def count_rows(self) -> int:
        """The rows held, exactly: one pass over the row keys (time linear in the rows)."""
        from rocksdict import ReadOptions

        with self._reading() as db:
            if db is None:
                return 0
            bounds = ReadOptions()  # referenced until the loop ends: the iterator reads its bound
            bounds.set_iterate_upper_bound(_ROW + _PAST)
            return sum(1 for _ in db.keys(from_key=_ROW, read_opt=bounds))

    def prune(self, watermark_ms: int) -> int:
        """Move :attr:`applied_ms` to ``watermark_ms`` and delete the rows closed there, in
        write batches of :data:`PRUNE_BATCH` rows, then count the rows kept; returns the rows
        deleted. A table row's entry is checked against the row (one multi-get per batch): a
        row updated since has a later timestamp and stays.

        Raises:
            ValueError: when ``watermark_ms`` is before :attr:`applied_ms` (rows closed at
                the applied watermark are gone: read the topic again into a new store).
        """
        from rocksdict import ReadOptions

        if self.applied_ms is not None and watermark_ms < self.applied_ms:
            raise ValueError(f"the live store of {self.spec.name} is pruned at {self.applied_ms}, "
                             f"it cannot move back to {watermark_ms}")
        lo = b"" if self.applied_ms is None else _u64(self.applied_ms + 1)
        hi = _u64(watermark_ms + 1)  # exclusive
        self.applied_ms = watermark_ms
        bounds = ReadOptions()  # referenced until the loop ends: the iterator reads its bound
        bounds.set_iterate_upper_bound(hi)
        removed, rows = 0, []
        for entry in self._by_close.keys(from_key=lo, read_opt=bounds):
            rows.append(_ROW + entry[_U64.size:])
            if len(rows) == PRUNE_BATCH:
                removed += self._delete_closed(rows, watermark_ms)
                rows = []
        removed += self._delete_closed(rows, watermark_ms, (lo, hi))
        self._counted = (self.count_rows(), self._estimate(self._db))  # no write in between: one thread writes
        return removed

    def _delete_closed(self, rows: list[bytes], watermark_ms: int,
                       entries: tuple[bytes, bytes] | None = None) -> int:
        """Delete ``rows`` (of close-time entries at or below ``watermark_ms``) in one batch,
        a table row only when its timestamp is at or below it, and the ``entries`` range;
        returns the rows deleted."""
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        if not self.spec.windowed and rows:
            rows = list(dict.fromkeys(rows))  # a row with two entries (one left by an update)
            stored = self._db.get(rows)
            rows = [r for r, v in zip(rows, stored) if v is not None and _TS.unpack_from(v)[0] <= watermark_ms]
        for row in rows:
            batch.delete(row)
        if entries is not None:
            batch.delete_range(entries[0], entries[1], self._close_cf)
        if not batch.is_empty():
            self._db.write(batch)
        return len(rows)

    def destroy(self) -> None:
        """Wait for the readers inside a call, close the database and delete its directory
        (idempotent); reads answer nothing from then on."""
        with self._gate:
            if self._closed:
                return
            self._closed = True
            self._gate.wait_for(lambda: self._readers == 0)
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)

    # -- reads (any thread, no lock of the writer) ---------------------------------------------
    @contextmanager
    def _reading(self) -> Iterator[Rdict | None]:
        with self._gate:
            open_ = not self._closed
            self._readers += open_
        if not open_:
            yield None
            return
        try:
            yield self._db
        finally:
            with self._gate:
                self._readers -= 1
                if self._readers == 0:
                    self._gate.notify_all()

    @staticmethod
    def _items(db: Rdict, prefix: bytes, seek: bytes | None = None) -> list[tuple[bytes, bytes]]:
        """The entries whose key starts with ``prefix`` (from ``seek``, default ``prefix``):
        one iterator (one implicit snapshot),
        bounded above so RocksDB stops at the prefix's end. Read whole while the options
        live: an iterator outliving its ``ReadOptions`` answered wrong (2 rows of a key's
        500 in bench_live_store.py), as if it kept a pointer to the freed bound."""
        from rocksdict import ReadOptions

        bounds = ReadOptions()
        bounds.set_iterate_upper_bound(prefix + _PAST)
        out = []
        for entry in db.items(from_key=prefix if seek is None else seek, read_opt=bounds):
            if not entry[0].startswith(prefix):  # the bound's own check, should it be lost again
                break
            out.append(entry)
        return out

    def rows(self, key: str) -> list[LiveRow]:
        """The rows of ``key``, in window order (``[]`` when none): one seek, for tumbling and
        hopping windows to the first start open at :attr:`applied_ms` (past the tombstones
        prunes left until a compaction drops them)."""
        prefix = _encode_key(key)
        at = len(prefix)
        windowed, unpack_window, unpack_ts = self.spec.windowed, _WINDOW.unpack_from, _TS.unpack_from
        seek = prefix
        applied, size = self.applied_ms, self.spec.size_ms
        if applied is not None and self.spec.window_kind in ("tumbling", "hopping") and size:
            # open: end + close_after > applied, end = start + size
            seek = prefix + _u64(applied - self._close_after - size + 1)
        out = []
        with self._reading() as db:
            if db is None:
                return out
            for row, stored in self._items(db, prefix, seek):
                start = end = None
                if windowed:
                    start, end = unpack_window(row, at)
                    start, end = start - _OFFSET, end - _OFFSET
                out.append(LiveRow(key, start, end, stored[8:].decode("utf-8"), unpack_ts(stored)[0]))
        return out

    def view_rows(self) -> list[LiveRow]:
        """Every row, grouped by key, a key's rows in window order."""
        with self._reading() as db:
            return [] if db is None else [self._row(row, stored) for row, stored in self._items(db, _ROW)]

    def latest_rows(self, windows: int) -> list[LiveRow]:
        """The rows of the ``windows`` latest close times (tumbling and hopping views: of the
        latest ``windows`` windows, each close time being one window end), newest first: read
        backwards through the close-time entries, then one multi-get of their rows, so the
        cost is those rows, not the table (the views page's fresh edge of a lagging view). A
        row deleted between the two reads is left out."""
        if windows <= 0:
            return []
        with self._reading() as db:
            if db is None:
                return []
            wanted: dict[bytes, None] = {}  # a table row may have an entry left by an update
            seen, last = 0, None
            for entry in self._by_close.keys(backwards=True):
                close = entry[:_U64.size]
                if close != last:
                    seen, last = seen + 1, close
                    if seen > windows:
                        break
                wanted[_ROW + entry[_U64.size:]] = None
            stored = db.get(list(wanted)) if wanted else []
        return [self._row(row, value) for row, value in zip(wanted, stored) if value is not None]

    def _row(self, row: bytes, stored: bytes) -> LiveRow:
        n = _LEN.unpack_from(row, 1)[0]
        start = end = None
        if self.spec.windowed:
            start, end = _WINDOW.unpack_from(row, 5 + n)
            start, end = start - _OFFSET, end - _OFFSET
        return LiveRow(row[5:5 + n].decode("utf-8", "surrogatepass"), start, end, stored[8:].decode("utf-8"),
                       _TS.unpack_from(stored)[0])

    def keys(self) -> set[str]:
        """The keys with rows: one seek per key (past its windows), not one step per row."""
        keys: set[str] = set()
        with self._reading() as db:
            if db is None:
                return keys
            it = db.iter()
            it.seek(_ROW)
            while it.valid() and (row := it.key()).startswith(_ROW):
                n = _LEN.unpack_from(row, 1)[0]
                keys.add(row[5:5 + n].decode("utf-8", "surrogatepass"))
                it.seek(row[:5 + n] + _PAST)  # after every window of the key
        return keys
