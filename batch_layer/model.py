"""The batch layer's shared model: what the compiler, the relational translations and the
general executor all read of a compiled plan.

* :class:`BatchOptions`: the tuning of a batch plan (``compile_topology(options=...)``);
* :class:`RelationalPlan`: a topology compiled for the relational translations (the
  data of a :class:`batch_layer.compiler.BatchPlan`, which adds ``execute``);
* :data:`TABLE_OPS`, :data:`STATELESS_OPS`: the op families the plan distinguishes.

It imports nothing else of the batch layer (``batch_layer.compiler`` re-exports
``BatchOptions``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from speed_layer.config import StreamsConfig
from speed_layer.graph import ops
from speed_layer.topology import Topology

__all__ = ["STATELESS_OPS", "TABLE_OPS", "BatchOptions", "RelationalPlan"]

DAY_MS = 24 * 3600 * 1000

#: ops whose output is a KTable changelog (records carry ``Change``)
TABLE_OPS = (ops.TableSourceOp, ops.TableFilterOp, ops.TableMapValuesOp, ops.GlobalStoreOp)
#: stream ops a record passes through one at a time, in order
STATELESS_OPS = (ops.FilterOp, ops.MapOp, ops.MapValuesOp, ops.FlatMapOp, ops.FlatMapValuesOp, ops.PeekOp, ops.BranchOp,
                 ops.MergeOp)


@dataclass(frozen=True)
class BatchOptions:
    """Tuning of the batch plan (semantics never change with these).

    Attributes:
        join_strategy: stream-table joins by ``"broadcast"`` of the table changelog,
            ``"shuffle"`` (union + group by join key), or ``"auto"``: broadcast when the
            table has at most ``broadcast_max_rows`` changes.
        broadcast_max_rows: see ``join_strategy``.
        window_block_ms: time-window aggregations group records by (key, block of window
            starts); a block spans at least this many ms (and at least the window size).
            Larger blocks: fewer, bigger groups; a record is copied into at most 2 blocks.
        min_input_partitions: raw inputs with fewer Spark partitions are repartitioned to
            this many (None: the SparkContext's default parallelism).
        persist_shared: persist (``DISK_ONLY``) a node's output consumed by several nodes
            when recomputing it would redo a join or shuffle (not when only fused
            aggregations read it, see ``fuse_aggregations``).
        fuse_aggregations: the KGroupedStream aggregations of the requested views (and
            cogroups) run in ONE pass per input and ONE shuffle: each input is decoded once,
            a step shared by several views runs once per record, then one ``applyInArrow``
            calls each view's fold on its groups (``translators._fused``). A stream read only
            by such aggregations is then not persisted.
        key_buckets: keyed ``applyInPandas`` steps (aggregations, shuffled joins, table
            views) hash keys into this many groups, each call folding all of its keys.
        executor: ``"auto"``: the relational translation when every node upstream of the
            requested views has one, else the general executor (the speed layer's own
            processors run per task inside Spark, ``batch_layer.general``);
            ``"general"``: always the general executor. Both give the same answer
            (docs/batch-executors.md).
        write_concurrency: the views are written by up to this many Spark jobs at once
            (one driver thread each; 1: one after another). A view's write is mostly
            driver-side latency on small data (planning, the Delta commit), which the
            others' jobs overlap; views computed by one fused pass share its one shuffle
            and its persisted result (a second job waits for the stage the first runs).
    """

    join_strategy: Literal["auto", "broadcast", "shuffle"] = "auto"
    broadcast_max_rows: int = 200_000
    window_block_ms: int = 30 * DAY_MS
    min_input_partitions: int | None = None
    persist_shared: bool = True
    fuse_aggregations: bool = True
    key_buckets: int = 64
    executor: Literal["auto", "general"] = "auto"
    write_concurrency: int = 4

    def __post_init__(self) -> None:
        if self.executor not in ("auto", "general"):
            raise ValueError(f"executor must be auto or general, got {self.executor!r}")
        if self.write_concurrency < 1:
            raise ValueError(f"write_concurrency must be >= 1, got {self.write_concurrency}")
        if self.join_strategy not in ("auto", "broadcast", "shuffle"):
            raise ValueError(f"join_strategy must be auto, broadcast or shuffle, got {self.join_strategy!r}")
        if self.broadcast_max_rows < 0 or self.window_block_ms <= 0 or self.key_buckets <= 0:
            raise ValueError("broadcast_max_rows must be >= 0, window_block_ms and key_buckets > 0")


@dataclass
class RelationalPlan:
    """A topology compiled for the relational translations: the nodes needed for ``views``
    in creation order (parents first), their dependencies and consumer counts; what the
    translators read of the plan (``ExecContext.plan``). ``compile_topology`` builds a
    :class:`batch_layer.compiler.BatchPlan`, this plus ``source_topics`` and ``execute``."""

    topology: Topology
    views: tuple[str, ...]
    nodes: tuple[str, ...]
    deps: dict[str, tuple[str, ...]]
    consumers: dict[str, int]
    config: StreamsConfig
    options: BatchOptions
    #: (source node, topic) -> index used as an order tie-breaker between topics
    src_index: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def executor(self) -> str:
        """``"relational"`` (a ``GeneralPlan`` says ``"general"``)."""
        return "relational"

    def explain(self) -> str:
        """One line per needed node: name, op, dependencies."""
        lines = [f"views: {', '.join(self.views)}"]
        for name in self.nodes:
            op = self.topology.nodes[name].op
            lines.append(f"  {name}: {type(op).__name__} <- {', '.join(self.deps[name]) or '(raw input)'}")
        return "\n".join(lines)
