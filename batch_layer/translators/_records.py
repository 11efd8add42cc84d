"""Worker-side code of the batch layer: runs the user's Python functions inside Spark's
``mapInPandas`` / ``applyInPandas`` exactly as the speed layer's processors would.

Everything worker-side is pickled (cloudpickle) into Spark's Python workers: it holds no
driver state and needs no SparkSession (only pyspark's ``AccumulatorParam`` base class,
:mod:`._accumulators`). One module per node family, over this one (what they share):
:mod:`._chain` (decoders, stateless steps, the fused ``mapInPandas`` chain),
:mod:`._tables` (KTable stages, views and change streams), :mod:`._asof_join`
(stream-table as-of joins), :mod:`._agg_prep` and :mod:`._folds` (aggregations),
:mod:`._fused` (fused aggregations) and the ``_*_runtime`` modules (replayed processors).

Record tuples
    A record in flight is the tuple ``(key, value, ts, p, o, src, seq)``: the Python key and
    value, the record timestamp (ms), and the order key of the ORIGINAL source record: its
    source partition ``p``, offset ``o``, the index ``src`` of its source topic in the
    topology, and ``seq``, a string growing by 8 hex digits per ``flat_map`` level (the
    position of the record among the outputs of one input). Batch order is
    ``(ts, p, o, src, seq)``: ``(timestamp, source partition, offset)`` as the architecture
    defines it, then tie-breakers for records sharing a source record.

Stream frames (Spark)
    ``k binary`` (the key encoded with the stores' order-preserving key encoding
    ``speed_layer.state.keys.encode_key``; null for a null key), ``v binary`` (pickled value;
    null for None), ``ts long`` (ms), ``p int``, ``o long``, ``src int``, ``seq string``.

Errors
    A record whose deserialization, timestamp extraction or processing raises is dropped at
    that node and recorded in an accumulator as ``{node: {(src, p, o), ...}}`` (the speed
    layer's dead letters). Sets make the count idempotent when Spark recomputes a partition.
"""
from __future__ import annotations

import pickle
from operator import itemgetter
from typing import Any, Callable, Sequence

import pandas as pd

Rec = tuple  # (key, value, ts, p, o, src, seq)
Errors = dict  # node name -> set of (src, p, o)

STREAM_SCHEMA = "k binary, v binary, ts long, p int, o long, src int, seq string"
#: contracts.md: one row per table key (and window) of a view
VIEW_SCHEMA = "key string, window_start long, window_end long, value string, timestamp long"
#: rows of an as-of join: side 0 = table change, 1 = stream record to look up, 2 = already
#: joined (left join with a null lookup key: ``gjk`` null, ``nb`` spreads them over buckets)
JOIN_SCHEMA = "gjk binary, nb int, side int, k binary, v binary, ts long, p int, o long, src int, seq string"
#: rows of an aggregation: store key bytes and (time windows) block of window starts
AGG_SCHEMA = "gk binary, blk long, k binary, v binary, ts long, p int, o long, src int, seq string"
#: table changes to index for a broadcast as-of join
TABLE_ROWS_SCHEMA = "gjk binary, ts long, p int, o long, src int, seq string, v binary"

ORDER = ["ts", "p", "o", "src", "seq"]


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


def loads_or_none(data: bytes | None) -> Any:
    return None if data is None else pickle.loads(data)


def rid(rec: Rec) -> tuple[int, int, int]:
    """Identity of the source record: ``(src, partition, offset)``."""
    return (rec[5], rec[3], rec[4])


def add_error(errs: Errors, node: str, ident: tuple[int, int, int]) -> None:
    errs.setdefault(node, set()).add(ident)



def _opt_int(values: Any) -> list[Any]:
    return [None if v is None else int(v) for v in values]



def group_fn(obj: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A one-argument function for ``applyInPandas`` (Spark inspects the signature: a
    callable object's ``__call__(self, pdf)`` would be taken for ``(key, pdf)``)."""

    def fn(pdf: pd.DataFrame) -> pd.DataFrame:
        return obj(pdf)

    return fn


#: the columns of a stream record in a pandas batch (key, value bytes, timestamp, and the
#: order key: partition, offset, source index, sequence)
RECORD_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("k", object), ("v", object), ("ts", "int64"), ("p", "int32"), ("o", "int64"), ("src", "int32"), ("seq", object),
)


def typed_frame(columns: Sequence[tuple[str, Any]], cols: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """A pandas frame of ``cols`` (one sequence per column), named and typed by ``columns``
    (``(name, dtype)`` pairs, in order)."""
    return pd.DataFrame({name: pd.Series(col, dtype=dtype) for (name, dtype), col in zip(columns, cols)})


def rows_frame(columns: Sequence[tuple[str, Any]], rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """:func:`typed_frame` of row tuples (an empty frame of the right types when ``rows`` is empty)."""
    return typed_frame(columns, list(zip(*rows)) if rows else [[] for _ in columns])


def _stream_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return rows_frame(RECORD_COLUMNS, rows)


def _view_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return rows_frame((("key", object), ("window_start", object), ("window_end", object), ("value", object),
                       ("timestamp", "int64")), rows)


def sorted_rows(pdf: pd.DataFrame, group: str, order: list[str], rest: list[str]) -> list[tuple[Any, ...]]:
    """Rows of one ``applyInPandas`` call (a bucket of keys) as tuples
    ``(group key, *order, *rest)`` sorted by the group key, then ``order``."""
    cols = [pdf[c].tolist() for c in [group, *order, *rest]]
    n = 1 + len(order)
    if group == "gjk":  # a null join key (already joined rows) sorts as b""
        cols[0] = [b"" if x is None else x for x in cols[0]]
    return sorted(zip(*cols), key=itemgetter(*range(n)))


def ranked_rows(pdf: pd.DataFrame, group: str, rest: list[str], table_srcs: frozenset[int]) -> list[tuple[Any, ...]]:
    """:func:`sorted_rows` ``(group, ts, p, o, src, seq, *rest)`` in the batch order of
    records from several input topics: ``(timestamp, table changes first, partition,
    offset, topic)`` (``table_srcs``: the ``src`` of the KTable / GlobalKTable topics; the
    general executor's ``rank``). Without table topics this is :data:`ORDER`."""
    if not table_srcs or table_srcs.isdisjoint(pdf["src"].unique().tolist()):
        return sorted_rows(pdf, group, ORDER, rest)
    cols = [pdf[c].tolist() for c in [group, *ORDER, *rest]]
    rank = [0 if s in table_srcs else 1 for s in cols[4]]
    order = sorted(range(len(rank)), key=lambda i: (cols[0][i], cols[1][i], rank[i], cols[2][i], cols[3][i], cols[4][i], cols[5][i]))
    return [tuple(c[i] for c in cols) for i in order]

