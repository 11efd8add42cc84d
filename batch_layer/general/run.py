"""A topology compiled for the general executor (:class:`GeneralPlan`, built by
:func:`batch_layer.general.plan.plan_general`), one execution of it in Spark
(:class:`GeneralRun`), and the views it returns (:class:`GeneralViews`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

from speed_layer.config import StreamsConfig
from speed_layer.graph.nodes import SubTopology
from speed_layer.graph.ops import GlobalStoreOp
from speed_layer.runtime.internal_topics import plan_topology
from speed_layer.topology import Topology

from ..errors import BatchCompileError, BatchLayerError
from ..views import BatchViews
from .topology import batch_config, in_memory
from .worker import INPUT_SCHEMA, OUTPUT_SCHEMA, TaskSpec, task_function

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..model import BatchOptions

__all__ = ["MAX_ROUNDS", "GeneralPlan", "GeneralRun", "GeneralViews", "Group", "task_spec", "union_all"]

#: rounds a group of sub-topologies that feed each other may take to settle
MAX_ROUNDS = 10

_VIEW_COLUMNS = ("skey as key", "ws as window_start", "we as window_end", "sval as value", "sts as timestamp")


def _release(frames: list["DataFrame"]) -> None:
    """Drop the blocks of locally checkpointed ``frames`` (classic Spark: the RDD under each
    frame's ``LogicalRDD``; a Spark Connect server frees them when the frame is gone)."""
    for df in frames:
        try:
            df._jdf.queryExecution().logical().rdd().unpersist(False)
        except Exception:  # Spark Connect (no JVM handle), or a frame that is not a checkpoint
            df.unpersist()
    frames.clear()


class GeneralViews(BatchViews):
    """``{store: view DataFrame}`` computed by the general executor (columns of
    contracts.md), plus :attr:`topics`: ``{topic: DataFrame}`` of every topic the topology
    writes but does not read (``key binary, value binary, timestamp long, partition int,
    offset long``; offsets number each partition's records in batch order), the dead-letter
    topic included when records were dead-lettered."""

    def __init__(self, frames: dict[str, "DataFrame"], topics: dict[str, "DataFrame"], dropped: "DataFrame",
                 watermark: "DataFrame", persisted: list["DataFrame"], store_rows: "DataFrame | None" = None,
                 topic_rows: "DataFrame | None" = None) -> None:
        dict.__init__(self, frames)
        self.topics = topics
        self._store_rows = store_rows
        self._topic_rows = topic_rows
        self._dropped = dropped
        self._watermark = watermark
        self._persisted = persisted
        self._counts: dict[str, int] | None = None

    def dropped_by_node(self) -> dict[str, int]:
        """Records dropped (skipped or dead-lettered) per source node of the record."""
        if self._counts is None:
            rows = self._dropped.groupBy("skey").sum("sts").collect()
            self._counts = {r[0]: int(r[1]) for r in sorted(rows)}
        return dict(self._counts)

    def dropped(self) -> int:
        return sum(self.dropped_by_node().values())

    def watermark_ms(self) -> int:
        """Largest timestamp extracted from the stream input topics' records (dropped
        records excluded), ms; -1 if none."""
        value = self._watermark.collect()[0][0]
        return -1 if value is None else int(value)

    def collect_stores(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every view's rows in ONE Spark job (a job per view costs more than small views):
        ``{store: sorted [(key, window_start, window_end, value, timestamp)]}``, the rows
        of ``self[store].collect()``."""
        out: dict[str, list[tuple[Any, ...]]] = {s: [] for s in self}
        if out and self._store_rows is not None:
            for r in self._store_rows.collect():
                if r[0] in out:
                    out[r[0]].append(tuple(r[1:]))
        return {s: sorted(rows) for s, rows in out.items()}

    def collect_topics(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every output topic's records in ONE Spark job: ``{topic: [(key, value,
        timestamp, partition, offset)]}`` in ``(partition, offset)`` order, the rows of
        ``self.topics[topic]``."""
        out: dict[str, list[tuple[Any, ...]]] = {t: [] for t in self.topics}
        if out and self._topic_rows is not None:
            for r in sorted(self._topic_rows.collect(), key=lambda r: (r[0], r[4], r[5])):
                out[r[0]].append(tuple(r[1:]))
        return out

    @property
    def join_strategies(self) -> dict[str, str]:
        return {}

    def release(self) -> None:
        _release(self._persisted)


@dataclass(frozen=True)
class Group:
    """Sub-topologies run together: one, or several that feed each other (``cyclic``)."""

    subs: tuple[SubTopology, ...]
    cyclic: bool


@dataclass
class GeneralPlan:
    """A topology compiled for the general executor (build it with
    :func:`batch_layer.general.plan.plan_general`).

    Attributes:
        topology: the topology as the user built it.
        views: the stores whose content is computed.
        config: the speed layer's config.
        options: batch options.
        groups: sub-topology groups in dependency order.
        produced: full topic name -> ids of the sub-topologies writing it.
        reads: sub-topology id -> the full topic names its tasks read (global tables'
            topics included).
        input_topics: topics read from ``<lake>/raw/<topic>`` (no sink of the topology
            writes them).
        table_topics: input topics read as KTable / GlobalKTable changelogs.
    """

    topology: Topology
    views: tuple[str, ...]
    config: StreamsConfig
    options: "BatchOptions"
    groups: tuple[Group, ...]
    produced: dict[str, tuple[int, ...]]
    reads: dict[int, tuple[str, ...]]
    globals_of: dict[int, tuple[tuple[str, str, tuple[str, ...]], ...]]
    input_topics: tuple[str, ...]
    table_topics: frozenset[str]
    executor: str = field(default="general", init=False)

    @property
    def source_topics(self) -> list[str]:
        """Topics read from ``<lake>/raw/<topic>`` by this plan."""
        return list(self.input_topics)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.topology.nodes)

    def levels(self) -> list[list[Group]]:
        """The groups by dependency level: a group's level is one more than the highest
        level of the groups writing a topic it reads; the acyclic groups of one level run
        in one Spark stage."""
        level_of: dict[int, int] = {}
        out: list[list[Group]] = []
        for g in self.groups:  # dependency order
            ids = {s.id for s in g.subs}
            writers = {w for s in g.subs for t in self.reads[s.id] for w in self.produced.get(t, ()) if w not in ids}
            lvl = max((level_of[w] + 1 for w in writers), default=0)
            for i in ids:
                level_of[i] = lvl
            while len(out) <= lvl:
                out.append([])
            out[lvl].append(g)
        return out

    def explain(self) -> str:
        """One line per sub-topology group: ids, topics read, whether it iterates."""
        lines = [f"views: {', '.join(self.views)}", "executor: general (speed layer processors per task)"]
        for g in self.groups:
            ids = ", ".join(str(s.id) for s in g.subs)
            topics = sorted({t for s in g.subs for t in self.reads[s.id]})
            lines.append(f"  sub-topolog{'ies' if len(g.subs) > 1 else 'y'} {ids}{' (to a fixed point)' if g.cyclic else ''} <- {', '.join(topics)}")
        return "\n".join(lines)

    def execute(self, spark: "SparkSession", lake: Any, *, input_frames: dict[str, "DataFrame"] | None = None) -> "GeneralViews":
        """Run every sub-topology in Spark; returns :class:`GeneralViews` (lazy frames over
        persisted task outputs).

        Raises:
            BatchLayerError: a raw input table is missing.
            BatchCompileError: a group of sub-topologies feeding each other did not settle
                within :data:`MAX_ROUNDS` rounds.
        """
        return GeneralRun(self, spark, lake, dict(input_frames or {})).run()


def task_spec(plan: GeneralPlan, topology: Topology, sub: SubTopology, partitions: dict[str, int], default_partitions: int) -> TaskSpec:
    """The :class:`TaskSpec` of ``sub``'s tasks."""
    wanted = tuple(s for s in sub.stores if s in plan.views)
    return TaskSpec(topology, batch_config(plan.config), sub, partitions, default_partitions, plan.globals_of.get(sub.id, ()), wanted)


def union_all(frames: list["DataFrame"]) -> "DataFrame":
    return reduce(lambda a, b: a.unionByName(b), frames)


class GeneralRun:
    """State of one :meth:`GeneralPlan.execute`."""

    def __init__(self, plan: GeneralPlan, spark: "SparkSession", lake: Any, input_frames: dict[str, "DataFrame"]) -> None:
        self.plan, self.spark, self.input_frames = plan, spark, input_frames
        self.lake = None if lake is None else str(lake)
        self.topology = in_memory(plan.topology)
        self.src_index = {t: i for i, t in enumerate(sorted(plan.input_topics))}
        #: full topic name -> frames of records sent to it (:data:`INPUT_SCHEMA`)
        self.sent: dict[str, list["DataFrame"]] = {}
        self.outputs: list["DataFrame"] = []
        self.persisted: list["DataFrame"] = []

    # ------------------------------------------------------------------ inputs
    def raw(self, topic: str) -> "DataFrame":
        """The raw records of input ``topic``: ``key, value, timestamp, partition, offset``.

        Raises:
            BatchLayerError: neither an input frame nor ``<lake>/raw/<topic>`` exists.
        """
        cols = ["key", "value", "timestamp", "partition", "offset"]
        if topic in self.input_frames:
            return self.input_frames[topic].select(*cols)
        if self.lake is None:
            raise BatchLayerError(f"no input frame for topic {topic!r} and no lake to read it from")
        from ..delta.io import local_path
        from ..delta.layout import LakeLayout
        from ..delta.storage import spark_uri

        path = LakeLayout(self.lake).raw_table(topic)
        local = local_path(path)
        if local is not None and not (local / "_delta_log").is_dir():
            raise BatchLayerError(f"raw table of topic {topic!r} not found at {path}: ingest the topic first "
                                  "(batch_layer.ingest.ingest_topic) or pass input_frames")
        return self.spark.read.format("delta").load(spark_uri(path)).select(*cols)

    def input_rows(self, topic: str) -> "DataFrame":
        """``topic``'s records as task input rows (:data:`INPUT_SCHEMA`)."""
        from pyspark.sql import functions as F

        if topic in self.plan.produced:
            frames = self.sent.get(topic)
            return union_all(frames) if frames else self.spark.createDataFrame([], INPUT_SCHEMA)
        rank = 0 if topic in self.plan.table_topics else 1
        return self.raw(topic).select(
            F.lit(topic).alias("topic"), F.col("partition").cast("int").alias("p"), F.col("offset").cast("long").alias("o"),
            F.col("key").alias("k"), F.col("value").alias("v"), F.col("timestamp").cast("long").alias("ts"),
            F.lit(None).cast("binary").alias("ok"), F.lit(None).cast("binary").alias("h"),
            F.lit(rank).alias("rank"), F.lit(self.src_index[topic]).alias("src"))

    def partition_counts(self) -> dict[str, int]:
        """Every topic's partition count: input topics from their records, repartition
        topics as the speed layer derives them.

        Raises:
            TopologyException: co-partitioned topics with different counts.
        """
        from pyspark.sql import functions as F

        user: dict[str, int | None] = {t: 1 for t in self.plan.input_topics}
        if self.plan.input_topics:
            frames = [self.raw(t).select(F.lit(t).alias("topic"), "partition") for t in self.plan.input_topics]
            for topic, top in union_all(frames).groupBy("topic").agg(F.max("partition")).collect():
                user[topic] = 1 if top is None else int(top) + 1
        # a user topic the topology writes and reads back (``through``) is sized like
        # the largest input topic
        app = self.plan.config.application_id
        internal = {f"{app}-{t}" for t in self.plan.topology.internal_topics}
        widest = max([n for n in user.values() if n] or [1])
        for t in self.plan.produced:
            if t not in user and t not in internal:
                user[t] = widest
        counts = dict(plan_topology(self.plan.topology, app, user).partitions)
        counts.update({t: n for t, n in user.items() if n is not None})
        return counts

    # ------------------------------------------------------------------ stages
    def run_subs(self, subs: list[SubTopology], partitions: dict[str, int]) -> "DataFrame":
        """Run the tasks of ``subs`` (independent of each other) in one Spark stage;
        returns their persisted output rows (:data:`OUTPUT_SCHEMA`)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        frames = []
        specs = {}
        for run, sub in enumerate(subs):
            topics = self.plan.reads[sub.id] if sub.id >= 0 else sub.source_topics
            globals_ = self._global_topics(sub)
            tasks = max([partitions.get(t, 1) for t in topics if t not in globals_] or [1])
            for t in topics:
                rows = self.input_rows(t).withColumn("run", F.lit(run))
                if t in globals_ and tasks > 1:
                    fan = self.spark.range(tasks).select(F.col("id").cast("int").alias("tp"))
                    rows = rows.crossJoin(fan).withColumn("p", F.col("tp")).drop("tp")
                frames.append(rows.select(*[c.split()[0] for c in INPUT_SCHEMA.split(", ")]))
            default = max(partitions.get(t, 1) for t in topics) if topics else 1
            specs[run] = task_spec(self.plan, self.topology, sub, partitions, default)
        out = union_all(frames).groupBy("run", "p").applyInPandas(task_function(specs), OUTPUT_SCHEMA)
        # computed now and cut from its lineage: a later stage's plan then holds a scan of
        # these rows, not the plans of every stage before it (with many sub-topologies,
        # re-analysing those nested unions filled the driver's heap)
        out = out.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)
        self.persisted.append(out)
        return out

    def _global_topics(self, sub: SubTopology) -> set[str]:
        if sub.id < 0:
            return set()
        return {t for g in self.plan.globals_of[sub.id] for t in g[2]}

    def record_topics(self, out: "DataFrame") -> list[str]:
        """Topics ``out`` sent records to (one small Spark job over the persisted rows)."""
        return sorted(r[0] for r in out.filter("kind = 'r'").select("topic").distinct().collect())

    def sent_rows(self, out: "DataFrame", topic: str) -> "DataFrame":
        """Records ``out`` sent to ``topic`` as task input rows of the reading sub-topology."""
        from pyspark.sql import functions as F

        return out.filter((F.col("kind") == "r") & (F.col("topic") == topic)).select(
            "topic", "p", F.lit(None).cast("long").alias("o"), "k", "v", "ts", "ok", "h",
            F.lit(1).alias("rank"), F.lit(0).alias("src"))

    def publish(self, out: "DataFrame", topics: list[str]) -> None:
        for t in topics:
            self.sent.setdefault(t, []).append(self.sent_rows(out, t))

    def run_group(self, subs: tuple[SubTopology, ...], cyclic: bool, partitions: dict[str, int]) -> None:
        """Run a group of sub-topologies; a cyclic one to a fixed point of its feedback
        topics (see the module docstring of :mod:`batch_layer.general.plan`)."""
        if not cyclic:
            out = self.run_subs(list(subs), partitions)
            self.outputs.append(out)
            self.publish(out, self.record_topics(out))
            return
        ids = {s.id for s in subs}
        feedback = sorted(t for t, writers in self.plan.produced.items()
                          if any(w in ids for w in writers) and any(t in self.plan.reads[i] for i in ids))
        outer = {t: list(self.sent.get(t, [])) for t in feedback}
        last: dict[int, "DataFrame"] = {}
        previous: tuple[Any, ...] | None = None
        for _ in range(MAX_ROUNDS):
            for sub in subs:
                out = self.run_subs([sub], partitions)
                last[sub.id] = out
                for t in feedback:  # the freshest records of the group, plus any from outside
                    self.sent[t] = outer[t] + [self.sent_rows(o, t) for o in last.values()]
            signature = tuple(self._signature(t) for t in feedback)
            if signature == previous:
                break
            previous = signature
        else:
            raise BatchCompileError(f"sub-topologies {sorted(ids)} feed each other through {feedback} and did not settle "
                                    f"within {MAX_ROUNDS} rounds")
        for out in last.values():
            self.outputs.append(out)
            self.publish(out, [t for t in self.record_topics(out) if t not in feedback])

    def _signature(self, topic: str) -> tuple[int, int]:
        """``(count, order-independent hash)`` of the records sent to ``topic``."""
        from pyspark.sql import functions as F

        df = union_all(self.sent[topic])
        row = df.agg(F.count(F.lit(1)), F.sum(F.xxhash64("topic", "p", "k", "v", "ts", "ok", "h").cast("decimal(38,0)"))).collect()[0]
        return int(row[0]), int(row[1] or 0)

    # ------------------------------------------------------------------ the run
    def run(self) -> GeneralViews:
        from pyspark.sql import functions as F

        try:
            partitions = self.partition_counts()
            for level in self.plan.levels():
                acyclic = [g.subs[0] for g in level if not g.cyclic]
                if acyclic:
                    self.run_group(tuple(acyclic), False, partitions)
                for group in level:
                    if group.cyclic:
                        self.run_group(group.subs, True, partitions)
            global_subs = [self._global_sub(store, -1 - i) for i, store in enumerate(self.plan.views)
                           if self.plan.topology.stores[store].global_topic]
            if global_subs:
                self.outputs.append(self.run_subs(global_subs, partitions))
            rows = union_all(self.outputs) if self.outputs else self.spark.createDataFrame([], OUTPUT_SCHEMA)
            frames = {s: rows.filter((F.col("kind") == "s") & (F.col("topic") == s)).selectExpr(*_VIEW_COLUMNS)
                      for s in self.plan.views}
            read = {t for ts in self.plan.reads.values() for t in ts}
            topics = {t: self._topic_frame(union_all(frames_of), ["p"]) for t, frames_of in self.sent.items() if t not in read}
            every = [f for t, frames_of in self.sent.items() if t not in read for f in frames_of]
            topic_rows = self._topic_frame(union_all(every), ["topic", "p"], ["topic"]) if every else None
            store_rows = rows.filter(F.col("kind") == "s").selectExpr("topic", *_VIEW_COLUMNS)
            watermark = rows.filter(F.col("kind") == "w").agg(F.max("sts"))
            return GeneralViews(frames, topics, rows.filter(F.col("kind") == "d"), watermark, self.persisted,
                                store_rows, topic_rows)
        except BaseException:
            _release(self.persisted)
            raise

    @staticmethod
    def _topic_frame(sent: "DataFrame", by: list[str], extra: list[str] = ()) -> "DataFrame":
        """Records sent (task output rows) as topic records; ``offset`` numbers each
        ``by`` group (a topic's partition) in order key order."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        order = Window.partitionBy(*by).orderBy("ok")
        return sent.select(*extra, F.col("k").alias("key"), F.col("v").alias("value"), F.col("ts").alias("timestamp"),
                           F.col("p").alias("partition"), (F.row_number().over(order) - 1).cast("long").alias("offset"))

    def _global_sub(self, store: str, sub_id: int) -> SubTopology:
        """A one-task pseudo sub-topology (a negative ``sub_id``) filling global store
        ``store`` from its topic."""
        for n in self.plan.topology.nodes.values():
            if isinstance(n.op, GlobalStoreOp) and n.op.store == store:
                topics = tuple(self.plan.topology.nodes[n.parents[0]].op.topics)
                return SubTopology(sub_id, (n.parents[0], n.name), topics, (), (store,))
        raise BatchLayerError(f"no global store {store!r}")
