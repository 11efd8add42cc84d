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

from ._accumulators import ErrorsParam, MaxParam
from ._chain import FrameDecoder, RawDecoder, Step, StreamEmitter, chain_function
from ._folds import TimeWindowFold
from ._records import VIEW_SCHEMA, group_fn
from ._tables import TableStages, TableViewGroup

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..model import RelationalPlan


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
    """An already built stream frame (:data:`_records.STREAM_SCHEMA`)."""

    df: "DataFrame"


@dataclass(frozen=True)
class Leaf:
    """A base and the steps its records run through. ``order`` places this leaf's path
    through the graph among the other paths from the same base (see
    :meth:`StreamPipe.reached_by`): ``(topic crossings, child indexes along the path)``."""

    base: RawBase | FrameBase
    steps: tuple[Step, ...] = ()
    order: tuple[int, tuple[int, ...]] = (0, ())


@dataclass(frozen=True)
class StreamPipe:
    """A KStream: the union of ``leaves`` (see the module docstring)."""

    leaves: tuple[Leaf, ...]

    @staticmethod
    def of(base: RawBase | FrameBase) -> "StreamPipe":
        return StreamPipe((Leaf(base),))

    def then(self, step: Step) -> "StreamPipe":
        """This stream followed by ``step`` (distributed over the union's leaves)."""
        return StreamPipe(tuple(replace(leaf, steps=leaf.steps + (step,)) for leaf in self.leaves))

    @staticmethod
    def union(pipes: list["StreamPipe"]) -> "StreamPipe":
        return StreamPipe(tuple(leaf for p in pipes for leaf in p.leaves))

    def reached_by(self, index: int | None) -> "StreamPipe":
        """This stream as a node reading it sees it: ``index`` is that node's place among
        the producing node's children (the speed layer forwards a record to a node's
        children in creation order, depth first), None when the reader gets it through a
        topic (a source reading a sink's topic: the speed layer processes such a record
        after the one that caused it). So the leaves of one base that meet again in a
        view (branches merged) are ordered as the speed layer delivers them: fewer topic
        crossings first, then depth-first order (``ExecContext._fused``)."""
        def step(leaf: Leaf) -> Leaf:
            crossings, path = leaf.order
            if index is None:
                return replace(leaf, order=(crossings + 1, path + (0,)))
            return replace(leaf, order=(crossings, path + (index,)))

        return StreamPipe(tuple(step(leaf) for leaf in self.leaves))

    @property
    def expensive(self) -> bool:
        """True when recomputing it would redo a shuffle or a join (worth persisting once)."""
        return any(isinstance(leaf.base, FrameBase) or any(s.expensive for s in leaf.steps) for leaf in self.leaves)

    def materialize(self, ctx: "ExecContext", emitter: Any) -> "DataFrame":
        """One ``mapInPandas`` per leaf (decode, run the fused steps, emit), unioned."""
        frames = []
        for leaf in self.leaves:
            if isinstance(leaf.base, FrameBase):
                if not leaf.steps and isinstance(emitter, StreamEmitter):
                    frames.append(leaf.base.df)
                    continue
                df, decoder = leaf.base.df, FrameDecoder()
            else:
                b = leaf.base
                df = ctx.raw_frame(b.topic)
                decoder = RawDecoder(b.node, b.key_serde, b.value_serde, b.extractor, b.src, b.stream)
            fn = chain_function(decoder, leaf.steps, emitter, ctx.errors_acc, ctx.watermark_acc)
            frames.append(df.mapInPandas(fn, emitter.schema))
        return reduce(lambda a, b: a.unionByName(b), frames)


@dataclass(frozen=True)
class TableChain:
    """A KTable: ``changelog`` records carry the source's new value; ``stages`` are
    ``("filter", node, predicate, negate)`` / ``("map", node, mapper, with_key)`` applied to
    each value in order (:class:`_tables.TableStages`)."""

    changelog: StreamPipe
    source_node: str
    source_has_store: bool
    stages: tuple[tuple[Any, ...], ...] = ()

    def with_stage(self, stage: tuple[Any, ...]) -> "TableChain":
        return replace(self, stages=self.stages + (stage,))

    @property
    def table_stages(self) -> TableStages:
        return TableStages(self.stages)


