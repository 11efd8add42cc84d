"""KafkaStreams: runs a Topology on a Kafka cluster (Kafka's ``KafkaStreams``).

``KafkaStreams(topology, config)`` validates the config at construction; ``start()``
creates the internal topics (:mod:`.internal_topics`), bootstraps the global stores
(:mod:`.global_state`), then starts ``num.stream.threads`` :class:`StreamThread` s sharing
the tasks of the application with every other instance of the same ``application.id``
(the consumer group). ``close()`` stops them gracefully (commit, checkpoint, close
stores). ``store(name)`` gives read-only interactive queries over the local tasks' stores;
``wait_until_caught_up`` tells when all input present at the call has been processed.

Guarantees (``processing.guarantee``): ``at_least_once`` (default) flushes the producer
before committing offsets, so a failure repeats records but loses none;
``exactly_once_v2`` (KIP-447) writes outputs, changelogs and offsets in one transaction
per thread and commit interval (``commit.interval.ms`` then defaults to 100 ms, as in
Kafka): readers of the outputs must use ``isolation.level=read_committed``.

States (Kafka's ``KafkaStreams.State``): CREATED -> REBALANCING <-> RUNNING ->
PENDING_SHUTDOWN -> NOT_RUNNING, and PENDING_ERROR -> ERROR after a thread failed and the
uncaught exception handler chose to shut down.

Example::

    streams = KafkaStreams(topology, {"application.id": "app", "bootstrap.servers": bootstrap})
    streams.start()
    streams.wait_until_caught_up(60)
    print(streams.store("counts").get("alice"))
    streams.close()
"""
from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Callable

from confluent_kafka import KafkaException

from ..config import StreamsConfig
from ..errors import ConfigException, InvalidStateStoreException, StreamsException, TaskTimeoutException, TopologyException
from ..graph.ops import SinkOp
from ..state.query import ReadOnlyKeyValueView, ReadOnlySessionView, ReadOnlyVersionedView, ReadOnlyWindowView, store_view
from ..topology import Topology
from . import gc_tuning
from .admin import TopicError, admin_client, client_config, ensure_topics, max_message_bytes
from .catch_up import CatchUpWaiter
from .global_state import GlobalStateUpdater
from .internal_topics import TopologyPlan, plan_topology, reset_application
from .metadata import (SERVER_SEPARATOR, KeyQueryMetadata, StreamsMetadata, describe_members, group_streams_metadata,
                       key_query_metadata, standby_hosts_of)
from .record_collector import KafkaRecordCollector, PartitionCounts
from .restore import StateDirectory
from .standby import StandbyUpdater
from .task_timeout import ListOffsets, TaskTimeout, retry_broker_call
from .stream_thread import StreamThread, ThreadContext, ThreadHooks

log = logging.getLogger("speed_layer.streams")

__all__ = [
    "KafkaStreams", "reset_application", "EXCEPTION_HANDLER_RESPONSES", "ReadOnlyKeyValueView", "ReadOnlyWindowView",
    "ReadOnlySessionView", "ReadOnlyVersionedView",
]

#: the window of the windowed thread metrics (``commit-latency-avg``/``-max``), s: Kafka's
#: defaults, ``metrics.num.samples`` (2) x ``metrics.sample.window.ms`` (30 s)
METRICS_WINDOW_S = 60.0
#: what an uncaught exception handler may answer (Kafka's StreamThreadExceptionResponse)
EXCEPTION_HANDLER_RESPONSES = ("REPLACE_THREAD", "SHUTDOWN_CLIENT", "SHUTDOWN_APPLICATION")
_TRANSITIONS = {
    "CREATED": {"REBALANCING", "PENDING_SHUTDOWN", "PENDING_ERROR"},
    "REBALANCING": {"RUNNING", "PENDING_SHUTDOWN", "PENDING_ERROR"},
    "RUNNING": {"REBALANCING", "PENDING_SHUTDOWN", "PENDING_ERROR"},
    "PENDING_SHUTDOWN": {"NOT_RUNNING"},
    "NOT_RUNNING": set(),
    "PENDING_ERROR": {"ERROR"},
    "ERROR": set(),
}


