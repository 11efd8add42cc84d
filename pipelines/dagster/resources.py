"""Dagster resources: the lake, Spark and Kafka, each a ``ConfigurableResource``, shared by
every pipeline of a ``Definitions``.

* :class:`LakeResource`: the lake ROOT (``path``, else ``$DUET_LAKE``, else ``<repo>/lake``);
  each pipeline's assets use its own folder ``Pipeline.lake(root)`` = ``<root>/<name>``. A
  run's steps that write a pipeline's folder get it through :meth:`LakeResource.writable`,
  which holds that folder's lake lock (:mod:`pipelines.lake.lock`) until the run ends, as
  ``duet run`` and ``duet batch`` do: one writer per lake.
* :class:`SparkResource`: the process-wide SparkSession with Delta (``batch_layer.spark``):
  local (``local[*]``), on a cluster (``master``: ``spark://HOST:PORT``, ``yarn``,
  ``k8s://...``) or through Spark Connect (``remote``); see docs/cluster.md.
* :class:`KafkaResource`: bootstrap servers. Production variant: ``bootstrap_servers`` (or
  ``$KAFKA_BOOTSTRAP_SERVERS``) names a cluster. Local variant: neither is set, and the
  first asset of a run that asks for the servers starts an embedded Apache Kafka broker for
  the rest of the run; each pipeline whose assets ask (:meth:`KafkaResource.bootstrap`) gets
  its sample data (the first ``embedded_limit`` events) loaded into it once, so that the
  assets have something to ingest.
  The embedded broker starts empty every time; its offsets restart at 0, which the
  incremental ingest treats as already archived when the lake holds an earlier load of the
  same data (same ``embedded_limit``): use one lake per limit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Set

import dagster as dg
from pydantic import Field, PrivateAttr

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.declaration.pipeline import Pipeline

__all__ = ["LakeResource", "SparkResource", "KafkaResource", "default_resources", "BOOTSTRAP_ENV"]

#: The environment variable naming a Kafka cluster.
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


class LakeResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The lake root folder; a pipeline's Delta tables (``raw/``, ``views/``, ``serving/``,
    ``quality/``) are under ``<root>/<pipeline name>``.

    Inside a run, :meth:`writable` takes the lake lock of a pipeline's folder at the first
    step that writes it and holds it until the run ends (the lock is released when the
    resource is torn down, a moment after Dagster marks the run succeeded or failed, or by the
    kernel when the run's process dies): a ``duet run`` or ``duet batch`` meanwhile fails at
    once naming the run, and the run's step fails naming a ``duet`` command (or another run)
    that holds it. One lock per run assumes the steps of a run share its process
    (``in_process_executor``, what :func:`pipelines.dagster.definitions` sets); under a
    multiprocess executor each step's process takes it for its step, and two steps writing one
    pipeline's folder at the same time fail one another.
    """

    path: str = Field(default="", description="Lake root, a local folder or s3://bucket/prefix (AWS settings from "
                      "the environment); empty: $DUET_LAKE, else <repo>/lake.")
    _stack: Optional[ExitStack] = PrivateAttr(default=None)
    _holder: str = PrivateAttr(default="")
    _log: Any = PrivateAttr(default=None)
    _locked: Set[Any] = PrivateAttr(default_factory=set)

    def root(self) -> Path | str:
        """The lake root: an absolute path, or ``s3://bucket/prefix`` (checked reachable and
        writable: :func:`pipelines.lake.root.resolve_lake`); not a pipeline's folder: see
        :meth:`pipelines.declaration.pipeline.Pipeline.lake`."""
        from pipelines.lake.root import resolve_lake

        return resolve_lake(self.path or None)

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[LakeResource]:
        """Release the lake locks the run took (:meth:`writable`) when it ends. Outside runs
        (sensors, schedules) nothing is ever locked."""
        run = context.run
        self._log = context.log
        with ExitStack() as stack:
            self._stack = stack if run is not None else None
            self._holder = _run_holder(run) if run is not None else ""
            try:
                yield self
            finally:
                self._stack = None
                self._locked = set()

    def writable(self, p: Pipeline) -> Path | str:
        """``p``'s folder of the lake, for a step that writes it: the first call of a run takes
        the folder's lake lock (its holder: ``dagster run <run id> (job <name>)``, this
        process; without the job for Dagster's implicit asset jobs, as the UI's "Materialize"
        launches), held until the run ends; later calls of the run return the folder.

        Raises:
            dagster.Failure: another writer holds the lock (a ``duet`` command or another
                Dagster run; the description names it, and becomes the step's failure).
            RuntimeError: not inside a run (no run end to release the lock at).
        """
        from pipelines.lake.lock import LakeBusy
        from pipelines.lake.locking import open_lake_lock

        folder = p.lake(self.root())
        if folder in self._locked:
            return folder
        if self._stack is None:
            raise RuntimeError(f"LakeResource.writable({p.name!r}) outside a run: the lake lock of {folder} is held "
                               "for a run; materialize the asset in a run (dg.materialize, a job)")
        try:
            self._stack.enter_context(open_lake_lock(folder, self._holder, warn=self._warn))
        except LakeBusy as exc:
            raise dg.Failure(description=str(exc)) from None
        self._locked.add(folder)
        self._log.info(f"{p.name}: lake lock of {folder} taken until the run ends")
        return folder

    def _warn(self, message: str) -> None:
        """A stale lock taken over: a warning in the run's log."""
        self._log.warning(message)