@dataclass(frozen=True, eq=False)
class PendingFold:
    """An aggregation not yet planned: ``pipe``'s records go through ``emitter`` (an
    ``AggPrepEmitter``) into ``fold`` (a ``_folds._Fold``), grouped by key bucket (and by
    block of window starts when ``blocks``). :meth:`ExecContext.views` plans the folds of the
    requested views together (``_fused``) or, alone, as one ``mapInPandas`` and one
    ``applyInArrow`` (:meth:`ExecContext.sorted_folds`)."""

    pipe: StreamPipe
    emitter: Any
    fold: Any
    blocks: bool

    def plan_alone(self, ctx: "ExecContext") -> "DataFrame":
        """One ``mapInPandas`` pass, then the fold as :meth:`ExecContext.sorted_folds` runs it."""
        from pyspark.sql import functions as F

        prep = self.pipe.materialize(ctx, self.emitter).withColumn("cid", F.lit(0))
        return ctx.sorted_folds(prep, {0: self.fold}).drop("cid")


@dataclass(frozen=True, eq=False)
class ViewRep:
    """The content of a store as a view DataFrame (:data:`_records.VIEW_SCHEMA`): ``df``, or
    ``pending`` until :meth:`ExecContext.views` plans it."""

    df: "DataFrame | None"
    node: str
    pending: PendingFold | None = None


#: ``grp`` of :meth:`ExecContext.sorted_folds`: ``cid << 48 | hash(key bucket, block) & mask``
_GROUP_HASH_BITS = 48
_GROUP_HASH_MASK = (1 << _GROUP_HASH_BITS) - 1
_SPLIT_BYTES = 128 << 20  # spark.sql.files.maxPartitionBytes' default
_SMALL_BYTES = 8 << 20  # below this, one task is as fast as a repartition


