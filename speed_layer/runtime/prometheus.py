"""A ``KafkaStreams`` client's metrics in the Prometheus text format (``prometheus_client``).

:class:`KafkaStreamsCollector` is a custom ``prometheus_client`` collector: each scrape calls
``KafkaStreams.metrics()`` once and turns it into metric families; nothing is copied in the
background. Register it on a ``CollectorRegistry`` and serve ``generate_latest(registry)``.

Names: Kafka's JMX names mapped to Prometheus' conventions, as the JMX exporter's usual
Kafka rules do: ``kafka.streams:type=<group>,<tags>`` attribute ``<name>`` becomes
``kafka_streams_<group without "-metrics">_<name>``, dashes as underscores, tags as labels
(``thread-id`` -> ``thread_id``...); a cumulative ``-total`` is a Prometheus counter
(``_total``), everything else a gauge. Client-level ``stream-metrics`` and the
``consumer-fetch-manager-metrics`` of the stream threads' main consumers keep the bare
``kafka_streams_`` prefix. Units: records, records/s, ms.

========================================================  =============================  ==========================
Prometheus name (labels)                                  Kafka group / name             duet source
========================================================  =============================  ==========================
``kafka_streams_client_state`` (client_id, state set)     stream-metrics / client-state  ``KafkaStreams.state``
``kafka_streams_alive_stream_threads`` (client_id)        stream-metrics /               ``alive-stream-threads``
                                                          alive-stream-threads
``kafka_streams_stream_thread_state`` (thread_id, set)    stream-thread-metrics /        ``threads[t]["thread-state"]``
                                                          thread-state
``kafka_streams_stream_thread_process_total``             stream-thread-metrics /        ``threads[t]["process-total"]``
(thread_id)                                               process-total
``kafka_streams_stream_thread_process_rate``              stream-thread-metrics /        records/s between scrapes (below)
(thread_id)                                               process-rate
``kafka_streams_stream_thread_commit_total`` (thread_id)  stream-thread-metrics /        ``threads[t]["commit-total"]``
                                                          commit-total
``kafka_streams_stream_thread_commit_latency_avg``,       stream-thread-metrics /        ``threads[t]["commit-latency-*"]``
``..._max`` (thread_id), ms                               commit-latency-avg / -max      (last 60 s of commits)
``kafka_streams_stream_thread_poll_total`` (thread_id)    stream-thread-metrics /        ``threads[t]["poll-total"]``
                                                          poll-total
``kafka_streams_stream_task_process_total``               stream-task-metrics /          task counter ``process``
(thread_id, task_id)                                      process-total
``kafka_streams_stream_task_dropped_records_total``       stream-task-metrics /          ``dropped-records``
(thread_id, task_id)                                      dropped-records-total
``kafka_streams_stream_task_dropped_records_late_total``  duet: the late part of         ``dropped-records-late``
(thread_id, task_id)                                      dropped-records (Kafka's
                                                          former late-record-drop-total)
``kafka_streams_stream_task_dead_lettered_total``         duet: records sent to the      ``dead-lettered``
(thread_id, task_id)                                      KIP-1034 dead-letter queue
``kafka_streams_stream_task_enforced_processing_total``   stream-task-metrics /          ``enforced-processing``
(thread_id, task_id)                                      enforced-processing-total
``kafka_streams_stream_task_active_process_ratio``        stream-task-metrics /          task counter
(thread_id, task_id)                                      active-process-ratio (duet's   ``active-time-ns``, between
                                                          counts the task's commits)     scrapes (below)
``kafka_streams_stream_state_restore_total``              stream-state-metrics /         ``restored-records``
(thread_id, task_id)                                      restore-total
``kafka_streams_stream_state_restore_rate``               stream-state-metrics /         records/s between scrapes
(thread_id, task_id)                                      restore-rate
``kafka_streams_stream_state_expired_window_record_drop   stream-state-metrics /         ``expired-window-record-drop``
_total`` (thread_id, task_id)                             expired-window-record-drop-
                                                          total
``kafka_streams_records_lag``                             consumer-fetch-manager-        ``records_lag()``: end
(thread_id, client_id, topic, partition)                  metrics / records-lag          offset - position
``kafka_streams_records_lag_max``                         consumer-fetch-manager-        max of the consumer's
(thread_id, client_id)                                    metrics / records-lag-max      partitions' records-lag
========================================================  =============================  ==========================

Per store, gauges with labels (thread_id, task_id, rocksdb_state_id), KIP-607's RocksDB
property metrics of ``stream-state-metrics`` (:data:`STORE_GAUGES`):
``kafka_streams_stream_state_estimate_num_keys`` (every store), and for RocksDB stores
``..._size_all_mem_tables``, ``..._total_sst_files_size``, ``..._estimate_live_data_size``
(bytes); read by each stream thread every 5 s (``metrics()["threads"][t]["stores"]``).

Where duet differs from Kafka:

* Kafka's state metrics carry the store (``<type>-state-id``); duet counts restored records
  and expired join records per task, so those ``stream_state`` series carry the task only.
  The property gauges carry the store as ``rocksdb_state_id`` for every store kind (Kafka:
  ``rocksdb-window-state-id`` and ``rocksdb-session-state-id`` for window and session stores).
* Rates (``process_rate``, ``restore_rate``, per second, and ``active_process_ratio``, seconds
  per second) are computed from the totals seen
  at the scrapes of this collector: the increase since the latest scrape at least
  :data:`RATE_WINDOW_S` old (else the oldest one kept), over that time; at the first scrape
  of a series, since the collector was created. Kafka samples its rates over the same 60 s
  on its own clock. Give Prometheus' ``rate()`` the counters; the rate gauges are for
  readers without a query language (the Dagster sensor).
* ``records_lag`` asks the brokers for the end offsets at each scrape (one ListOffsets
  request, ``KafkaStreams.records_lag``; Kafka uses the high watermark of the last fetch
  response, which stops moving while a partition is paused); when they do not answer the
  lag series are left out of that scrape. ``records_lag_max`` is the largest ``records_lag``
  of the consumer's partitions at the scrape (Kafka: over its sample window); a partition
  without a position yet has no series (Kafka: NaN).
* Task counters of the record collector (a send the production handler dropped or
  dead-lettered) carry ``task_id="producer"``; the global stores' thread is not exported.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, StateSetMetricFamily
from prometheus_client.registry import Collector

from .task_executor import ACTIVE_TIME_NS

log = logging.getLogger(__name__)

__all__ = ["KafkaStreamsCollector", "CLIENT_STATES", "THREAD_STATES", "RATE_WINDOW_S", "TASK_COUNTERS"]

#: Kafka's ``KafkaStreams.State``
CLIENT_STATES = ("CREATED", "REBALANCING", "RUNNING", "PENDING_SHUTDOWN", "NOT_RUNNING", "PENDING_ERROR", "ERROR")
#: Kafka's ``StreamThread.State``
THREAD_STATES = ("CREATED", "STARTING", "PARTITIONS_REVOKED", "PARTITIONS_ASSIGNED", "RUNNING", "PENDING_SHUTDOWN",
                 "DEAD")
#: the window of the rates, s: Kafka's ``metrics.num.samples`` (2) x ``metrics.sample.window.ms`` (30 s)
RATE_WINDOW_S = 60.0
#: task counter of the runtime -> (Prometheus name, help): the counters of one task
TASK_COUNTERS: dict[str, tuple[str, str]] = {
    "process": ("kafka_streams_stream_task_process",
                "Records processed by the task (stream-task-metrics process-total)."),
    "dropped-records": ("kafka_streams_stream_task_dropped_records",
                        "Records the task dropped: late, null key, handler 'continue' "
                        "(stream-task-metrics dropped-records-total)."),
    "dropped-records-late": ("kafka_streams_stream_task_dropped_records_late",
                             "Of the dropped records, those a window or session had closed for (duet; part of "
                             "dropped-records-total, Kafka's former late-record-drop-total)."),
    "dead-lettered": ("kafka_streams_stream_task_dead_lettered",
                      "Records sent to the dead-letter topic (duet, KIP-1034 errors.dead.letter.queue.topic.name)."),
    "enforced-processing": ("kafka_streams_stream_task_enforced_processing",
                            "Times the task processed with an empty input partition after max.task.idle.ms "
                            "(stream-task-metrics enforced-processing-total)."),
    "restored-records": ("kafka_streams_stream_state_restore",
                         "Changelog records restored into the task's stores (stream-state-metrics restore-total)."),
    "expired-window-record-drop": ("kafka_streams_stream_state_expired_window_record_drop",
                                   "Records a stream-stream join's window store dropped as expired "
                                   "(stream-state-metrics expired-window-record-drop-total)."),
}


#: KIP-607 RocksDB property metric of a store -> (Prometheus name, help)
STORE_GAUGES: dict[str, tuple[str, str]] = {
    "estimate-num-keys": ("kafka_streams_stream_state_estimate_num_keys",
                          "Keys in the store, RocksDB's estimate (deletes not yet compacted away included) "
                          "(stream-state-metrics estimate-num-keys, KIP-607)."),
    "size-all-mem-tables": ("kafka_streams_stream_state_size_all_mem_tables",
                            "Bytes of the store's RocksDB memtables (stream-state-metrics size-all-mem-tables)."),
    "total-sst-files-size": ("kafka_streams_stream_state_total_sst_files_size",
                             "Bytes of the store's RocksDB SST files (stream-state-metrics total-sst-files-size)."),
    "estimate-live-data-size": ("kafka_streams_stream_state_estimate_live_data_size",
                                "Bytes of live data in the store's RocksDB, estimated "
                                "(stream-state-metrics estimate-live-data-size)."),
}


class _Rates:
    """Windowed rates from the totals seen at each scrape (thread-safe)."""

    def __init__(self, start: float, clock: Callable[[], float]) -> None:
        self._start = start
        self._clock = clock
        self._samples: dict[tuple[str, ...], deque[tuple[float, float]]] = {}
        self._lock = threading.Lock()

    def rate(self, key: tuple[str, ...], total: float) -> float:
        """Per second: ``total``'s increase since the latest sample at least
        :data:`RATE_WINDOW_S` old (else the oldest sample), or since the start at the first
        sample of ``key``."""
        now = self._clock()
        with self._lock:
            samples = self._samples.setdefault(key, deque())
            while len(samples) > 1 and samples[1][0] <= now - RATE_WINDOW_S:
                samples.popleft()
            at, before = samples[0] if samples else (self._start, 0.0)
            samples.append((now, total))
            if total < before:  # the counter restarted (a replaced thread of the same name)
                at, before = self._start, 0.0
            return (total - before) / (now - at) if now > at else 0.0

    def keep_only(self, live: set[tuple[str, ...]]) -> None:
        """Forget the series that are gone (a thread or task that moved)."""
        with self._lock:
            for key in [k for k in self._samples if k not in live]:
                del self._samples[key]


class KafkaStreamsCollector(Collector):
    """The Prometheus metric families of ``streams`` (see the module docstring for the names).

    Args:
        streams: a ``speed_layer.KafkaStreams`` (started or not).
        clock: monotonic seconds (the rates' time base).
        lag_timeout_s: how long a scrape waits for the brokers' end offsets (``records_lag``).

    ``collect`` never raises for a client in any state: a closed client has no thread series.
    """

    def __init__(self, streams: Any, clock: Callable[[], float] = time.monotonic, lag_timeout_s: float = 5.0) -> None:
        self._streams = streams
        self._rates = _Rates(clock(), clock)
        self._lag_timeout_s = lag_timeout_s

    def collect(self) -> Iterator[Metric]:
        """One scrape: ``streams.metrics()`` read once, as metric families."""
        streams = self._streams
        metrics = streams.metrics()
        try:
            records_lag = streams.records_lag(self._lag_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the brokers are away: the other series still count
            log.warning("records-lag left out of this scrape: %r", exc)
            records_lag = {}
        threads: Mapping[str, Mapping[str, Any]] = metrics.get("threads", {})
        client_id = f"{streams.config.application_id}-{streams.process_id}" if streams.process_id else \
            streams.config.application_id
        live: set[tuple[str, ...]] = set()

        state = StateSetMetricFamily("kafka_streams_client_state",
                                     "The client's state (stream-metrics client-state).", labels=["client_id"])
        state.add_metric([client_id], {s: s == streams.state for s in CLIENT_STATES})
        yield state
        yield _gauge("kafka_streams_alive_stream_threads", "Stream threads alive (stream-metrics alive-stream-threads).",
                     ["client_id"], [([client_id], metrics.get("alive-stream-threads", 0))])

        thread_state = StateSetMetricFamily("kafka_streams_stream_thread_state",
                                            "The stream thread's state (stream-thread-metrics thread-state).",
                                            labels=["thread_id"])
        process = CounterMetricFamily("kafka_streams_stream_thread_process",
                                      "Records processed by the thread (stream-thread-metrics process-total).",
                                      labels=["thread_id"])
        process_rate = GaugeMetricFamily("kafka_streams_stream_thread_process_rate",
                                         f"Records processed per second over the last {RATE_WINDOW_S:.0f} s of scrapes "
                                         "(stream-thread-metrics process-rate).", labels=["thread_id"])
        commits = CounterMetricFamily("kafka_streams_stream_thread_commit",
                                      "Commits of the thread (stream-thread-metrics commit-total).", labels=["thread_id"])
        latency_avg = GaugeMetricFamily("kafka_streams_stream_thread_commit_latency_avg",
                                        "Mean time of a commit over the last 60 s, ms; NaN without a commit "
                                        "(stream-thread-metrics commit-latency-avg).", labels=["thread_id"])
        latency_max = GaugeMetricFamily("kafka_streams_stream_thread_commit_latency_max",
                                        "Longest commit over the last 60 s, ms; NaN without a commit "
                                        "(stream-thread-metrics commit-latency-max).", labels=["thread_id"])
        polls = CounterMetricFamily("kafka_streams_stream_thread_poll",
                                    "Iterations of the thread's poll loop (stream-thread-metrics poll-total).",
                                    labels=["thread_id"])
        task_families = {c: CounterMetricFamily(n, h, labels=["thread_id", "task_id"]) for c, (n, h) in
                         TASK_COUNTERS.items()}
        store_families = {m: GaugeMetricFamily(n, h, labels=["thread_id", "task_id", "rocksdb_state_id"])
                          for m, (n, h) in STORE_GAUGES.items()}
        active_ratio = GaugeMetricFamily(
            "kafka_streams_stream_task_active_process_ratio",
            f"Fraction of wall-clock time the stream thread spent on the task over the last {RATE_WINDOW_S:.0f} s of "
            "scrapes, its commits included (stream-task-metrics active-process-ratio).", labels=["thread_id", "task_id"])
        restore_rate = GaugeMetricFamily("kafka_streams_stream_state_restore_rate",
                                         f"Records restored per second over the last {RATE_WINDOW_S:.0f} s of scrapes "
                                         "(stream-state-metrics restore-rate).", labels=["thread_id", "task_id"])
        lag = GaugeMetricFamily("kafka_streams_records_lag",
                                "High watermark of the partition's last fetch minus the consumer's position, records "
                                "(consumer-fetch-manager-metrics records-lag).",
                                labels=["thread_id", "client_id", "topic", "partition"])
        lag_max = GaugeMetricFamily("kafka_streams_records_lag_max",
                                    "The largest records_lag of the consumer's partitions, records "
                                    "(consumer-fetch-manager-metrics records-lag-max).", labels=["thread_id", "client_id"])

        for name, t in sorted(threads.items()):
            thread_state.add_metric([name], {s: s == t.get("thread-state") for s in THREAD_STATES})
            total = float(t.get("process-total", 0))
            process.add_metric([name], total)
            live.add(("process", name))
            process_rate.add_metric([name], self._rates.rate(("process", name), total))
            commits.add_metric([name], float(t.get("commit-total", 0)))
            latency_avg.add_metric([name], float(t.get("commit-latency-avg", math.nan)))
            latency_max.add_metric([name], float(t.get("commit-latency-max", math.nan)))
            polls.add_metric([name], float(t.get("poll-total", 0)))
            for task, counters in sorted(t.get("tasks", {}).items()):
                for counter, family in task_families.items():
                    if counter in counters:
                        family.add_metric([name, task], float(counters[counter]))
                if ACTIVE_TIME_NS in counters:
                    live.add(("active", name, task))
                    active_ratio.add_metric([name, task],
                                            self._rates.rate(("active", name, task), counters[ACTIVE_TIME_NS] / 1e9))
                if "restored-records" in counters:
                    live.add(("restore", name, task))
                    restore_rate.add_metric([name, task],
                                            self._rates.rate(("restore", name, task), float(counters["restored-records"])))
            for task, stores in sorted(t.get("stores", {}).items()):
                for store, values in sorted(stores.items()):
                    for metric, family in store_families.items():
                        if metric in values:
                            family.add_metric([name, task, store], float(values[metric]))
            consumer = str(t.get("client-id", ""))
            lags = [(topic, p, n) for (topic, p), n in sorted(records_lag.get(name, {}).items())]
            for topic, p, n in lags:
                lag.add_metric([name, consumer, topic, str(p)], float(n))
            if lags:
                lag_max.add_metric([name, consumer], float(max(n for _, _, n in lags)))
        self._rates.keep_only(live)
        yield from (thread_state, process, process_rate, commits, latency_avg, latency_max, polls,
                    *task_families.values(), active_ratio, restore_rate, *store_families.values(), lag, lag_max)


def _gauge(name: str, doc: str, labels: list[str], values: list[tuple[list[str], float]]) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=labels)
    for label_values, v in values:
        g.add_metric(label_values, float(v))
    return g
