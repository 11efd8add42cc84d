"""KafkaStreams: runs a Topology on a Kafka cluster (Kafka's ``KafkaStreams``).

``KafkaStreams(topology, config)`` validates the config at construction; ``start()``
creates the internal topics (:mod:`.topic_setup`), bootstraps the global stores
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
import threading
import time
from typing import Any, Callable

from ..config import StreamsConfig
from ..errors import StreamsException
from ..state.query import (QueryableStoreProvider, ReadOnlyKeyValueView, ReadOnlySessionView, ReadOnlyVersionedView,
                           ReadOnlyWindowView)
from ..topology import Topology
from . import client_configs, gc_tuning
from .admin import CLIENT_LOGGER, admin_client
from .catch_up import CatchUpWaiter
from .client_metrics import ClientMetrics
from .client_state import ClientState
from .global_state import GlobalStateUpdater
from .internal_topics import TopologyPlan, reset_application
from .metadata import KeyQueryMetadata, StreamsMetadata, StreamsMetadataState
from .record_collector import KafkaRecordCollector, PartitionCounts
from .restore import StateDirectory
from .standby import StandbyUpdater
from .stream_thread import StreamThread, ThreadContext, ThreadHooks
from .topic_setup import setup_topics
from .uncaught_exceptions import EXCEPTION_HANDLER_RESPONSES, handler_response

log = logging.getLogger("speed_layer.streams")

__all__ = [
    "KafkaStreams", "reset_application", "EXCEPTION_HANDLER_RESPONSES", "ReadOnlyKeyValueView", "ReadOnlyWindowView",
    "ReadOnlySessionView", "ReadOnlyVersionedView",
]


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
        client_configs.validate(cfg, topology)
        self.topology = topology
        #: Kafka: commit.interval.ms defaults to 100 ms under exactly-once, 30000 ms otherwise
        self.commit_interval_ms = client_configs.commit_interval_ms(cfg)
        self.state_directory = StateDirectory(cfg.state_dir, cfg.application_id)
        self._paused = threading.Event()
        self.process_id = ""
        self.plan: TopologyPlan | None = None
        self.partition_counts = PartitionCounts(cfg.bootstrap_servers, task_timeout_ms=cfg.task_timeout_ms,
                                                retry_backoff_ms=cfg.retry_backoff_ms, max_block_ms=cfg.max_block_ms)
        self.global_stores: dict[str, Any] = {}
        self._global: GlobalStateUpdater | None = None
        self._standby: StandbyUpdater | None = None
        self._threads: list[StreamThread] = []
        self._states = ClientState(cfg.application_id)
        #: whether this client raised the collector's thresholds (``python.gc.thresholds``)
        self._gc_tuned = False
        self._lock = self._states.lock
        self._handler: Callable[[BaseException], str] | None = None
        self.errors: list[BaseException] = []
        self._admin: Any = None
        self._metrics = ClientMetrics(cfg, lambda: list(self._threads),
                                      lambda: self._global.metrics if self._global is not None else None,
                                      lambda: self._standby.updates if self._standby is not None else {})
        #: the store provider of the interactive-query views (Kafka's QueryableStoreProvider)
        self._queryable_stores = QueryableStoreProvider(
            lambda: self.state, lambda: self.global_stores,
            lambda: [task for th in list(self._threads) for task in list(th.tasks.values())])
        self._metadata = StreamsMetadataState(cfg, topology, lambda: self.state, lambda: self.plan, lambda: self.global_stores,
                                              self._admin_client, self._reset_admin)

    # ------------------------------------------------------------------ client configs
    def client_overrides(self, prefix: str) -> dict[str, Any]:
        """``<prefix>key`` entries of the config with the prefix stripped."""
        return client_configs.client_overrides(self.config, prefix)

    def consumer_config(self, client_id: str) -> dict[str, Any]:
        """A consumer's librdkafka config (:func:`.client_configs.consumer_config`)."""
        return client_configs.consumer_config(self.config, client_id)

    def producer_config(self, client_id: str) -> dict[str, Any]:
        """A producer's librdkafka config (:func:`.client_configs.producer_config`)."""
        return client_configs.producer_config(self.config, client_id)

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
        return self._states.state

    def set_state_listener(self, listener: Callable[[str, str], None]) -> None:
        """``listener(new_state, old_state)`` on every state change (Kafka's StateListener).

        Raises:
            StreamsException: if the client was already started.
        """
        if self.state != "CREATED":
            raise StreamsException("set_state_listener must be called before start()")
        self._states.listener = listener

    def set_uncaught_exception_handler(self, handler: Callable[[BaseException], str]) -> None:
        """``handler(exc)`` runs when a stream thread dies and answers one of
        ``REPLACE_THREAD`` (start a new thread in its place), ``SHUTDOWN_CLIENT`` (stop this
        instance: state ERROR) or ``SHUTDOWN_APPLICATION`` (Kafka also stops every other
        instance through the group; here only this instance stops). Without a handler:
        SHUTDOWN_CLIENT, the error kept in :attr:`errors` (Kafka's default).

        Raises:
            StreamsException: if the client was already started.
        """
        if self.state != "CREATED":
            raise StreamsException("set_uncaught_exception_handler must be called before start()")
        self._handler = handler

    def _thread_context(self) -> ThreadContext:
        return ThreadContext(self.config, self.plan, self.topology, self.process_id, self.state_directory, self.global_stores,
                             self.partition_counts, self.commit_interval_ms, self.consumer_config, self.producer_config,
                             self.client_overrides, self._paused)

    def _thread_hooks(self) -> ThreadHooks:
        """The threads' callbacks; the standby hand-over (see :mod:`.standby`) does nothing without standbys."""
        sb = self._standby  # made before the threads, never replaced
        if sb is None:
            return ThreadHooks(self._on_thread_state_change, self._on_thread_error, lambda task_id: None,
                               lambda task_id: None, lambda: None)
        return ThreadHooks(self._on_thread_state_change, self._on_thread_error, sb.claim, sb.release, sb.request_refresh)

    def _on_thread_state_change(self, thread: StreamThread) -> None:
        self._states.threads_changed(lambda: [t.thread_state for t in self._threads])

    def _on_thread_error(self, thread: StreamThread | None, exc: BaseException) -> None:
        self.errors.append(exc)
        if thread is not None:
            self._metrics.thread_died(thread)
        if self.state in ("PENDING_SHUTDOWN", "NOT_RUNNING", "PENDING_ERROR", "ERROR"):
            return
        action = handler_response(self._handler, exc)
        if action == "REPLACE_THREAD" and thread is not None:
            with self._lock:
                if self.state in ("REBALANCING", "RUNNING"):
                    new = StreamThread(self._thread_context(), thread.index, self._thread_hooks())
                    self._threads = [new if t is thread else t for t in self._threads]
                    new.start()
                    log.warning("replaced stream thread %s after %r", thread.name, exc)
                    return
        if action == "SHUTDOWN_APPLICATION":
            log.error("SHUTDOWN_APPLICATION: stopping this instance (other instances are not notified)")
        if self._states.set("PENDING_ERROR"):
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
            if self.state != "CREATED":
                raise StreamsException(f"KafkaStreams can only be started once (state {self.state})")
            self._states.set("REBALANCING")
        try:
            self._start()
        except BaseException:
            self._states.set("PENDING_ERROR")
            self._shutdown(30.0, "ERROR")
            raise

    def _start(self) -> None:
        cfg = self.config
        self.state_directory.lock()
        self._gc_tuned = gc_tuning.acquire(cfg.python_gc_thresholds)
        self.process_id = self.state_directory.process_id()
        self._metrics.started(self.process_id)
        self.plan = setup_topics(self.topology, cfg, self.partition_counts)
        if self.topology.global_stores():
            gconf = client_configs.restore_consumer_config(cfg, f"{cfg.application_id}-{self.process_id}-global-consumer")
            self._global = GlobalStateUpdater(self.topology, cfg, self.state_directory, gconf, self._new_collector,
                                              lambda exc: self._on_thread_error(None, exc))
            self.global_stores = self._global.stores
            self._global.bootstrap()
            self._global.start()
        if cfg.num_standby_replicas > 0:
            sconf = client_configs.restore_consumer_config(cfg, f"{cfg.application_id}-{self.process_id}-standby-consumer")
            self._standby = StandbyUpdater(self, sconf, lambda exc: self._on_thread_error(None, exc), self._admin_client, self._reset_admin)
        with self._lock:
            self._threads = [StreamThread(self._thread_context(), i + 1, self._thread_hooks()) for i in range(cfg.num_stream_threads)]
            for t in self._threads:
                t.start()
        if self._standby is not None:
            self._standby.start()

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
            if self.state in ("NOT_RUNNING", "ERROR"):
                return True
            if self.state in ("PENDING_SHUTDOWN", "PENDING_ERROR"):
                pending = True
            else:
                pending = False
                self._states.set("PENDING_SHUTDOWN")
        if pending:
            return self._states.wait_for(("NOT_RUNNING", "ERROR"), timeout_s)
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
        self._states.set(final)
        return ok

    def cleanup(self) -> None:
        """Delete this application's local state directory (Kafka's ``KafkaStreams#cleanUp``):
        the next start restores every store from its changelog.

        Raises:
            StreamsException: if the client is running (only before start or after close).
        """
        if self.state not in ("CREATED", "NOT_RUNNING", "ERROR"):
            raise StreamsException(f"cannot clean up while the client is {self.state}: call close() first")
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
        self._metadata.known_store(name)
        return self._queryable_stores.view(self.topology.stores[name].kind, name)

    def local_stores(self, name: str) -> list[Any]:
        """Open instances of store ``name`` in this client's tasks (global: the one store)."""
        return self._queryable_stores.local_stores(name)

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
        return self._metadata.all_metadata()

    def streams_metadata_for_store(self, store: str) -> list[StreamsMetadata]:
        """The instances hosting ``store`` (Kafka's ``streamsMetadataForStore``).

        Raises:
            InvalidStateStoreException: unknown store.
        """
        return self._metadata.all_metadata_for_store(store)

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
        return self._metadata.key_query_metadata(store, key, serializer)

    def standby_tasks(self) -> list[str]:
        """The ids of the standby tasks this instance keeps (``num.standby.replicas``; Kafka's
        ``ThreadMetadata#standbyTasks`` over all threads)."""
        return self._standby.standby_task_ids() if self._standby is not None else []

    def local_thread_metadata(self) -> list[dict[str, Any]]:
        """``[{"thread": name, "state": ..., "active_tasks": [task ids]}]``."""
        return [{"thread": t.name, "state": t.thread_state, "active_tasks": sorted(t.tasks)} for t in list(self._threads)]

    # ------------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, Any]:
        """Client-level metrics (Kafka's names): ``process-total``, ``process-rate``
        (records/s since start), ``dropped-records-total`` (of which
        ``dropped-records-late-total`` late and ``dead-lettered-total`` sent to the DLQ),
        ``expired-window-record-drop-total`` (stream-stream join records that lost results
        to expired window records, :meth:`expired_join_ranges`), ``commit-total``,
        ``enforced-processing-total``, ``restore-total`` (changelog records replayed into
        stores), ``alive-stream-threads``, ``poll-total`` (stream thread loops), ``process-records-avg``
        (records per loop, Kafka's thread metric), ``tasks``: ``{task id: {metric: value}}`` (standby tasks: KIP-869's ``update-total``).

        ``threads``: per live stream thread (its name), Kafka's stream-thread-metrics
        ``thread-state``, ``process-total``, ``commit-total``, ``poll-total``,
        ``commit-latency-avg`` and ``commit-latency-max`` (ms, over the commits of the last
        :data:`.client_metrics.METRICS_WINDOW_S` s; NaN without one, as Kafka), its main consumer's
        ``client-id``, and ``tasks``, its own tasks' counters (``{task id: {counter:
        value}}``, the counters of ``tasks`` before the client sums them: ``process``,
        ``dropped-records``, ``dropped-records-late``, ``restored-records``, ``active-time-ns``:
        wall-clock ns the thread spent processing and committing the task...), and
        ``stores``: ``{task id: {store: {metric: value}}}``, Kafka's RocksDB property
        metrics (KIP-607: ``estimate-num-keys``, and for RocksDB stores
        ``size-all-mem-tables``, ``total-sst-files-size``, ``estimate-live-data-size`` in
        bytes), as the thread read them at most ``STATE_METRICS_INTERVAL_S`` (5 s) ago.

        No broker call: the consumers' lag is :meth:`records_lag`."""
        return self._metrics.metrics()

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
        return self._metrics.records_lag(timeout_s)

    def late_records(self) -> list[tuple[str, Any, int]]:
        """``(store, key, timestamp)`` of every record a windowed aggregation dropped as late
        (after window end + grace, or a closed session), sorted, each once: what the speed
        views miss and the batch counts (docs/contracts.md); unhashable keys as ``repr``."""
        return self._metrics.late_records()

    def expired_join_ranges(self) -> list[tuple[str, int, int]]:
        """``(join window store, first ms, last ms)``: the lost results' timestamps of each
        ``expired-window-record-drop`` of a stream-stream join (docs/contracts.md)."""
        return self._metrics.expired_join_ranges()

    def late_windows(self) -> dict[str, set[tuple[Any, int]]]:
        """Per store, ``(key, window_start)`` of the windows records dropped as late missed."""
        return self._metrics.late_windows()

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
        waiter = CatchUpWaiter(self.config, self.plan, lambda: self.state, lambda: list(self._threads), self._admin_client,
                               self._reset_admin, CLIENT_LOGGER)
        return waiter.wait(timeout_s)

    def __enter__(self) -> "KafkaStreams":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaStreams(application.id={self.config.application_id!r}, state={self.state})"