def _delta_splits(path: str | Path) -> tuple[int, bool]:
    """``(estimated Spark input splits, small)`` of the Delta table at ``path`` (a local path
    or a URI) from its file sizes (delta-rs, no JVM)."""
    try:
        import pyarrow as pa
        from deltalake import DeltaTable

        from ..delta.storage import delta_uri, storage_options

        table = DeltaTable(delta_uri(path), storage_options=storage_options(path))
        sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    except Exception:  # noqa: BLE001 - unknown: assume it needs spreading
        return 0, False
    return sum(-(-int(s) // _SPLIT_BYTES) for s in sizes), sum(int(s) for s in sizes) < _SMALL_BYTES


@dataclass(eq=False)
class ExecContext:
    """State of one :meth:`BatchPlan.execute`: the session, where to read, accumulators,
    node outputs, and what to release afterwards."""

    spark: "SparkSession"
    lake: Path | None
    plan: "RelationalPlan"
    input_frames: dict[str, "DataFrame"] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    shared: dict[str, StreamPipe] = field(default_factory=dict)
    persisted: list["DataFrame"] = field(default_factory=list)
    broadcasts: list[Any] = field(default_factory=list)
    join_strategies: dict[str, str] = field(default_factory=dict)
    #: the node being built (``BatchPlan.execute``): :meth:`stream` orders its input's paths
    current: str | None = None
    _readers: dict[str, list[str]] | None = None
    _children: dict[str, list[str]] | None = None

    def __post_init__(self) -> None:
        sc = self.spark.sparkContext
        self.errors_acc = sc.accumulator({}, ErrorsParam())
        self.watermark_acc = sc.accumulator(-1, MaxParam())
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
            from ..delta.io import local_path
            from ..delta.layout import LakeLayout
            from ..delta.storage import spark_uri

            # the lake may be a URI (s3a://bucket/lake, file:///data/lake): joined with "/"
            path = LakeLayout(self.lake).raw_table(topic)
            local = local_path(path)
            missing = (
                f"raw table of topic {topic!r} not found at {path}: ingest the topic first "
                "(batch_layer.ingest.ingest_topic) or pass input_frames"
            )
            if local is not None and not (local / "_delta_log").is_dir():
                raise BatchLayerError(missing)
            try:
                df = self.spark.read.format("delta").load(spark_uri(path)).select(*cols)
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
        expensive to recompute, it is computed once and persisted (``DISK_ONLY``), unless
        every node reading it (transitively) is a fused step or aggregation
        (:meth:`feeds_only_folds`): the fused pass then computes it once."""
        return self._stream(name).reached_by(self._child_index(name))

    def _child_index(self, name: str) -> int | None:
        """The place of the node being built among ``name``'s children; None when it reads
        ``name`` through a topic (a source reading a sink's topic); 0 for any other reader
        (a suppress reading its aggregation's input)."""
        if self.current is None:
            return 0
        if self._children is None:
            self._children = self.plan.topology.child_map()
        children = self._children.get(name, [])
        if self.current in children:
            return children.index(self.current)
        from speed_layer.graph import ops

        return None if isinstance(self.plan.topology.nodes[self.current].op, ops.SourceOp) else 0

    def _stream(self, name: str) -> StreamPipe:
        if name in self.shared:
            return self.shared[name]
        rep = self.outputs[name]
        if not isinstance(rep, StreamPipe):
            raise TypeError(f"node {name} does not output a KStream (got {type(rep).__name__})")
        if (self.plan.options.persist_shared and self.plan.consumers.get(name, 0) > 1 and rep.expensive
                and not self.feeds_only_folds(name)):
            from pyspark import StorageLevel

            df = rep.materialize(self, StreamEmitter()).persist(StorageLevel.DISK_ONLY)
            self.persisted.append(df)
            rep = StreamPipe.of(FrameBase(df))
            self.shared[name] = rep
        return rep

    def feeds_only_folds(self, name: str) -> bool:
        """True when fused aggregations are on (``BatchOptions.fuse_aggregations``) and every
        node reading node ``name``'s output, transitively, is a stateless step (filter, map,
        flatMap, peek, branch, merge, a sink and the source reading its topic back) or a
        KGroupedStream aggregation: then all of them run in the fused pass of
        :meth:`views`, which computes ``name`` once per record without persisting it."""
        if not self.plan.options.fuse_aggregations:
            return False
        from speed_layer.graph import ops

        from ..model import STATELESS_OPS

        steps = STATELESS_OPS + (ops.SinkOp, ops.SourceOp)
        readers = self.readers()
        nodes = self.plan.topology.nodes
        stack, seen = [name], {name}
        while stack:
            for r in readers.get(stack.pop(), ()):
                op = nodes[r].op
                if isinstance(op, ops.AggregateOp):
                    continue
                if not isinstance(op, steps):  # a KTable source over it, a join, a suppress, ...
                    return False
                if r not in seen:
                    seen.add(r)
                    stack.append(r)
        return True

    def readers(self) -> dict[str, list[str]]:
        """node -> the plan's nodes that depend on it (``BatchPlan.deps`` inverted)."""
        if self._readers is None:
            inv: dict[str, list[str]] = {}
            for n, ds in self.plan.deps.items():
                for d in ds:
                    inv.setdefault(d, []).append(n)
            self._readers = inv
        return self._readers

    def table(self, name: str) -> TableChain:
        rep = self.outputs[name]
        if not isinstance(rep, TableChain):
            raise TypeError(f"node {name} does not output a KTable (got {type(rep).__name__})")
        return rep

    def views(self, stores: tuple[str, ...] | list[str]) -> dict[str, "DataFrame"]:
        """The view DataFrames of ``stores``. Their pending aggregations are planned
        together when there are several, or one reading an input through several branches
        (``_fused``: one pass per input, one shuffle; the result persisted ``DISK_ONLY`` and
        each view a filter of it), alone otherwise."""
        writers = self.plan.topology.store_writers
        pending: dict[str, PendingFold] = {}
        for store in stores:
            rep = self.outputs[writers[store]]
            if isinstance(rep, ViewRep) and rep.df is None and rep.pending is not None:
                pending[rep.node] = rep.pending
        alone = len(pending) == 1 and all(len({leaf.base for leaf in pf.pipe.leaves}) == len(pf.pipe.leaves)
                                          for pf in pending.values())
        if alone:  # one view whose inputs are all distinct: nothing to share
            (name, pf), = pending.items()
            self.outputs[name] = ViewRep(pf.plan_alone(self), name)
        elif pending:
            for name, df in self._fused(pending).items():
                self.outputs[name] = ViewRep(df, name)
        return {store: self.view(store) for store in stores}

    def _fused(self, pending: dict[str, PendingFold]) -> dict[str, "DataFrame"]:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from ._fused import FUSED_AGG_SCHEMA, fused_chain_function

        names = list(pending)
        by_base: dict[Any, list[tuple[int, tuple[Step, ...], Any, int]]] = {}
        for cid, name in enumerate(names):
            leaves: dict[Any, list[Leaf]] = {}
            for leaf in pending[name].pipe.leaves:
                leaves.setdefault(leaf.base, []).append(leaf)
            for base, same in leaves.items():  # several paths from one base: rank them as the speed layer delivers
                ranked = sorted(same, key=lambda leaf: leaf.order) if len(same) > 1 else same
                for rank, leaf in enumerate(ranked):
                    by_base.setdefault(base, []).append((cid, leaf.steps, pending[name].emitter, rank))
        # counts over time windows: counted in the pass, one row per key and set of windows
        folds = {cid: pending[name].fold for cid, name in enumerate(names)}
        counted = {}
        for cid, fold in folds.items():
            precounted = fold.precounting() if isinstance(fold, TimeWindowFold) else None
            if precounted is not None:
                counted[cid] = folds[cid] = precounted
        frames = []
        for base, consumers in by_base.items():
            if isinstance(base, FrameBase):
                df, decoder = base.df, FrameDecoder()
            else:
                df = self.raw_frame(base.topic)
                decoder = RawDecoder(base.node, base.key_serde, base.value_serde, base.extractor, base.src, base.stream)
            fn = fused_chain_function(decoder, consumers, self.errors_acc, self.watermark_acc,
                                         self.plan.config.python_gc_thresholds, frozenset(counted))
            frames.append(df.mapInArrow(fn, FUSED_AGG_SCHEMA))
        prep = reduce(lambda a, b: a.unionByName(b), frames)
        out = self.sorted_folds(prep, folds)
        out = out.persist(StorageLevel.DISK_ONLY)
        self.persisted.append(out)
        return {name: out.filter(F.col("cid") == cid).drop("cid") for cid, name in enumerate(names)}

    def sorted_folds(self, prep: "DataFrame", folds: dict[int, Any]) -> "DataFrame":
        """The view rows (:data:`_fused.FUSED_VIEW_SCHEMA`) of ``prep``'s rows
        (:data:`_fused.FUSED_AGG_SCHEMA`) folded by ``folds[cid]``: one shuffle and one
        ``applyInArrow`` call (``_fused.FusedFold``) per group, a group being one long
        ``grp``, ``cid`` in its top 15 bits and a 48-bit hash of ``(key bucket, block)``
        below: Spark sorts the rows by that one long (a radix sort) and the fold sorts each
        key's rows in batch order. ``mid`` numbers the
        rows in the order the pass emitted them (the tie-break of equal order keys)."""
        from pyspark.sql import functions as F

        from ._fused import FUSED_VIEW_SCHEMA, FusedFold, arrow_group_fn

        # cid in the top bits: each output partition comes out view by view, so the
        # persisted result's cached batches hold one view each and a view's scan skips
        # the others' batches (partition pruning on the cid column's batch statistics)
        hashed = F.xxhash64(self.bucket("gk"), F.col("blk")).bitwiseAND(F.lit(_GROUP_HASH_MASK))
        grp = F.shiftleft(F.col("cid").cast("long"), _GROUP_HASH_BITS).bitwiseOR(hashed).alias("grp")
        prep = prep.withColumn("mid", F.monotonically_increasing_id()).withColumn("grp", grp)
        fold = FusedFold(folds, self.plan.config.python_gc_thresholds)
        return prep.groupBy("grp").applyInArrow(arrow_group_fn(fold), FUSED_VIEW_SCHEMA)

    def view(self, store: str) -> "DataFrame":
        """The view DataFrame of ``store`` (contracts.md columns)."""
        writer = self.plan.topology.store_writers[store]
        rep = self.outputs[writer]
        if isinstance(rep, ViewRep):
            if rep.df is None:
                return self.views([store])[store]
            return rep.df
        if isinstance(rep, TableChain):
            df = rep.changelog.materialize(self, StreamEmitter())
            fn = TableViewGroup(writer, rep.table_stages, self.errors_acc)
            return df.groupBy(self.bucket("k")).applyInPandas(group_fn(fn), VIEW_SCHEMA)
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
