"""The metrics of a streams client: Kafka's ``ClientMetrics`` and ``ThreadMetrics``
(stream-thread-metrics), the consumer's ``records-lag`` (consumer-fetch-manager-metrics),
and the late records a windowed aggregation dropped.

:class:`ClientMetrics` sums the counters of the live stream threads, of the global thread
and of the threads that died (kept by :meth:`ClientMetrics.thread_died`, so that totals
never go back when a thread is replaced). Reading them makes no broker call, except
:meth:`ClientMetrics.records_lag`. Latencies are ms, rates per second.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Callable

from ..config import StreamsConfig
from .client_configs import offsets_reader_config
from .task_timeout import ListOffsets

if TYPE_CHECKING:
    from .stream_thread import StreamThread
    from .task import Metrics

__all__ = ["METRICS_WINDOW_S", "ClientMetrics"]

#: the window of the windowed thread metrics (``commit-latency-avg``/``-max``), s: Kafka's
#: defaults, ``metrics.num.samples`` (2) x ``metrics.sample.window.ms`` (30 s)
METRICS_WINDOW_S = 60.0


class ClientMetrics:
    """The metrics of one ``KafkaStreams`` (see ``KafkaStreams.metrics`` for the names).

    Args:
        config: the client's config.
        threads: the client's current stream threads.
        global_metrics: the global stream thread's counters, None without global stores.
        standby_updates: task id -> the changelog records applied to this instance's
            standby of the task since the client started (KIP-869's task-level
            ``update-total``, in ``metrics()["tasks"]``).
    """

    def __init__(self, config: StreamsConfig, threads: Callable[[], list[StreamThread]],
                 global_metrics: Callable[[], Metrics | None],
                 standby_updates: Callable[[], dict[str, int]] = dict) -> None:
        self.config = config
        self._threads, self._global_metrics = threads, global_metrics
        self._standby_updates = standby_updates
        self._process_id = ""
        self._started_at = 0.0  # time.monotonic() at start, s; 0: not started
        self._dead: list[Metrics] = []
        self._commit_total_dead = 0
        self._poll_total_dead = 0
        self._end_offsets: ListOffsets | None = None  # records_lag's, made at its first call

    def started(self, process_id: str) -> None:
        """The client starts now as instance ``process_id`` (part of the consumers' client ids)."""
        self._process_id = process_id
        self._started_at = time.monotonic()

    def thread_died(self, thread: StreamThread) -> None:
        """Keep the counters of ``thread``, which died, in the client's totals."""
        self._dead.append(thread.metrics)
        self._commit_total_dead += thread.commit_total
        self._poll_total_dead += thread.poll_total

    def _all(self) -> list[Metrics]:
        """The counters of the live and dead stream threads and of the global thread, each once."""
        ms = [t.metrics for t in self._threads()] + list(self._dead)
        global_metrics = self._global_metrics()
        if global_metrics is not None:
            ms.append(global_metrics)
        return list({id(m): m for m in ms}.values())

    def metrics(self) -> dict[str, Any]:
        """``KafkaStreams.metrics()``: the client-level metrics, ``tasks`` and ``threads``."""
        totals: dict[str, int] = {}
        tasks: dict[str, dict[str, int]] = {}
        for m in self._all():
            for (task, name), v in dict(m.counters).items():
                totals[name] = totals.get(name, 0) + v
                tasks.setdefault(task, {})[name] = tasks.setdefault(task, {}).get(name, 0) + v
        for task, n in dict(self._standby_updates()).items():
            tasks.setdefault(task, {})["update-total"] = n
        elapsed = max(1e-9, time.monotonic() - self._started_at) if self._started_at else 0.0
        process_total = totals.get("process", 0)
        threads = self._threads()
        poll_total = sum(t.poll_total for t in threads) + self._poll_total_dead
        return {
            "process-total": process_total,
            "process-rate": process_total / elapsed if elapsed else 0.0,
            "dropped-records-total": totals.get("dropped-records", 0),
            "dropped-records-late-total": totals.get("dropped-records-late", 0),
            "dead-lettered-total": totals.get("dead-lettered", 0),
            "expired-window-record-drop-total": totals.get("expired-window-record-drop", 0),
            "enforced-processing-total": totals.get("enforced-processing", 0),
            "restore-total": totals.get("restored-records", 0),
            "commit-total": sum(t.commit_total for t in threads) + self._commit_total_dead,
            "poll-total": poll_total,
            "process-records-avg": process_total / poll_total if poll_total else 0.0,
            "alive-stream-threads": sum(1 for t in threads if t.is_alive()),
            "tasks": tasks,
            "threads": {t.name: self.thread_metrics(t) for t in threads},
        }

    def thread_metrics(self, t: StreamThread) -> dict[str, Any]:
        """One entry of ``metrics()["threads"]`` (Kafka's ``ThreadMetrics``): commit
        latencies in ms over the last :data:`METRICS_WINDOW_S` s, NaN without a commit."""
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
            "client-id": f"{self.config.application_id}-{self._process_id}-StreamThread-{t.index}-consumer",
            "tasks": tasks,
            "stores": t.state_metrics,
        }

    def records_lag(self, timeout_s: float) -> dict[str, dict[tuple[str, int], int]]:
        """``KafkaStreams.records_lag(timeout_s)``: ``{thread name: {(topic, partition):
        records}}``, the end offsets asked of the brokers now (``timeout_s``: s).

        Raises:
            KafkaException: the brokers did not answer (``_TIMED_OUT`` after ``timeout_s``) or
                answered with an error (the next call asks with a new admin client).
        """
        positions: dict[str, dict[tuple[str, int], int]] = {}
        for t in self._threads():
            if t.consumer is None:  # not started, or closed
                positions[t.name] = {}
                continue
            fetched, committed = t.readiness.fetched_next, t.committed
            mine = {tp: max(fetched.get(tp, -1), committed.get(tp, -1)) for tp in list(t.tp_task)}
            positions[t.name] = {tp: at for tp, at in mine.items() if at >= 0}
        wanted = sorted({tp for mine in positions.values() for tp in mine})
        if self._end_offsets is None:
            self._end_offsets = ListOffsets(offsets_reader_config(self.config))
        ends = self._end_offsets.offsets(wanted, "latest", timeout_s)
        return {name: {tp: max(0, ends[tp] - at) for tp, at in sorted(mine.items()) if tp in ends}
                for name, mine in positions.items()}

    def late_records(self) -> list[tuple[str, Any, int]]:
        """``KafkaStreams.late_records()``: ``(store, key, timestamp ms)``, sorted, each once."""
        out: set[tuple[str, Any, int]] = set()
        for m in self._all():
            out.update(set(m.late_records))
        return sorted(out, key=lambda r: (r[0], repr(r[1]), r[2]))

    def expired_join_ranges(self) -> list[tuple[str, int, int]]:
        """``KafkaStreams.expired_join_ranges()``: ``(store, first ms, last ms)``, sorted."""
        out: set[tuple[str, int, int]] = set()
        for m in self._all():
            out.update(set(m.expired_join_ranges))
        return sorted(out)

    def late_windows(self) -> dict[str, set[tuple[Any, int]]]:
        """``KafkaStreams.late_windows()``: per store, ``(key, window_start ms)``."""
        out: dict[str, set[tuple[Any, int]]] = {}
        for m in self._all():
            for store, windows in dict(m.late_windows).items():
                out.setdefault(store, set()).update(set(windows))
        return out
