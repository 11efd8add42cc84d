"""``StreamsConfig``: Kafka Streams' configuration keys, validated at start-up.

Keys are Kafka's dotted names (``application.id``, ``commit.interval.ms``...). Unknown
``streams`` keys fail with the list of known ones; keys starting with ``consumer.``,
``producer.`` or ``admin.`` are passed to those clients. Durations are ms.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator

from .errors import ConfigException
from .serde import Serde, Serdes

#: Kafka's internal config keys (``StreamsConfig.InternalConfig``), spelled exactly as Kafka.
EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX = "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__"
EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION = "__emit.interval.ms.kstreams.windowed.aggregation__"
#: Kafka's default of both emit intervals (``InternalConfig.getLong(..., 1000L)``).
DEFAULT_EMIT_INTERVAL_MS = 1000

ProcessingGuarantee = Literal["at_least_once", "exactly_once_v2"]
ExceptionHandler = Literal["log_and_fail", "log_and_continue", "dead_letter"]

#: Kafka's built-in timestamp extractor classes -> duet's ``default.timestamp.extractor`` values
_KAFKA_EXTRACTORS = {
    "FailOnInvalidTimestamp": "fail_on_invalid",
    "LogAndSkipOnInvalidTimestamp": "log_and_skip_on_invalid",
    "UsePartitionTimeOnInvalidTimestamp": "use_partition_time_on_invalid",
    "WallclockTimestampExtractor": "wall_clock",
}


class StreamsConfig(BaseModel):
    """Validated configuration of a streams application (Kafka's ``StreamsConfig``)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid", arbitrary_types_allowed=True)

    application_id: str = Field("duet-test", alias="application.id", min_length=1)
    bootstrap_servers: str = Field("", alias="bootstrap.servers")
    num_stream_threads: int = Field(1, alias="num.stream.threads", ge=1)
    #: Kafka's ``num.standby.replicas``: warm copies of each task's persistent stores kept
    #: on other instances from the changelogs (``speed_layer.runtime.standby``)
    num_standby_replicas: int = Field(0, alias="num.standby.replicas", ge=0)
    processing_guarantee: ProcessingGuarantee = Field("at_least_once", alias="processing.guarantee")
    commit_interval_ms: int = Field(30_000, alias="commit.interval.ms", ge=0)
    state_dir: Path | None = Field(None, alias="state.dir")
    statestore_cache_max_entries: int = Field(10_000, alias="statestore.cache.max.entries", ge=0)
    default_key_serde: Serde[Any] = Field(default_factory=Serdes.String, alias="default.key.serde")
    default_value_serde: Serde[Any] = Field(default_factory=Serdes.JSON, alias="default.value.serde")
    #: Kafka's built-in extractors (``speed_layer.processor.timestamps``); Kafka's class
    #: names (``FailOnInvalidTimestamp``, with or without the package) are accepted too
    default_timestamp_extractor: Literal[
        "record", "fail_on_invalid", "log_and_skip_on_invalid", "use_partition_time_on_invalid", "wall_clock"
    ] = Field("fail_on_invalid", alias="default.timestamp.extractor")
    #: also handles a timestamp extractor's exception (other than a StreamsException, fatal
    #: as in Kafka): duet's extension, Kafka's ``RecordQueue`` fails on any of them
    deserialization_exception_handler: ExceptionHandler = Field("log_and_fail", alias="deserialization.exception.handler")
    processing_exception_handler: ExceptionHandler = Field("log_and_fail", alias="processing.exception.handler")
    #: Kafka's ``production.exception.handler`` for a record a sink or repartition topic's
    #: serializer rejects (KIP-399, origin KEY or VALUE); ``log_and_fail`` is Kafka's
    #: ``DefaultProductionExceptionHandler`` (FAIL), ``log_and_continue`` its CONTINUE
    production_exception_handler: ExceptionHandler = Field("log_and_fail", alias="production.exception.handler")
    dead_letter_queue_topic: str | None = Field(None, alias="errors.dead.letter.queue.topic.name")
    auto_offset_reset: Literal["earliest", "latest"] = Field("earliest", alias="auto.offset.reset")
    max_task_idle_ms: int = Field(0, alias="max.task.idle.ms", ge=-1)
    buffered_records_per_partition: int = Field(1000, alias="buffered.records.per.partition", ge=1)
    #: Kafka's ``replication.factor`` of the internal topics (repartition, changelog):
    #: -1 (Kafka's default since 3.0, KIP-733) takes the broker's
    #: ``default.replication.factor``; otherwise at least 1
    replication_factor: int = Field(-1, alias="replication.factor", ge=-1)
    session_timeout_ms: int = Field(10_000, alias="session.timeout.ms", ge=1)
    poll_ms: int = Field(100, alias="poll.ms", ge=0)
    #: Kafka's ``task.timeout.ms`` (KIP-572): the longest a task may stall on retriable
    #: broker errors (metadata of an output topic during a broker restart...) before
    #: :class:`~speed_layer.errors.TaskTimeoutException` is raised; 0: at the first error
    task_timeout_ms: int = Field(300_000, alias="task.timeout.ms", ge=0)
    #: Kafka's ``default.api.timeout.ms`` (KIP-266), ms: the longest an at-least-once offset
    #: commit (Kafka's ``commitSync``) may stay unanswered before it is reported (a warning)
    #: and its offsets deferred to the next commit (``TaskManager#commit``); closing waits
    #: at most this long for it (``speed_layer.runtime.offset_commits``)
    default_api_timeout_ms: int = Field(60_000, alias="default.api.timeout.ms", ge=0)
    #: Kafka's ``retry.backoff.ms``: the wait between two retries of a failed broker call
    #: (also passed to the producer and the consumers, whose librdkafka key is the same)
    retry_backoff_ms: int = Field(100, alias="retry.backoff.ms", ge=0)
    #: Kafka's producer ``max.block.ms``: the longest one metadata request of the runtime
    #: blocks (librdkafka's ``produce`` does not block: no client key to pass it to)
    max_block_ms: int = Field(60_000, alias="max.block.ms", ge=0)
    #: Kafka's ``request.timeout.ms``: passed to the producer (librdkafka's producer key
    #: of the same name, its ack timeout) when set; None: the client's default (30000, as Kafka)
    request_timeout_ms: int | None = Field(None, alias="request.timeout.ms", ge=1, le=900_000)
    #: Kafka's ``application.server``: ``host:port`` of this instance's interactive-query
    #: endpoint, published to the other instances (``KafkaStreams.streams_metadata()``,
    #: ``query_metadata_for_key``). Empty: this instance is not discoverable.
    application_server: str = Field("", alias="application.server", pattern=r"^(|[A-Za-z0-9._-]+:[0-9]{1,5})$")
    #: Kafka's ``StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX``:
    #: the least wall-clock time (ms) between two scans of a stream-stream left/outer
    #: join's outer store for closed unmatched records. None (unset) means Kafka's default,
    #: 1000 ms; ``TopologyTestDriver`` sets 0 unless given, as Kafka's driver does.
    emit_interval_ms_kstreams_outer_join_spurious_results_fix: int | None = Field(
        None, alias=EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, ge=0
    )
    #: Kafka's ``StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION``:
    #: the least wall-clock time (ms) between two emissions of closed windows by a windowed
    #: aggregation with ``EmitStrategy.on_window_close()`` (KIP-825). None (unset) means
    #: Kafka's default, 1000 ms; ``TopologyTestDriver`` sets 0 unless given.
    emit_interval_ms_kstreams_windowed_aggregation: int | None = Field(
        None, alias=EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION, ge=0
    )
    #: duet's own key (Kafka's launch scripts tune the JVM's collector instead): CPython's
    #: ``gc.set_threshold`` while the client runs (``speed_layer.runtime.gc_tuning``);
    #: three positive ints, as a tuple, list or ``"10000,10,100"``; None or ``"none"``
    #: leaves the interpreter's thresholds alone
    python_gc_thresholds: tuple[PositiveInt, PositiveInt, PositiveInt] | None = Field(
        (10_000, 10, 100), alias="python.gc.thresholds"
    )
    #: duet's own key: the ids of the sub-topologies (``Topology.describe()``) whose tasks
    #: this instance runs; None (the default) runs all. An instance subscribes only to
    #: those sub-topologies' lead topics, so the group gives it only their tasks (and the
    #: others to instances that run them). Used to place whole stages of a pipeline on
    #: different processes (``pipelines.speed.instances``); as an int list or ``"0,3"``.
    #: A sub-topology only one instance runs has no failover: while that instance is down,
    #: no other takes its tasks (name it on two instances to have one)
    instance_subtopologies: tuple[int, ...] | None = Field(None, alias="instance.subtopologies")
    #: duet's own key: the application's inputs are complete when it starts (a backlog, as
    #: ``duet run`` loads), so each partition's end becomes known: a user topic's at the
    #: start, a topic the application writes once its writers have committed their whole
    #: input (:mod:`speed_layer.runtime.backlog_ends`). With ``max.task.idle.ms`` > 0 and
    #: at-least-once, an empty partition at its end then holds its task until its end is
    #: known instead of on the clock (:mod:`speed_layer.runtime.readiness`); and, at
    #: at-least-once whatever ``max.task.idle.ms``, a task waits while a repartition
    #: partition it reads has no next record yet and the thread's upstream tasks still have
    #: input (:mod:`speed_layer.runtime.upstream`: one instance replays a backlog in one
    #: order); ignored under exactly_once_v2. Never set it on live input: a partition whose
    #: writer never finishes holds its task for good
    backlog_inputs_complete: bool = Field(False, alias="backlog.inputs.complete")
    #: duet's own key: run each chain of built-in stateless processors (filter, map,
    #: map_values, flat_map, flat_map_values, peek, merge, to_stream, a source) as one
    #: generated function instead of one Python frame per node
    #: (:mod:`speed_layer.processor.fused_chains`, which lists what it preserves: the same
    #: calls, records, headers, handlers, dead letters and metrics); False runs each
    #: processor's own ``process``
    fuse_stateless_chains: bool = Field(True, alias="fuse.stateless.chains")
    client_overrides: dict[str, Any] = Field(default_factory=dict)

    @field_validator("default_timestamp_extractor", mode="before")
    @classmethod
    def _kafka_extractor_names(cls, v: Any) -> Any:
        if isinstance(v, str):
            return _KAFKA_EXTRACTORS.get(v.rsplit(".", 1)[-1], v)
        return v

    @field_validator("replication_factor")
    @classmethod
    def _replication_factor(cls, v: int) -> int:
        if v == 0:
            raise ValueError("must be -1 (the broker's default.replication.factor) or at least 1")
        return v

    @field_validator("python_gc_thresholds", mode="before")
    @classmethod
    def _parse_thresholds(cls, v: Any) -> Any:
        if isinstance(v, str):
            return None if v.strip().lower() in ("", "none") else [x.strip() for x in v.split(",")]
        return v

    @field_validator("instance_subtopologies", mode="before")
    @classmethod
    def _parse_subtopologies(cls, v: Any) -> Any:
        if isinstance(v, str):
            return None if v.strip().lower() in ("", "none", "all") else [x.strip() for x in v.split(",")]
        return v

    @field_validator("instance_subtopologies")
    @classmethod
    def _some_subtopologies(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None and not v:
            raise ValueError("must name at least one sub-topology id (or be None: all)")
        return v

    @classmethod
    def of(cls, config: "StreamsConfig | dict[str, Any] | None") -> "StreamsConfig":
        """Validate a dict of Kafka-style keys (or pass a StreamsConfig through).

        Raises:
            ConfigException: naming the key, the value given and the allowed values.
        """
        if config is None:
            return cls()
        if isinstance(config, StreamsConfig):
            return config
        own: dict[str, Any] = {}
        clients: dict[str, Any] = {}
        for k, v in config.items():
            if k.startswith(("consumer.", "producer.", "admin.")):
                clients[k] = v
            else:
                own[k] = v
        known = {f.alias or n for n, f in cls.model_fields.items() if n != "client_overrides"}
        unknown = sorted(set(own) - known - set(cls.model_fields))
        if unknown:
            raise ConfigException(f"unknown config key(s) {unknown}; known keys: {sorted(known)}")
        try:
            return cls.model_validate({**own, "client_overrides": clients})
        except ValidationError as exc:
            msgs = []
            for err in exc.errors():
                key = ".".join(str(x) for x in err["loc"])
                msgs.append(f"{key}={err.get('input')!r}: {err['msg']}")
            raise ConfigException("invalid streams config: " + "; ".join(msgs)) from None

    def with_test_driver_defaults(self) -> "StreamsConfig":
        """This config with both emit throttles set to 0 unless given, as Kafka's
        ``TopologyTestDriver`` does (``configCopy.putIfAbsent(EMIT_INTERVAL_..., 0L)``)."""
        update = {
            name: 0
            for name in ("emit_interval_ms_kstreams_outer_join_spurious_results_fix", "emit_interval_ms_kstreams_windowed_aggregation")
            if getattr(self, name) is None
        }
        return self.model_copy(update=update) if update else self

    @property
    def outer_join_emit_interval_ms(self) -> int:
        """The stream-stream outer join emit throttle in effect (Kafka's default 1000 ms)."""
        v = self.emit_interval_ms_kstreams_outer_join_spurious_results_fix
        return DEFAULT_EMIT_INTERVAL_MS if v is None else v

    @property
    def windowed_aggregation_emit_interval_ms(self) -> int:
        """The ON_WINDOW_CLOSE windowed aggregation emit throttle in effect (Kafka's default
        1000 ms)."""
        v = self.emit_interval_ms_kstreams_windowed_aggregation
        return DEFAULT_EMIT_INTERVAL_MS if v is None else v

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == "exactly_once_v2"
