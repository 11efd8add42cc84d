"""Where a backlog's input partitions end (issue 42, item 2): with the streams config
``backlog.inputs.complete`` (duet's own key; ``duet run --instances N`` sets it), the
application's inputs are complete when it starts, so each partition a task reads has a
known last offset, and a partition that is empty at that offset is empty for good. The
readiness rules then need no clock to tell "nothing more will come" from "more may come
from another process" (:mod:`.readiness`).

Which partitions end where:

* a user source topic that no sub-topology writes: complete from the start; its end is its
  end offset (high watermark) read when the stream thread starts;
* a topic written by sub-topologies (a repartition topic, or a user topic a sink writes):
  complete once every writer is *done*, that is every source partition of the writer is
  complete and the group's committed offset of each is at that partition's end. An
  at-least-once commit flushes the producer before it commits (:mod:`.task_committer`), so
  everything a done writer will ever send is on the broker: the topic's end is its high
  watermark read then. Offsets are read with the group's committed offsets (a consumer of
  the group that never joins it, :class:`.CommittedOffsetsReader`) and the Admin API's
  ListOffsets, every ``POLL_S`` by a daemon thread of the stream thread, until every covered
  topic's end is known;
* **not covered** (the clock rules of ``max.task.idle.ms`` stay): a topic one of whose
  writers is on a cycle of sub-topologies (a foreign-key join's subscription and response
  topics, a sub-topology reading its own sink) or reads a topic that is not covered, and
  every topic when a sink has a topic extractor (any topic may then be written).

A done writer's own thread commits at once rather than at its next ``commit.interval.ms``:
:meth:`BacklogEnds.finished` tells the committer which of its partitions were consumed to
their end and not committed there yet.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable

from confluent_kafka import KafkaException

from ..graph.ops import SinkOp

if TYPE_CHECKING:
    from ..topology import Topology
    from .internal_topics import TopologyPlan

log = logging.getLogger("speed_layer.thread")

__all__ = ["BacklogEnds", "covered_topics", "POLL_S"]

TP = tuple[str, int]
#: how often the ends still unknown are looked for, s
POLL_S = 0.1
#: the longest one request of a poll waits, s
REQUEST_S = 5.0


def writers_of(plan: "TopologyPlan", topology: "Topology") -> tuple[dict[str, set[int]], bool]:
    """``({source topic: ids of the sub-topologies writing it}, any dynamic sink)``: full
    topic names, only topics that tasks read."""
    read = {t for ts in plan.sources.values() for t in ts}
    out: dict[str, set[int]] = {}
    dynamic = False
    for sub in plan.subtopologies:
        for n in sub.nodes:
            op = topology.nodes[n].op
            if isinstance(op, SinkOp) and op.topic is None:
                dynamic = True
        for t in sub.sink_topics:
            full = f"{plan.application_id}-{t}" if f"{plan.application_id}-{t}" in plan.repartition else t
            if full in read:
                out.setdefault(full, set()).add(sub.id)
    return out, dynamic


def covered_topics(sources: dict[int, tuple[str, ...]], writers: dict[str, set[int]]) -> set[str]:
    """The source topics whose end a backlog knows (see the module docstring): not written,
    or written only by sub-topologies off every cycle whose sources are all covered.
    ``sources``: the sub-topologies' source topics; ``writers``: as :func:`writers_of`."""
    memo: dict[str, bool] = {}
    visiting: set[str] = set()

    def covered(topic: str) -> bool:
        if topic in memo:
            return memo[topic]
        if topic in visiting:
            return False  # a cycle: a foreign-key join's subscription and response topics
        visiting.add(topic)
        ok = all(covered(src) for sid in writers.get(topic, ()) for src in sources.get(sid, ()))
        visiting.discard(topic)
        memo[topic] = ok
        return ok

    all_topics = {t for ts in sources.values() for t in ts}
    return {t for t in sorted(all_topics) if covered(t)}