def _run_holder(run: dg.DagsterRun) -> str:
    """The lake lock's holder for ``run``: ``dagster run <id> (job <name>)``, or ``dagster run
    <id>`` for Dagster's implicit asset jobs (``__ASSET_JOB``, ``__ephemeral_asset_job__``)."""
    if run.job_name.startswith("__"):
        return f"dagster run {run.run_id}"
    return f"dagster run {run.run_id} (job {run.job_name})"


class SparkResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """A SparkSession with Delta Lake (one per process, reused across steps: run Spark jobs
    with ``in_process_executor``), local or on a cluster.

    Empty fields fall back to the environment, then to ``batch_layer.spark``'s defaults
    (master ``local[*]``, driver memory ``1g``, driver host ``127.0.0.1``).
    """

    master: str = Field(
        default="",
        description="spark.master: local, local[N], local[*], spark://HOST:PORT, yarn, k8s://...; "
        "empty: $DUET_SPARK_MASTER, else local[*].",
    )
    remote: str = Field(
        default="",
        description="Spark Connect URL sc://HOST:PORT (instead of master; Delta must be configured on the "
        "server); empty: $SPARK_REMOTE, else none.",
    )
    jars_dir: str = Field(
        default="",
        description="Folder with delta-spark's jars; empty: $DUET_DELTA_JARS, else $DUET_HOME/jars/delta, "
        "else <repo>/.duet/jars/delta.",
    )
    driver_memory: str = Field(default="", description="Driver heap, e.g. 2g; empty: $DUET_SPARK_DRIVER_MEMORY, else 1g.")
    driver_host: str = Field(
        default="",
        description="Address the executors reach the driver at; empty: $DUET_SPARK_DRIVER_HOST, else 127.0.0.1.",
    )
    conf: Dict[str, str] = Field(
        default_factory=dict,
        description="More Spark settings, e.g. spark.executor.memory or spark.hadoop.fs.s3a.endpoint.",
    )

    def session(self) -> SparkSession:
        """The process-wide SparkSession (started on first use, ~8 s locally).

        Raises:
            batch_layer.spark.SparkConfigError: a malformed master or Connect URL, or both set.
            batch_layer.errors.BatchLayerError: Delta's jars are missing.
        """
        from batch_layer.spark import get_spark

        return get_spark(
            "duet",
            master=self.master or None,
            remote=self.remote or None,
            jars_dir=self.jars_dir or None,
            driver_memory=self.driver_memory or None,
            driver_host=self.driver_host or None,
            conf=dict(self.conf) or None,
        )


class KafkaResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Kafka bootstrap servers, or an embedded broker loaded with the pipelines' sample data
    for the run."""

    bootstrap_servers: str = Field(
        default="", description="host:port[,host:port]; empty: $KAFKA_BOOTSTRAP_SERVERS, else an embedded broker."
    )
    embedded_limit: Optional[int] = Field(
        default=2000,
        description="Events of each pipeline's sample loaded into the embedded broker (null: all of them).",
    )
    _servers: Optional[str] = PrivateAttr(default=None)
    _checked: bool = PrivateAttr(default=False)
    _embedded: bool = PrivateAttr(default=False)
    _loaded: Set[str] = PrivateAttr(default_factory=set)
    _stack: Optional[ExitStack] = PrivateAttr(default=None)
    _log: Any = PrivateAttr(default=None)

    def configured_bootstrap(self) -> str | None:
        """The configured cluster (``bootstrap_servers`` or the environment), never starting
        a broker; ``None`` in the local variant."""
        return self.bootstrap_servers or os.environ.get(BOOTSTRAP_ENV, "").strip() or None

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[KafkaResource]:
        """Hold the run's embedded broker, if one gets started (lazily, see :meth:`bootstrap`),
        and stop it when the run ends. Outside runs (sensors, schedules) nothing is started."""
        self._servers = self.configured_bootstrap()
        self._log = context.log
        with ExitStack() as stack:
            self._stack = stack if context.run is not None else None
            try:
                yield self
            finally:
                self._stack = None
                self._servers = None
                self._checked = False
                self._embedded = False
                self._loaded = set()

    def bootstrap(self, pipeline: Pipeline | None = None) -> str:
        """Bootstrap servers for this run.

        Configured variant: the cluster, checked once to answer. Local variant: the first call
        of a run starts an embedded broker; the first call naming ``pipeline`` loads its
        sample data into it (``embedded_limit`` events; nothing when the pipeline declares no
        sample).

        Raises:
            dagster.Failure: the configured cluster does not answer (the run's failure says so).
            RuntimeError: no cluster configured and not inside a run.
        """
        if not (self._servers and self._checked):
            configured = self._servers or self.configured_bootstrap()
            if configured:
                from pipelines.preflight import UserError, check_kafka_reachable

                try:  # a run fails with the reason, not with a consumer timeout deep in a step
                    check_kafka_reachable(configured, hint="start the broker or fix the kafka resource's "
                                          "bootstrap_servers / $KAFKA_BOOTSTRAP_SERVERS")
                except UserError as exc:
                    raise dg.Failure(description=str(exc)) from None
                self._servers, self._checked = configured, True
                return configured
            if self._stack is None:
                raise RuntimeError("no Kafka cluster: set bootstrap_servers or $KAFKA_BOOTSTRAP_SERVERS")
            from speed_layer.admin import EmbeddedKafka

            broker = self._stack.enter_context(EmbeddedKafka())
            if self._log is not None:
                self._log.info(f"embedded Kafka at {broker.bootstrap_servers}")
            self._servers, self._checked, self._embedded = broker.bootstrap_servers, True, True
        assert self._servers is not None
        if self._embedded and pipeline is not None and pipeline.name not in self._loaded:
            self._loaded.add(pipeline.name)
            if pipeline.sample is not None:
                from pipelines.produce.load import load

                counts = load(pipeline, self._servers, limit=self.embedded_limit)
                if self._log is not None:
                    self._log.info(f"{pipeline.name}: sample loaded into the embedded broker: "
                                   + ", ".join(f"{t} {n:,}" for t, n in counts.items()))
        return self._servers


def default_resources() -> dict[str, Any]:
    """``lake``, ``spark`` and ``kafka``, configured from the environment."""
    return {
        "lake": LakeResource(),
        "spark": SparkResource(),
        "kafka": KafkaResource(),
    }
