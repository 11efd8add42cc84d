"""Compile a ``speed_layer.Topology`` into a PySpark plan that recomputes its views over the
whole history (the batch layer of the lambda architecture).

The batch result equals the speed layer's for every closed window when no record was dropped
as late (docs/contracts.md, "Batch semantics"). Two executors give that answer
(docs/batch-executors.md): relational translations with the speed layer's processor
semantics (``batch_layer.translators``), and the general executor
(``batch_layer.general``), which runs the speed layer's own tasks inside Spark for every
node without a relational form. User functions run unchanged in Spark's Python workers
(``mapInPandas`` / ``applyInPandas``, pickled with cloudpickle); records are ordered by
``(timestamp, source partition, offset)`` of their original source record.

Usage::

    plan = compile_topology(topology, views=["clicks_hourly"])   # no Spark needed
    frames = plan.execute(spark, lake)          # {store: DataFrame}, lazy
    frames["clicks_hourly"].show()
    frames.release()                            # unpersist shared intermediates

``batch_layer.run.run_batch`` executes a plan and writes the views to Delta.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from speed_layer.config import StreamsConfig
from speed_layer.graph import ops
from speed_layer.topology import Topology

from .errors import BatchCompileError
from .model import BatchOptions, RelationalPlan
from .translators import TRANSLATORS, VIEW_WRITERS, Translator, Unsupported
from .translators._plan import ExecContext
from .translators.sources import topic_writers
from .views import BatchViews

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .general.plan import GeneralPlan

__all__ = ["BatchCompileError", "BatchOptions", "BatchPlan", "BatchViews", "compile_topology"]


class BatchPlan(RelationalPlan):
    """A compiled topology: the nodes needed for ``views`` in creation order (parents
    first), their dependencies and consumer counts. Build it with :func:`compile_topology`.

    The data and ``explain`` are :class:`batch_layer.model.RelationalPlan`'s (what the
    translators read); this class adds what needs the translators: ``source_topics`` and
    ``execute``."""

    @property
    def source_topics(self) -> list[str]:
        """Topics read from ``<lake>/raw/<topic>`` by this plan."""
        out = []
        for name in self.nodes:
            node = self.topology.nodes[name]
            if isinstance(node.op, ops.SourceOp):
                out.extend(t for t in node.op.topics if not topic_writers(self.topology, node, t))
        return out

    def execute(self, spark: "SparkSession", lake: str | Path | None, *, input_frames: dict[str, "DataFrame"] | None = None) -> BatchViews:
        """Build the PySpark plan of every requested view.

        Args:
            spark: the session (``batch_layer.spark.get_spark()``).
            lake: the lake root; topic ``t`` is read from ``<lake>/raw/<t>`` (Delta, raw
                schema of contracts.md) unless ``input_frames`` has it.
            input_frames: ``{topic: DataFrame}`` with the raw columns ``key binary, value
                binary, timestamp long, partition int, offset long`` (tests, or callers
                that already hold the input).

        Returns:
            :class:`BatchViews` ``{store: DataFrame}`` (lazy). Stream-table joins in
            ``auto``/``broadcast`` mode run a small Spark job here to index the table.

        Raises:
            BatchLayerError: if a raw input table is missing.
        """
        ctx = ExecContext(spark, None if lake is None else Path(lake), self, dict(input_frames or {}))
        try:
            for name in self.nodes:
                node = self.topology.nodes[name]
                ctx.current = name
                ctx.outputs[name] = TRANSLATORS[type(node.op)].build(node, ctx)
            ctx.current = None
            frames = ctx.views(self.views)
        except BaseException:
            ctx.release()
            raise
        return BatchViews(frames, ctx)


def compile_topology(
    topology: Topology,
    *,
    views: list[str] | None = None,
    config: StreamsConfig | dict[str, Any] | None = None,
    options: BatchOptions | None = None,
    outputs: bool = False,
) -> "BatchPlan | GeneralPlan":
    """Compile ``topology`` for the batch layer; needs no Spark.

    The batch contract (docs/contracts.md, "Batch semantics"): batch is authoritative for
    history. It computes the answer of the speed layer given the whole input in event-time
    order ``(timestamp, table changes first, partition, offset, topic)``, so no record is
    late: for every table key and every window, the result equals the speed layer's when
    the speed layer dropped nothing as late. Each record a task sends takes the place of
    the input record that caused it (a repartition costs no reordering).

    Every node has a batch execution. With ``options.executor == "auto"`` the nodes
    upstream of the requested views are translated relationally (fused ``mapInPandas``
    steps, as-of joins, window folds: ``batch_layer.translators``) when all of them have a
    translation; otherwise the topology runs on the general executor
    (``batch_layer.general``): the speed layer's own ``StreamTask``s, one per sub-topology
    and partition, on Kafka's partitioning, inside ``applyInPandas``.

    Args:
        topology: the same Topology the speed layer runs.
        views: store names to compute; None: every store in ``topology.store_writers``
            plus the stores of Processor-API nodes.
        config: the speed layer's StreamsConfig (or dict), for the default serdes of sources
            without explicit ones (default: String key, JSON value) and ``application.id``.
        options: :class:`BatchOptions`.
        outputs: also compute the records of every output topic (a topic the topology
            writes but does not read, the dead-letter topic included), returned as
            ``execute(...).topics``; the relational path computes views only, so this
            selects the general executor.

    Returns:
        A :class:`BatchPlan` (relational) or a ``GeneralPlan``; both have ``views``,
        ``source_topics``, ``explain()`` and ``execute(spark, lake)``.

    Raises:
        BatchCompileError: a requested view is not a store of the topology.
    """
    cfg = StreamsConfig.of(config)
    opts = options or BatchOptions()
    requested = default_views(topology) if views is None else list(dict.fromkeys(views))
    for store in requested:
        if store not in topology.stores:
            raise BatchCompileError(f"no view {store!r}: the topology materializes {sorted(default_views(topology))}")
    if opts.executor == "auto" and not outputs:
        try:
            return _compile_relational(topology, requested, cfg, opts)
        except BatchCompileError as exc:
            if exc.node is None:
                raise
    from .general.plan import plan_general

    return plan_general(topology, tuple(requested), cfg, opts)


def default_views(topology: Topology) -> list[str]:
    """Every store of ``topology.store_writers``, then the Processor-API nodes' stores."""
    from .general.plan import process_stores

    return list(dict.fromkeys([*topology.store_writers, *process_stores(topology)]))