class BacklogEnds:
    """The known ends of one stream thread's application on a backlog (see the module
    docstring).

    Args:
        plan: the topology plan (sources per sub-topology, partition counts).
        topology: the topology (its sinks).
        committed: ``committed(tps)``: the group's committed offsets (absent: none).
        ends: ``ends(tps)``: the partitions' end offsets (high watermarks).
        close_clients: closes the clients behind ``committed`` and ``ends`` (at :meth:`close`).

    Raises (from :meth:`poll`, caught and logged by the daemon thread):
        KafkaException: a request failed; the next poll asks again.
    """

    def __init__(self, plan: "TopologyPlan", topology: "Topology", committed: Callable[[list[TP]], dict[TP, int]],
                 ends: Callable[[list[TP]], dict[TP, int]], close_clients: Callable[[], None] = lambda: None) -> None:
        self._committed = committed
        self._close_clients = close_clients
        self._ends = ends
        self.partitions = {t: n for t, n in plan.partitions.items()}
        self.sources = {sid: ts for sid, ts in plan.sources.items() if sid in plan.task_counts}
        writers, dynamic = writers_of(plan, topology)
        self.writers = writers
        #: topics whose end will be known (empty with a dynamic sink: see the module docstring)
        self.covered: frozenset[str] = frozenset() if dynamic else frozenset(covered_topics(self.sources, writers))
        #: ``{partition: its last offset + 1}``, once known (read by other threads: only grows)
        self.final: dict[TP, int] = {}
        #: the sub-topologies that processed and committed their whole input
        self.done: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error: str | None = None

    @classmethod
    def of(cls, plan: "TopologyPlan", topology: "Topology", reader_config: dict[str, Any], group_id: str) -> "BacklogEnds":
        """One reading the group's committed offsets with a consumer that never joins it and
        the end offsets with the Admin API (``reader_config``: a consumer's librdkafka config)."""
        from .committed_offsets import CommittedOffsetsReader
        from .task_timeout import ListOffsets

        reader, offsets = CommittedOffsetsReader(reader_config, group_id), ListOffsets(reader_config)

        def committed(tps: list[TP]) -> dict[TP, int]:
            return {(r.topic, r.partition): r.offset for r in reader.read(tps, REQUEST_S) if r.offset >= 0}

        return cls(plan, topology, committed, lambda tps: offsets.offsets(tps, "latest", REQUEST_S), reader.close)

    # -- what readiness and the committer ask
    def covers(self, topic: str) -> bool:
        """Whether the end of ``topic`` will be known."""
        return topic in self.covered

    def final_end(self, tp: TP) -> int | None:
        """The offset after the last record ``tp`` will ever hold; None while unknown."""
        return self.final.get(tp)

    def finished(self, tps: Iterable[TP], position: Callable[[TP, int], int | None], committed: dict[TP, int]) -> bool:
        """Whether every one of ``tps`` (a task's partitions) has a known end, was consumed
        to it (``position(tp, end)``: the next offset to process, None if unknown) and one
        of them is not committed there yet: the task's thread should commit now (a writer
        is done once its offsets are committed at the ends)."""
        uncommitted = False
        for tp in tps:
            end = self.final.get(tp)
            if end is None:
                return False
            if end == 0 or committed.get(tp, -1) >= end:
                continue
            pos = position(tp, end)
            if pos is None or pos < end:
                return False
            uncommitted = True
        return uncommitted

    # -- the polls
    def poll(self) -> bool:
        """One round: the user sources' ends the first time, then every writer found done
        and every topic whose writers are all done, until nothing changes. True once every
        covered topic's end is known.

        Raises:
            KafkaException: a request failed (the ends found so far are kept).
        """
        topics = sorted(self.covered)
        if not self.final:
            initial = [(t, p) for t in topics if t not in self.writers for p in range(self.partitions[t])]
            self.final.update(self._ends(initial) if initial else {})
        changed = True
        while changed:
            changed = False
            for sid, srcs in sorted(self.sources.items()):
                if sid in self.done or not any(sid in self.writers.get(t, ()) for t in topics):
                    continue
                tps = [(t, p) for t in srcs for p in range(self.partitions[t])]
                if any(tp not in self.final for tp in tps):
                    continue
                need = [tp for tp in tps if self.final[tp] > 0]
                committed = self._committed(need) if need else {}
                if all(committed.get(tp, -1) >= self.final[tp] for tp in need):
                    self.done.add(sid)
                    changed = True
            for t in topics:
                if t in self.writers and (t, 0) not in self.final and self.writers[t] <= self.done:
                    self.final.update(self._ends([(t, p) for p in range(self.partitions[t])]))
                    changed = True
        return all((t, p) in self.final for t in topics for p in range(self.partitions[t]))

    def start(self, name: str) -> None:
        """Poll every ``POLL_S`` on a daemon thread until every covered end is known or
        :meth:`close`; a failed request is logged (INFO, once per distinct error) and asked
        again."""
        if not self.covered:
            log.info("%s: backlog.inputs.complete: no topic's end can be known (a sink with a topic extractor)", name)
            return
        self._thread = threading.Thread(target=self._run, name=f"{name}-backlog-ends", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.poll():
                    log.debug("backlog ends all known: %d partitions", len(self.final))
                    return
            except KafkaException as exc:
                if str(exc) != self._last_error:
                    self._last_error = str(exc)
                    log.info("backlog ends: a request failed, asking again in %.1f s: %s", POLL_S, exc)
            self._stop.wait(POLL_S)

    def close(self) -> None:
        """Stop polling and close the clients (errors while closing are logged, ERROR)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(REQUEST_S * 2)
            if self._thread.is_alive():
                log.warning("backlog ends: the poll did not stop within %.0f s: its clients are left open", REQUEST_S * 2)
                return
        try:
            self._close_clients()
        except KafkaException:
            log.exception("backlog ends: closing the committed-offsets reader failed")