class KafkaStreams:
    """A streams client: see the module docstring.

    Args:
        topology: what to run (from ``StreamsBuilder.build()`` or the Processor API).
        config: Kafka-style keys (see :class:`speed_layer.StreamsConfig`);
            ``bootstrap.servers`` is required. ``consumer.*``/``producer.*``/``admin.*``
            keys go to those clients (prefix stripped).

    Raises:
        ConfigException: naming the key and the allowed values, at construction.
        TopologyException: if the topology has no source.
    """

    def __init__(self, topology: Topology, config: StreamsConfig | dict[str, Any]) -> None:
        self.config = StreamsConfig.of(config)
        cfg = self.config
        if not cfg.bootstrap_servers.strip():
            raise ConfigException("bootstrap.servers must be set: host:port[,host:port...] of the Kafka cluster")
        for key, handler in (("deserialization.exception.handler", cfg.deserialization_exception_handler),
                             ("processing.exception.handler", cfg.processing_exception_handler),
                             ("production.exception.handler", cfg.production_exception_handler)):
            if handler == "dead_letter" and not cfg.dead_letter_queue_topic:
                raise ConfigException(f"{key}=dead_letter requires errors.dead.letter.queue.topic.name (the dead-letter topic)")
        if not topology.source_topics():
            raise TopologyException("Topology has no stream threads and no global threads: add a source first")
        if cfg.instance_subtopologies is not None:
            task_subs = sorted(sub.id for sub in topology.task_subtopologies())
            unknown = sorted(set(cfg.instance_subtopologies) - set(task_subs))
            if unknown:
                raise ConfigException(f"instance.subtopologies={list(cfg.instance_subtopologies)}: no sub-topology {unknown} "
                                      f"with tasks in this topology; allowed ids: {task_subs}")
        self.topology = topology
        #: Kafka: commit.interval.ms defaults to 100 ms under exactly-once, 30000 ms otherwise
        self.commit_interval_ms = cfg.commit_interval_ms if ("commit_interval_ms" in cfg.model_fields_set or not cfg.exactly_once) else 100
        self.state_directory = StateDirectory(cfg.state_dir, cfg.application_id)
        self._paused = threading.Event()
        self.process_id = ""
        self.plan: TopologyPlan | None = None  # type: ignore[assignment]
        self.partition_counts = PartitionCounts(cfg.bootstrap_servers, task_timeout_ms=cfg.task_timeout_ms,
                                                retry_backoff_ms=cfg.retry_backoff_ms, max_block_ms=cfg.max_block_ms)
        self.global_stores: dict[str, Any] = {}
        self._global: GlobalStateUpdater | None = None
        self._standby: StandbyUpdater | None = None
        self._threads: list[StreamThread] = []
        self._dead_metrics: list[Any] = []
        self._state = "CREATED"
        #: whether this client raised the collector's thresholds (``python.gc.thresholds``)
        self._gc_tuned = False
        self._lock = threading.RLock()
        self._handler: Callable[[BaseException], str] | None = None
        self._state_listener: Callable[[str, str], None] | None = None
        self.errors: list[BaseException] = []
        self._started_at = 0.0
        self._commit_total_dead = 0
        self._poll_total_dead = 0
        self._admin: Any = None
        self._end_offsets: ListOffsets | None = None  # records_lag's

    # ------------------------------------------------------------------ client configs
    def client_overrides(self, prefix: str) -> dict[str, Any]:
        """``<prefix>key`` entries of the config with the prefix stripped."""
        return {k[len(prefix):]: v for k, v in self.config.client_overrides.items() if k.startswith(prefix)}

    def _logger(self) -> logging.Logger:
        return logging.getLogger("speed_layer.kafka")

    def _retry_backoff(self) -> dict[str, Any]:
        """``retry.backoff.ms`` for librdkafka (its range starts at 1; a backoff above its
        ``retry.backoff.max.ms``, 1000, raises that bound too: the backoff stays static)."""
        ms = max(1, self.config.retry_backoff_ms)
        return {"retry.backoff.ms": ms, **({"retry.backoff.max.ms": ms} if ms > 1000 else {})}

    def consumer_config(self, client_id: str) -> dict[str, Any]:
        cfg = self.config
        if cfg.application_server:  # published to the other instances (see .metadata)
            client_id = f"{client_id}{SERVER_SEPARATOR}{cfg.application_server}"
        return {
            "bootstrap.servers": cfg.bootstrap_servers,
            "client.id": client_id,
            "session.timeout.ms": cfg.session_timeout_ms,
            "heartbeat.interval.ms": max(100, min(3000, cfg.session_timeout_ms // 3)),
            "isolation.level": "read_committed" if cfg.exactly_once else "read_uncommitted",
            # an empty fetch answers after this long: it bounds how soon a caught-up
            # partition is known to be caught up (end-of-partition), on which tasks wait
            "fetch.wait.max.ms": 20,
            # librdkafka postpones the next fetch of a partition by this long (default 1 s)
            # after its local queue was over its thresholds, e.g. when the partition was
            # paused (buffered.records.per.partition reached) and resumed: the stream thread
            # then waited in poll for that partition's next records most of the time (the
            # Java consumer fetches a resumed partition at once)
            "fetch.queue.backoff.ms": 10,
            "auto.offset.reset": cfg.auto_offset_reset,
            **self._retry_backoff(),
            "logger": self._logger(),
        }

    def producer_config(self, client_id: str) -> dict[str, Any]:
        cfg = self.config
        conf: dict[str, Any] = {
            "bootstrap.servers": cfg.bootstrap_servers,
            "client.id": client_id,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **self._retry_backoff(),
            "logger": self._logger(),
        }
        if cfg.request_timeout_ms is not None:
            conf["request.timeout.ms"] = cfg.request_timeout_ms
        if cfg.exactly_once:
            conf["transaction.timeout.ms"] = 10_000  # Kafka Streams' default under EOS
        conf.update(self.client_overrides("producer."))
        return conf

    def _new_collector(self) -> KafkaRecordCollector:
        from confluent_kafka import Producer

        return KafkaRecordCollector(Producer(self.producer_config(f"{self.config.application_id}-{self.process_id}-global-producer")),
                                    self.partition_counts, dead_letter_topic=self.config.dead_letter_queue_topic)

    # ------------------------------------------------------------------ pause (KIP-834)
    def pause(self) -> None:
        """Pause processing, as Kafka Streams' ``KafkaStreams#pause`` (KIP-834, 3.3): the
        stream threads skip processing and punctuation and the standby tasks are not
        updated, but the consumers keep polling (their buffers fill, then their partitions
        are paused) and committing, so the instance stays in its group. May be called before
        :meth:`start` (it then joins its group without processing). Transient: not kept
        across restarts nor shared with other instances; the state stays RUNNING."""
        self._paused.set()

    def resume(self) -> None:
        """Resume processing after :meth:`pause` (``KafkaStreams#resume``)."""
        self._paused.clear()

    def is_paused(self) -> bool:
        """Whether :meth:`pause` was called and :meth:`resume` not since
        (``KafkaStreams#isPaused``)."""
        return self._paused.is_set()

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        """One of CREATED, REBALANCING, RUNNING, PENDING_SHUTDOWN, NOT_RUNNING,
        PENDING_ERROR, ERROR."""
        return self._state

    def _set_state(self, new: str) -> bool:
        with self._lock:
            old = self._state
            if new == old or new not in _TRANSITIONS[old]:
                return False
            self._state = new
        log.info("stream-client %s: state %s -> %s", self.config.application_id, old, new)
        if self._state_listener is not None and new != old:
            try:
                self._state_listener(new, old)
            except Exception:  # noqa: BLE001 - a listener must not break the client
                log.exception("state listener failed")
        return True

    def set_state_listener(self, listener: Callable[[str, str], None]) -> None:
        """``listener(new_state, old_state)`` on every state change (Kafka's StateListener).

        Raises:
            StreamsException: if the client was already started.
        """
        if self._state != "CREATED":
            raise StreamsException("set_state_listener must be called before start()")
        self._state_listener = listener

    def set_uncaught_exception_handler(self, handler: Callable[[BaseException], str]) -> None:
        """``handler(exc)`` runs when a stream thread dies and answers one of
        ``REPLACE_THREAD`` (start a new thread in its place), ``SHUTDOWN_CLIENT`` (stop this
        instance: state ERROR) or ``SHUTDOWN_APPLICATION`` (Kafka also stops every other
        instance through the group; here only this instance stops). Without a handler:
        SHUTDOWN_CLIENT, the error kept in :attr:`errors` (Kafka's default).

        Raises:
            StreamsException: if the client was already started.
        """
        if self._state != "CREATED":
            raise StreamsException("set_uncaught_exception_handler must be called before start()")
        self._handler = handler

    def _thread_context(self) -> ThreadContext:
        return ThreadContext(self.config, self.plan, self.topology, self.process_id, self.state_directory, self.global_stores,
                             self.partition_counts, self.commit_interval_ms, self.consumer_config, self.producer_config,
                             self.client_overrides, self._paused)

    def _thread_hooks(self) -> ThreadHooks:
        return ThreadHooks(self._on_thread_state_change, self._on_thread_error, self._standby_claim,
                           self._standby_release, self._standby_refresh)

    def _on_thread_state_change(self, thread: StreamThread) -> None:
        with self._lock:
            if self._state not in ("REBALANCING", "RUNNING"):
                return
            alive = [t for t in self._threads if t.thread_state != "DEAD"]
            running = bool(alive) and all(t.thread_state == "RUNNING" for t in alive)
        self._set_state("RUNNING" if running else "REBALANCING")

    def _on_thread_error(self, thread: StreamThread | None, exc: BaseException) -> None:
        self.errors.append(exc)
        if thread is not None:
            self._dead_metrics.append(thread.metrics)
            self._commit_total_dead += thread.commit_total
            self._poll_total_dead += thread.poll_total
        if self._state in ("PENDING_SHUTDOWN", "NOT_RUNNING", "PENDING_ERROR", "ERROR"):
            return
        action = "SHUTDOWN_CLIENT"
        if self._handler is not None:
            try:
                answer = self._handler(exc)
                action = str(getattr(answer, "name", answer)).upper().rsplit(".", 1)[-1]
            except Exception:  # noqa: BLE001 - a failing handler means shut down
                log.exception("uncaught exception handler failed: shutting down the client")
            if action not in EXCEPTION_HANDLER_RESPONSES:
                log.error("uncaught exception handler answered %r, not one of %s: shutting down the client", action, EXCEPTION_HANDLER_RESPONSES)
                action = "SHUTDOWN_CLIENT"
        if action == "REPLACE_THREAD" and thread is not None:
            with self._lock:
                if self._state in ("REBALANCING", "RUNNING"):
                    new = StreamThread(self._thread_context(), thread.index, self._thread_hooks())
                    self._threads = [new if t is thread else t for t in self._threads]
                    new.start()
                    log.warning("replaced stream thread %s after %r", thread.name, exc)
                    return
        if action == "SHUTDOWN_APPLICATION":
            log.error("SHUTDOWN_APPLICATION: stopping this instance (other instances are not notified)")
        if self._set_state("PENDING_ERROR"):
            threading.Thread(target=self._shutdown, args=(60.0, "ERROR"), name=f"{self.config.application_id}-shutdown", daemon=True).start()

    # ------------------------------------------------------------------ start / close
    def start(self) -> None:
        """Create internal topics, bootstrap global stores and start the stream threads.

        The broker calls of the start (the metadata of the topology's topics, creating the
        internal topics, the global stores' partitions and end offsets) follow Kafka's
        timeout model (:mod:`.task_timeout`): retriable errors are retried every
        ``retry.backoff.ms`` until ``task.timeout.ms``.

        Raises:
            TaskTimeoutException: a broker call of the start kept failing with retriable
                errors (e.g. the brokers unreachable) for ``task.timeout.ms``; the message
                names the call.
            StreamsException: if already started, a topic cannot be created, a broker call
                fails with a non-retriable error, or the state directory is used by another
                instance.
            TopologyException: missing source topics or co-partitioned topics with
                different partition counts (Kafka's CopartitionedTopicsEnforcer).
        """
        with self._lock:
            if self._state != "CREATED":
                raise StreamsException(f"KafkaStreams can only be started once (state {self._state})")
            self._set_state("REBALANCING")
        try:
            self._start()
        except BaseException:
            self._set_state("PENDING_ERROR")
            self._shutdown(30.0, "ERROR")
            raise

    def _start(self) -> None:
        cfg = self.config
        self.state_directory.lock()
        self._gc_tuned = gc_tuning.acquire(cfg.python_gc_thresholds)
        self.process_id = self.state_directory.process_id()
        self._started_at = time.monotonic()
        timeouts = TaskTimeout.of(cfg)
        admin = admin_client(cfg.bootstrap_servers, self.client_overrides("admin."))
        md = retry_broker_call("metadata of the topology's topics (KafkaStreams.start)",
                               lambda request_s: admin.list_topics(timeout=request_s), timeouts, hint="check the brokers")

        def count(t: str) -> int | None:
            meta = md.topics.get(t)
            return len(meta.partitions) if meta is not None and meta.error is None and meta.partitions else None

        internal = set(self.topology.internal_topics)
        user_sources = {t for sub in self.topology.subtopologies() for t in sub.source_topics if t not in internal}
        self.plan = plan_topology(self.topology, cfg.application_id, {t: count(t) for t in user_sources})
        missing_globals = sorted(s.global_topic for s in self.topology.global_stores().values() if s.global_topic and count(s.global_topic) is None)
        if missing_globals:
            raise TopologyException(f"Missing global source topic(s) {missing_globals}: create them before starting the application")
        sinks = {n.op.topic for n in self.topology.nodes.values() if isinstance(n.op, SinkOp) and n.op.topic and not n.op.repartition}
        if cfg.dead_letter_queue_topic:
            sinks.add(cfg.dead_letter_queue_topic)
        missing_sinks = sorted(t for t in sinks if count(t) is None)
        if missing_sinks:
            raise StreamsException(f"Output topic(s) {missing_sinks} do not exist: create them before starting the application (Kafka Streams does not create them)")
        # the sinks' partition counts now, as Kafka fetches the sink topics' metadata before
        # processing: the first send after a broker restart needs no metadata request
        # (topics named by a topic extractor are looked up on their first send)
        for t in sinks:
            self.partition_counts.set(t, count(t))  # type: ignore[arg-type]
        try:
            ensure_topics(cfg.bootstrap_servers, self.plan.topic_specs(cfg.replication_factor), timeouts=timeouts)
        except TopicError as exc:
            raise StreamsException(f"cannot create the internal topics: {exc}") from exc
        for t, n in self.plan.partitions.items():
            self.partition_counts.set(t, n)
        for spec in self.plan.changelogs.values():
            self.partition_counts.set(spec.name, spec.partitions)
        self._seed_message_limits(admin, sinks | set(self.plan.repartition) | {s.name for s in self.plan.changelogs.values()},
                                  timeouts)
        if self.topology.global_stores():
            gconf = self.consumer_config(f"{cfg.application_id}-{self.process_id}-global-consumer")
            gconf.update(self.client_overrides("consumer."))
            self._global = GlobalStateUpdater(self.topology, cfg, self.state_directory, gconf, self._new_collector,
                                              lambda exc: self._on_thread_error(None, exc))
            self.global_stores = self._global.stores
            self._global.bootstrap()
            self._global.start()
        if cfg.num_standby_replicas > 0:
            sconf = self.consumer_config(f"{cfg.application_id}-{self.process_id}-standby-consumer")
            sconf.update(self.client_overrides("consumer."))
            self._standby = StandbyUpdater(self, sconf, lambda exc: self._on_thread_error(None, exc), self._admin_client, self._reset_admin)
        with self._lock:
            self._threads = [StreamThread(self._thread_context(), i + 1, self._thread_hooks()) for i in range(cfg.num_stream_threads)]
            for t in self._threads:
                t.start()
        if self._standby is not None:
            self._standby.start()

    def _seed_message_limits(self, admin: Any, topics: set[str], timeouts: TaskTimeout) -> None:
        """Look up the ``max.message.bytes`` of the topics the stream threads write to (the
        topology's sinks, the dead-letter topic, the internal topics): the record collectors
        fail a record larger than that before producing it, so that it fails alone (the
        broker rejects a whole batch and librdkafka, unlike Kafka's producer, does not
        split it). Skipped when the producer compresses (the broker checks the compressed
        batch) or the brokers refuse ``DescribeConfigs`` (the broker's check remains).

        Raises:
            TaskTimeoutException: the brokers did not answer within ``task.timeout.ms``.
        """
        producer = self.client_overrides("producer.")
        if str(producer.get("compression.type", producer.get("compression.codec", "none"))).lower() != "none":
            return
        try:
            limits = retry_broker_call("max.message.bytes of the output topics (KafkaStreams.start)",
                                       lambda request_s: max_message_bytes(admin, topics, request_s), timeouts)
        except TaskTimeoutException:
            raise
        except StreamsException as exc:
            log.warning("%s: a record too large for its topic fails at the broker, with the records batched with it", exc)
            return
        self.partition_counts.set_max_message_bytes(limits)

    def close(self, timeout_s: float | None = None) -> bool:
        """Stop gracefully: each thread commits, writes checkpoints and closes its stores;
        then the global stores. Returns False if threads did not stop within ``timeout_s``
        seconds (None: wait without limit).

        A thread never waits forever on the brokers here: under at-least-once it waits for
        an offset commit still in flight, then for its consumer's ``close()``, each at most
        ``default.api.timeout.ms`` (ms) + 1 s, and goes on without them (WARNING naming the
        thread and the partitions; the next owner of a partition reprocesses from its last
        committed offset), as Kafka's ``commitSync`` is bounded by that key
        (``speed_layer.runtime.offset_commits``)."""
        with self._lock:
            if self._state in ("NOT_RUNNING", "ERROR"):
                return True
            if self._state in ("PENDING_SHUTDOWN", "PENDING_ERROR"):
                pending = True
            else:
                pending = False
                self._set_state("PENDING_SHUTDOWN")
        if pending:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while self._state not in ("NOT_RUNNING", "ERROR"):
                if deadline is not None and time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
            return True
        return self._shutdown(timeout_s, "NOT_RUNNING")

    def _shutdown(self, timeout_s: float | None, final: str) -> bool:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.request_shutdown()
        ok = True
        for t in threads:
            if t is threading.current_thread() or not t.is_alive():
                continue
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            ok = ok and not t.is_alive()
        if self._standby is not None:
            self._standby.shutdown(30.0 if deadline is None else max(0.1, deadline - time.monotonic()))
        if self._global is not None:
            try:
                self._global.shutdown(30.0 if deadline is None else max(0.1, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - closing anyway
                log.exception("closing the global state failed")
        self.state_directory.unlock()
        if self._gc_tuned:
            self._gc_tuned = False
            gc_tuning.release()
        self._set_state(final)
        return ok

    def cleanup(self) -> None:
        """Delete this application's local state directory (Kafka's ``KafkaStreams#cleanUp``):
        the next start restores every store from its changelog.

        Raises:
            StreamsException: if the client is running (only before start or after close).
        """
        if self._state not in ("CREATED", "NOT_RUNNING", "ERROR"):
            raise StreamsException(f"cannot clean up while the client is {self._state}: call close() first")
        self.state_directory.cleanup()

    # ------------------------------------------------------------------ queries
    def store(self, name: str) -> Any:
        """A read-only view of store ``name`` over the local tasks (interactive queries):
        key-value ``get/all/range/approximate_num_entries``, window
        ``fetch/fetch_all/all``, session ``fetch/find_sessions/all``, versioned ``get``.
        Keys live in exactly one task; ``get`` asks every local task and returns the hit.

        Raises:
            InvalidStateStoreException: unknown store, or the client is not RUNNING or
                REBALANCING (Kafka's ``validateIsRunningOrRebalancing``).
        """
        if name not in self.topology.stores:
            raise InvalidStateStoreException(f"Cannot get state store {name} because no such store is registered in the topology.")
        self._validate_running()
        return store_view(self.topology.stores[name].kind, name, self._queryable_stores)

    def _queryable_stores(self, name: str) -> list[Any]:
        """The store provider of the interactive-query views (Kafka's
        ``QueryableStoreProvider``): the local instances of ``name`` while the client is
        RUNNING or REBALANCING.

        Raises:
            InvalidStateStoreException: otherwise.
        """
        self._validate_running()
        return self.local_stores(name)

    def _validate_running(self) -> None:
        if self._state not in ("RUNNING", "REBALANCING"):
            raise InvalidStateStoreException(f"KafkaStreams is not running. State is {self._state}.")

    def local_stores(self, name: str) -> list[Any]:
        """Open instances of store ``name`` in this client's tasks (global: the one store)."""
        if name in self.global_stores:
            return [self.global_stores[name]]
        out = []
        for th in list(self._threads):
            for task in list(th.tasks.values()):
                st = task.stores.get(name)
                if st is not None and st.open:
                    out.append(st)
        return out

    def _admin_client(self) -> Any:
        if self._admin is None:
            self._admin = admin_client(self.config.bootstrap_servers, self.client_overrides("admin."))
        return self._admin

    def _reset_admin(self) -> None:
        """Drop the admin client after a failed request: an ``AdminClient`` created before a
        broker restart keeps timing out on group requests afterwards (librdkafka 2.16), a
        new one answers at once."""
        self._admin = None

    def streams_metadata(self) -> list[StreamsMetadata]:
        """Every running instance of this application that set ``application.server``, with
        the stores and source partitions it hosts (Kafka's ``KafkaStreams#metadataForAllStreamsClients``),
        read from the consumer group's current assignment.

        Raises:
            StreamsException: the client is not RUNNING/REBALANCING, or the group cannot be
                described (the message says why).
        """
        self._validate_running_metadata()
        try:
            return group_streams_metadata(self._admin_client(), self.plan, self.global_stores)
        except KafkaException as exc:
            self._reset_admin()
            raise StreamsException(f"cannot describe consumer group {self.config.application_id!r}: {exc}") from exc

    def streams_metadata_for_store(self, store: str) -> list[StreamsMetadata]:
        """The instances hosting ``store`` (Kafka's ``streamsMetadataForStore``).

        Raises:
            InvalidStateStoreException: unknown store.
        """
        self._known_store(store)
        return [m for m in self.streams_metadata() if store in m.state_store_names]

    def query_metadata_for_key(self, store: str, key: Any, serializer: Any = None) -> KeyQueryMetadata:
        """The instance hosting ``key`` of ``store`` (Kafka's ``queryMetadataForKey``): the
        partition is murmur2 of the serialized key modulo the store's task count, as Kafka's
        default partitioner. ``serializer``: a ``Serde`` or a ``key -> bytes`` function;
        default the store's key serde, else ``default.key.serde``. Returns
        ``KeyQueryMetadata.NOT_AVAILABLE`` (host ``unavailable``, port -1) while no instance
        owns the partition (a rebalance).

        Raises:
            InvalidStateStoreException: unknown store, or a global store (every instance has it).
        """
        self._known_store(store)
        if store in self.global_stores:
            raise InvalidStateStoreException(f"{store} is a global store: every instance hosts all of it")
        if serializer is None:
            serializer = self.topology.stores[store].key_serde or self.config.default_key_serde
        key_bytes = serializer.serialize(key) if hasattr(serializer, "serialize") else serializer(key)
        self._validate_running_metadata()
        try:
            members = describe_members(self._admin_client(), self.config.application_id)
        except KafkaException as exc:
            self._reset_admin()
            raise StreamsException(f"cannot describe consumer group {self.config.application_id!r}: {exc}") from exc
        metadata = group_streams_metadata(None, self.plan, self.global_stores, members=members)
        standbys = standby_hosts_of(self.plan, members, self.config.num_standby_replicas)
        return key_query_metadata(self.plan, metadata, store, key_bytes, standbys)

    def _known_store(self, store: str) -> None:
        if store not in self.topology.stores:
            raise InvalidStateStoreException(f"Cannot get state store {store} because no such store is registered in the topology.")

    def _validate_running_metadata(self) -> None:
        if self._state not in ("RUNNING", "REBALANCING") or self.plan is None:
            raise StreamsException(f"KafkaStreams is not running. State is {self._state}.")

    def standby_tasks(self) -> list[str]:
        """The ids of the standby tasks this instance keeps (``num.standby.replicas``; Kafka's
        ``ThreadMetadata#standbyTasks`` over all threads)."""
        return self._standby.standby_task_ids() if self._standby is not None else []

    # -- called by the stream threads (standby handover, see .standby)
    def _standby_claim(self, task_id: str) -> None:
        if self._standby is not None:
            self._standby.claim(task_id)

    def _standby_release(self, task_id: str) -> None:
        if self._standby is not None:
            self._standby.release(task_id)

    def _standby_refresh(self) -> None:
        if self._standby is not None:
            self._standby.request_refresh()

    def local_thread_metadata(self) -> list[dict[str, Any]]:
        """``[{"thread": name, "state": ..., "active_tasks": [task ids]}]``."""
        return [{"thread": t.name, "state": t.thread_state, "active_tasks": sorted(t.tasks)} for t in list(self._threads)]

    # ------------------------------------------------------------------ metrics
    def _all_metrics(self) -> list[Any]:
        ms = [t.metrics for t in list(self._threads)] + list(self._dead_metrics)
        if self._global is not None:
            ms.append(self._global.metrics)
        return list({id(m): m for m in ms}.values())

    def metrics(self) -> dict[str, Any]:
        """Client-level metrics (Kafka's names): ``process-total``, ``process-rate``
        (records/s since start), ``dropped-records-total`` (of which
        ``dropped-records-late-total`` late and ``dead-lettered-total`` sent to the DLQ),
        ``expired-window-record-drop-total`` (records a stream-stream join's window store
        dropped as expired, a store metric in Kafka),
        ``commit-total``, ``enforced-processing-total``, ``restore-total`` (changelog records
        replayed into stores), ``alive-stream-threads``, ``poll-total`` (iterations of the
        stream threads' loops) and ``process-records-avg`` (records processed per
        iteration, as Kafka's thread metric), and
        ``tasks``: ``{task id: {metric: value}}``.

        ``threads``: per live stream thread (its name), Kafka's stream-thread-metrics
        ``thread-state``, ``process-total``, ``commit-total``, ``poll-total``,
        ``commit-latency-avg`` and ``commit-latency-max`` (ms, over the commits of the last
        :data:`METRICS_WINDOW_S`; NaN without one, as Kafka), its main consumer's
        ``client-id``, and ``tasks``, its own tasks' counters (``{task id: {counter:
        value}}``, the counters of ``tasks`` before the client sums them: ``process``,
        ``dropped-records``, ``dropped-records-late``, ``restored-records``, ``active-time-ns``:
        wall-clock ns the thread spent processing and committing the task...), and
        ``stores``: ``{task id: {store: {metric: value}}}``, Kafka's RocksDB property
        metrics (KIP-607: ``estimate-num-keys``, and for RocksDB stores
        ``size-all-mem-tables``, ``total-sst-files-size``, ``estimate-live-data-size`` in
        bytes), as the thread read them at most ``STATE_METRICS_INTERVAL_S`` (5 s) ago.

        No broker call: the consumers' lag is :meth:`records_lag`."""
        totals: dict[str, int] = {}
        tasks: dict[str, dict[str, int]] = {}
        for m in self._all_metrics():
            for (task, name), v in dict(m.counters).items():
                totals[name] = totals.get(name, 0) + v
                tasks.setdefault(task, {})[name] = tasks.setdefault(task, {}).get(name, 0) + v
        elapsed = max(1e-9, time.monotonic() - self._started_at) if self._started_at else 0.0
        process_total = totals.get("process", 0)
        poll_total = sum(t.poll_total for t in list(self._threads)) + self._poll_total_dead
        return {
            "process-total": process_total,
            "process-rate": process_total / elapsed if elapsed else 0.0,
            "dropped-records-total": totals.get("dropped-records", 0),
            "dropped-records-late-total": totals.get("dropped-records-late", 0),
            "dead-lettered-total": totals.get("dead-lettered", 0),
            "expired-window-record-drop-total": totals.get("expired-window-record-drop", 0),
            "enforced-processing-total": totals.get("enforced-processing", 0),
            "restore-total": totals.get("restored-records", 0),
            "commit-total": sum(t.commit_total for t in list(self._threads)) + self._commit_total_dead,
            "poll-total": poll_total,
            "process-records-avg": process_total / poll_total if poll_total else 0.0,
            "alive-stream-threads": sum(1 for t in list(self._threads) if t.is_alive()),
            "tasks": tasks,
            "threads": {t.name: self._thread_metrics(t) for t in list(self._threads)},
        }

    def _thread_metrics(self, t: StreamThread) -> dict[str, Any]:
        """One entry of ``metrics()["threads"]``."""
        since = time.monotonic() - METRICS_WINDOW_S
        latencies = [ms for at, ms in list(t.commit_latencies) if at >= since]
        tasks: dict[str, dict[str, int]] = {}
        for (task, name), v in dict(t.metrics.counters).items():
            tasks.setdefault(task, {})[name] = v
        return {
            "thread-state": t.thread_state,
            "process-total": sum(c.get("process", 0) for c in tasks.values()),
            "commit-total": t.commit_total,
            "poll-total": t.poll_total,
            "commit-latency-avg": sum(latencies) / len(latencies) if latencies else math.nan,
            "commit-latency-max": max(latencies) if latencies else math.nan,
            "client-id": f"{self.config.application_id}-{self.process_id}-StreamThread-{t.index}-consumer",
            "tasks": tasks,
            "stores": t.state_metrics,
        }

    def records_lag(self, timeout_s: float = 5.0) -> dict[str, dict[tuple[str, int], int]]:
        """Kafka's consumer metric ``records-lag`` (consumer-fetch-manager-metrics) of each
        stream thread's main consumer, ``{thread name: {(topic, partition): records}}`` for the
        partitions of its tasks (source and repartition topics): the partition's end offset,
        asked of the brokers now (one ListOffsets request for all partitions; the last stable
        offset under ``exactly_once_v2``, what a ``read_committed`` consumer reaches), minus the
        consumer's position: the offset after the last record it returned to the thread, or
        the committed offset when that is further (the position before any record since the
        assignment; past a transaction marker). Records returned but still buffered in the
        tasks are not lag, as in Kafka.

        Kafka samples records-lag at each fetch response; librdkafka's cached high watermark
        stops moving while the thread has a partition paused (its buffer full), so it would
        read 0 exactly while records wait: duet asks the brokers at each call instead (never
        on a stream thread). A partition without a position yet, or of a thread whose consumer
        is closed, is left out.

        Raises:
            KafkaException: the brokers did not answer (``_TIMED_OUT`` after ``timeout_s``) or
                answered with an error (the next call asks with a new admin client).
        """
        positions: dict[str, dict[tuple[str, int], int]] = {}
        for t in list(self._threads):
            if t.consumer is None:  # not started, or closed
                positions[t.name] = {}
                continue
            fetched, committed = t.readiness.fetched_next, t.committed
            mine = {tp: max(fetched.get(tp, -1), committed.get(tp, -1)) for tp in list(t.tp_task)}
            positions[t.name] = {tp: at for tp, at in mine.items() if at >= 0}
        wanted = sorted({tp for mine in positions.values() for tp in mine})
        if self._end_offsets is None:
            self._end_offsets = ListOffsets(client_config(self.config.bootstrap_servers, {
                "isolation.level": "read_committed" if self.config.exactly_once else "read_uncommitted",
                **self.client_overrides("admin.")}))
        ends = self._end_offsets.offsets(wanted, "latest", timeout_s)
        return {name: {tp: max(0, ends[tp] - at) for tp, at in sorted(mine.items()) if tp in ends}
                for name, mine in positions.items()}

    def late_records(self) -> list[tuple[str, Any, int]]:
        """``(store, key, timestamp)`` of every record a windowed aggregation dropped as late
        (after window end + grace, or a closed session), sorted, each once: what the speed
        layer's views miss and the batch layer counts (``docs/contracts.md``). Keys that are
        not hashable are given as their ``repr``."""
        out: set[tuple[str, Any, int]] = set()
        for m in self._all_metrics():
            out.update(set(m.late_records))
        return sorted(out, key=lambda r: (r[0], repr(r[1]), r[2]))

    def late_windows(self) -> dict[str, set[tuple[Any, int]]]:
        """Per store, the ``(key, window_start)`` of windows that records dropped as late
        (after window end + grace) would have updated: the speed layer's values for them
        are incomplete."""
        out: dict[str, set[tuple[Any, int]]] = {}
        for m in self._all_metrics():
            for store, windows in dict(m.late_windows).items():
                out.setdefault(store, set()).update(set(windows))
        return out

    # ------------------------------------------------------------------ catching up
    def wait_until_caught_up(self, timeout_s: float = 60.0) -> bool:
        """Wait until every input partition (source topics, then repartition topics,
        transitively) is consumed to its end offset as of the call and committed. Returns
        False on timeout or if the client stops or fails meanwhile.

        After True, every output of those records was flushed (at-least-once) or
        committed (exactly-once) and the local stores reflect them. It first waits for the
        client to be RUNNING (every thread assigned its tasks and their stores restored): after
        a restart the committed offsets are already at the end while the stores are not yet
        loaded. While it waits, a local thread that owns a partition not yet committed to
        its target commits as soon as it has processed everything it fetched
        (:meth:`StreamThread.request_commit_when_caught_up`), not at its next
        ``commit.interval.ms``. Brokers restarting meanwhile are waited for within
        ``timeout_s`` (s): the end offsets are read again until their partitions have a
        leader.

        Raises:
            KafkaException: a non-retriable error reading an end offset (e.g. no
                authorization on a topic).
        """
        if self.plan is None:
            return False
        waiter = CatchUpWaiter(self.config, self.plan, lambda: self._state, lambda: list(self._threads), self._admin_client,
                               self._reset_admin, self._logger())
        return waiter.wait(timeout_s)

    def __enter__(self) -> "KafkaStreams":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaStreams(application.id={self.config.application_id!r}, state={self._state})"