def _compile_relational(topology: Topology, requested: list[str], cfg: StreamsConfig, opts: BatchOptions) -> BatchPlan:
    """The relational plan of ``requested``.

    Raises:
        BatchCompileError: naming the node (``node`` set) when a node upstream of a
            requested view has no relational translation, or a view's store is not
            written by an op served relationally.
    """
    writers = topology.store_writers
    for store in requested:
        if store not in writers:
            raise BatchCompileError(f"store {store!r} is not written by a DSL aggregation or table",
                                    node=store, op="StoreSpec", views=[store])

    needed_by: dict[str, set[str]] = {}
    deps: dict[str, tuple[str, ...]] = {}
    problems: dict[str, str] = {}
    for store in requested:
        stack = [writers[store]]
        while stack:
            name = stack.pop()
            if name in needed_by and store in needed_by[name]:
                continue
            needed_by.setdefault(name, set()).add(store)
            node = topology.nodes[name]
            translator: Translator | None = TRANSLATORS.get(type(node.op))
            if name not in deps:
                d = node.parents
                if translator is None:
                    problems[name] = (f"the batch layer has no translation for {type(node.op).__name__} "
                                      f"(translated: {', '.join(sorted(t.__name__ for t in TRANSLATORS))})")
                else:
                    try:
                        d = translator.dependencies(node, topology)
                    except Unsupported as exc:
                        problems[name] = exc.reason
                deps[name] = tuple(dict.fromkeys(d))
            stack.extend(deps[name])

    order = [n for n in topology.nodes if n in needed_by]
    for name in order:
        node = topology.nodes[name]
        reason = problems.get(name)
        if reason is None:
            try:
                TRANSLATORS[type(node.op)].check(node, topology)
            except Unsupported as exc:
                reason = exc.reason
        if reason is not None:
            raise BatchCompileError(reason, node=name, op=type(node.op).__name__, views=sorted(needed_by[name]))
    for store in requested:
        w = topology.nodes[writers[store]]
        if not isinstance(w.op, VIEW_WRITERS):
            raise BatchCompileError(f"store {store!r} is written by a {type(w.op).__name__}, which is not served as a view",
                                    node=w.name, op=type(w.op).__name__, views=[store])

    consumers: dict[str, int] = {n: 0 for n in order}
    for name in order:
        for d in deps[name]:
            consumers[d] += 1
    for store in requested:
        consumers[writers[store]] += 1
    # numbered by topic name, as the general executor's ``src``: the last tie-breaker of
    # the batch order (timestamp, table changes first, partition, offset, topic)
    pairs = [(t, node.name) for node in topology.nodes.values() if isinstance(node.op, ops.SourceOp) for t in node.op.topics]
    src_index: dict[tuple[str, str], int] = {(n, t): i for i, (t, n) in enumerate(sorted(pairs))}
    return BatchPlan(topology, tuple(requested), tuple(order), {n: deps[n] for n in order}, consumers, cfg, opts, src_index)
