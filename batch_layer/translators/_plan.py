"""Driver-side representations of a node's output while a plan is built, and the execution
context the translators share.

* :class:`StreamPipe`: a KStream, kept lazy as a union of leaves ``(base, steps)``: a base
  (a raw Delta topic, or an already computed stream frame) and the stateless steps to run
  on it. Consecutive stateless nodes are therefore fused into ONE ``mapInPandas`` pass
  (one deserialization, one pickling); a pipe is materialized only where a shuffle needs
  it (join, aggregation) or where several consumers share an expensive prefix (then it is
  persisted once, ``DISK_ONLY``).
* :class:`TableChain`: a KTable: the changelog (a ``StreamPipe`` of the source's records,
  null keys dropped) and the KTable filter / mapValues stages applied to each value.
* :class:`ViewRep`: an aggregation's final store content as a view DataFrame
  (contracts.md columns).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _runtime as rt

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..compiler import BatchPlan


@dataclass(frozen=True)
class RawBase:
    """Records of ``topic`` read from ``<lake>/raw/<topic>`` by source ``node``."""

    node: str
    topic: str
    key_serde: Any
    value_serde: Any
    extractor: Any
    src: int
    stream: bool  # a stream source: its records define the batch watermark


@dataclass(frozen=True, eq=False)
class FrameBase:
    """An already built stream frame (:data:`_runtime.STREAM_SCHEMA`)."""

    df: "DataFrame"


@dataclass(frozen=True)
class Leaf:
    base: RawBase | FrameBase
    steps: tuple[rt.Step, ...] = ()


@dataclass(frozen=True)
class StreamPipe:
    """A KStream: the union of ``leaves`` (see the module docstring)."""

    leaves: tuple[Leaf, ...]

    @staticmethod
    def of(base: RawBase | FrameBase) -> "StreamPipe":
        return StreamPipe((Leaf(base),))

    def then(self, step: rt.Step) -> "StreamPipe":
        """This stream followed by ``step`` (distributed over the union's leaves)."""
        return StreamPipe(tuple(replace(leaf, steps=leaf.steps + (step,)) for leaf in self.leaves))

    @staticmethod
    def union(pipes: list["StreamPipe"]) -> "StreamPipe":
        return StreamPipe(tuple(leaf for p in pipes for leaf in p.leaves))

    @property
    def expensive(self) -> bool:
        """True when recomputing it would redo a shuffle or a join (worth persisting once)."""
        return any(isinstance(leaf.base, FrameBase) or any(s.expensive for s in leaf.steps) for leaf in self.leaves)

    def materialize(self, ctx: "ExecContext", emitter: Any) -> "DataFrame":
        """One ``mapInPandas`` per leaf (decode, run the fused steps, emit), unioned."""
        frames = []
        for leaf in self.leaves:
            if isinstance(leaf.base, FrameBase):
                if not leaf.steps and isinstance(emitter, rt.StreamEmitter):
                    frames.append(leaf.base.df)
                    continue
                df, decoder = leaf.base.df, rt.FrameDecoder()
            else:
                b = leaf.base
                df = ctx.raw_frame(b.topic)
                decoder = rt.RawDecoder(b.node, b.key_serde, b.value_serde, b.extractor, b.src, b.stream)
            fn = rt.chain_function(decoder, leaf.steps, emitter, ctx.errors_acc, ctx.watermark_acc)
            frames.append(df.mapInPandas(fn, emitter.schema))
        return reduce(lambda a, b: a.unionByName(b), frames)


@dataclass(frozen=True)
class TableChain:
    """A KTable: ``changelog`` records carry the source's new value; ``stages`` are
    ``("filter", node, predicate, negate)`` / ``("map", node, mapper, with_key)`` applied to
    each value in order (:class:`_runtime.TableStages`)."""

    changelog: StreamPipe
    source_node: str
    source_has_store: bool
    stages: tuple[tuple[Any, ...], ...] = ()

    def with_stage(self, stage: tuple[Any, ...]) -> "TableChain":
        return replace(self, stages=self.stages + (stage,))

    @property
    def table_stages(self) -> rt.TableStages:
        return rt.TableStages(self.stages)


@dataclass(frozen=True, eq=False)
class ViewRep:
    """The content of a store as a view DataFrame (:data:`_runtime.VIEW_SCHEMA`)."""

    df: "DataFrame"
    node: str


_SPLIT_BYTES = 128 << 20  # spark.sql.files.maxPartitionBytes' default
_SMALL_BYTES = 8 << 20  # below this, one task is as fast as a repartition


def _delta_splits(path: str | Path) -> tuple[int, bool]:
    """``(estimated Spark input splits, small)`` of the Delta table at ``path`` (a local path
    or a URI) from its file sizes (delta-rs, no JVM)."""
    try:
        import pyarrow as pa
        from deltalake import DeltaTable

        sizes = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    except Exception:  # noqa: BLE001 - unknown: assume it needs spreading
        return 0, False
    return sum(-(-int(s) // _SPLIT_BYTES) for s in sizes), sum(int(s) for s in sizes) < _SMALL_BYTES


@dataclass(eq=False)
class ExecContext:
    """State of one :meth:`BatchPlan.execute`: the session, where to read, accumulators,
    node outputs, and what to release afterwards."""

    spark: "SparkSession"
    lake: Path | None
    plan: "BatchPlan"
    input_frames: dict[str, "DataFrame"] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    shared: dict[str, StreamPipe] = field(default_factory=dict)
    persisted: list["DataFrame"] = field(default_factory=list)
    broadcasts: list[Any] = field(default_factory=list)
    join_strategies: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sc = self.spark.sparkContext
        self.errors_acc = sc.accumulator({}, rt.ErrorsParam())
        self.watermark_acc = sc.accumulator(-1, rt.MaxParam())
        self.parallelism = self.plan.options.min_input_partitions or sc.defaultParallelism

    # ------------------------------------------------------------------ inputs
    def raw_frame(self, topic: str) -> "DataFrame":
        """The raw records of ``topic`` (``key, value, timestamp, partition, offset``), from
        ``input_frames`` or ``<lake>/raw/<topic>`` (the lake a local path or a URI such as
        ``s3a://bucket/lake``); spread over at least ``min_input_partitions`` tasks.

        Raises:
            BatchLayerError: if the topic's raw Delta table does not exist (for a remote URI:
                if Spark cannot load it).
        """
        from ..errors import BatchLayerError

        cols = ["key", "value", "timestamp", "partition", "offset"]
        if topic in self.input_frames:
            df = self.input_frames[topic].select(*cols)
            splits = df.rdd.getNumPartitions()
            small = False
        else:
            if self.lake is None:
                raise BatchLayerError(f"no input frame for topic {topic!r} and no lake to read it from")
            from ..delta.io import join_location, local_path

            # the lake may be a URI (s3a://bucket/lake, file:///data/lake): joined with "/"
            path = join_location(self.lake, "raw", topic)
            local = local_path(path)
            missing = (
                f"raw table of topic {topic!r} not found at {path}: ingest the topic first "
                "(batch_layer.ingest.ingest_topic) or pass input_frames"
            )
            if local is not None and not (local / "_delta_log").is_dir():
                raise BatchLayerError(missing)
            try:
                df = self.spark.read.format("delta").load(str(path)).select(*cols)
            except Exception as e:
                if local is not None:
                    raise
                raise BatchLayerError(f"{missing} ({type(e).__name__}: {e})") from e
            splits, small = _delta_splits(path)
        if not small and splits < self.parallelism:
            df = df.repartition(self.parallelism)
        return df

    # ------------------------------------------------------------------ node outputs
    def stream(self, name: str) -> StreamPipe:
        """The KStream output of node ``name``. When several nodes consume it and it is
        expensive to recompute, it is computed once and persisted (``DISK_ONLY``)."""
        if name in self.shared:
            return self.shared[name]
        rep = self.outputs[name]
        if not isinstance(rep, StreamPipe):
            raise TypeError(f"node {name} does not output a KStream (got {type(rep).__name__})")
        if self.plan.options.persist_shared and self.plan.consumers.get(name, 0) > 1 and rep.expensive:
            from pyspark import StorageLevel

            df = rep.materialize(self, rt.StreamEmitter()).persist(StorageLevel.DISK_ONLY)
            self.persisted.append(df)
            rep = StreamPipe.of(FrameBase(df))
            self.shared[name] = rep
        return rep

    def table(self, name: str) -> TableChain:
        rep = self.outputs[name]
        if not isinstance(rep, TableChain):
            raise TypeError(f"node {name} does not output a KTable (got {type(rep).__name__})")
        return rep

    def view(self, store: str) -> "DataFrame":
        """The view DataFrame of ``store`` (contracts.md columns)."""
        writer = self.plan.topology.store_writers[store]
        rep = self.outputs[writer]
        if isinstance(rep, ViewRep):
            return rep.df
        if isinstance(rep, TableChain):
            df = rep.changelog.materialize(self, rt.StreamEmitter())
            fn = rt.TableViewGroup(writer, rep.table_stages, self.errors_acc)
            return df.groupBy(self.bucket("k")).applyInPandas(rt.group_fn(fn), rt.VIEW_SCHEMA)
        raise TypeError(f"store {store} is written by {writer}, whose output is not a table")

    def bucket(self, column: str) -> Any:
        """A Spark column spreading the values of binary ``column`` over
        ``BatchOptions.key_buckets`` groups: each ``applyInPandas`` call then handles many
        keys (far less per-call overhead than one call per key)."""
        from pyspark.sql import functions as F

        return F.pmod(F.xxhash64(F.col(column)), F.lit(self.plan.options.key_buckets)).alias("bk")

    def release(self) -> None:
        """Unpersist shared frames and destroy broadcast join indexes."""
        for df in self.persisted:
            df.unpersist()
        for bc in self.broadcasts:
            try:
                bc.destroy()
            except Exception:  # noqa: BLE001 - best effort on a stopped context
                pass
        self.persisted.clear()
        self.broadcasts.clear()
