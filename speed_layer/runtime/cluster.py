"""An embedded multi-broker Apache Kafka cluster: N KRaft nodes on loopback, for fault tests.

Each node is an :class:`~speed_layer.runtime.broker.EmbeddedKafka` running as broker and
controller (KRaft combined mode) in its own JVM and folder; the N controllers form the
quorum (``controller.quorum.voters``), so the cluster keeps a controller while a majority
of nodes run. As Kafka's ``KafkaClusterTestKit`` does with its ``TestKitNodes``, the cluster
picks the ports and the cluster id (one :class:`~speed_layer.runtime.kraft_config.Quorum`),
then drives each node through the public lifecycle of
:class:`~speed_layer.runtime.kraft_node.KRaftNode` (configure, format, launch, wait until
ready), formatting and waiting in parallel, and stops them all at once. With three or more
nodes every topic, the consumer offsets and the transaction log get replication factor 3
and ``min.insync.replicas`` 2, as production clusters are run; with one or two, the factor
is the node count.

Faults act on one node at a time: :meth:`EmbeddedKafkaCluster.kill` (SIGKILL, keeping its
data and ports), :meth:`~EmbeddedKafkaCluster.restart`, :meth:`~EmbeddedKafkaCluster.pause`
(SIGSTOP) and :meth:`~EmbeddedKafkaCluster.resume`. :meth:`~EmbeddedKafkaCluster.leader_of`
names the leader of a partition and :meth:`~EmbeddedKafkaCluster.wait_in_sync` waits until
every replica is back in sync, as an operator does between two steps of a rolling restart.

Example::

    with EmbeddedKafkaCluster(3) as cluster:
        victim = cluster.leader_of("orders", 0)
        cluster.kill(victim)
        ...
        cluster.restart(victim)
        cluster.wait_in_sync()
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from speed_layer.runtime.broker import EmbeddedKafka
from speed_layer.runtime.kraft_config import Quorum, free_ports, kafka_uuid

__all__ = ["EmbeddedKafkaCluster"]

#: The controller quorum's timeouts of a cluster of several nodes, above KRaft's defaults
#: (fetch 2,000 ms, election 1,000 ms): on a shared 2-core machine running three JVMs and
#: the clients under test, a controller event alone was measured at 2.1-2.9 s
#: ("Exceptionally slow controller event"), so the followers' fetches timed out and the
#: quorum elected a new active controller six times in 90 s; a restarted node's broker then
#: met ``NotControllerException`` on every heartbeat and was unfenced 111 s after its start
#: (13 s without the churn). ``extra_properties`` override these.
QUORUM_TIMEOUTS = {
    "controller.quorum.fetch.timeout.ms": "8000",
    "controller.quorum.election.timeout.ms": "3000",
}

#: librdkafka's logs of the cluster's admin clients (a stopped node is expected to refuse).
_log = logging.getLogger(__name__)


class EmbeddedKafkaCluster:
    """``size`` KRaft nodes (node ids 1..size) on loopback, each broker and controller.

    ``work_dir`` receives one folder per node (``node-<id>/``, as
    :class:`~speed_layer.runtime.broker.EmbeddedKafka`'s work folder); when ``None`` a
    temporary folder is used and removed by :meth:`stop`. ``heap`` is each JVM's ``-Xmx``.
    ``extra_properties`` are added to every node's ``server.properties``.
    """

    def __init__(
        self,
        size: int = 3,
        work_dir: Path | None = None,
        *,
        heap: str = "384m",
        jars_dir: Path | None = None,
        extra_properties: dict[str, str] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self._owns_work_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="duet-cluster-"))
        properties = {**(QUORUM_TIMEOUTS if size > 1 else {}), **(extra_properties or {})}
        self.nodes: dict[int, EmbeddedKafka] = {
            n: EmbeddedKafka(self.work_dir / f"node-{n}", heap=heap, jars_dir=jars_dir,
                             extra_properties=properties, node_id=n)
            for n in range(1, size + 1)
        }
        self._bootstrap: str | None = None

    # ------------------------------------------------------------------ properties
    @property
    def bootstrap_servers(self) -> str:
        """Every node's ``127.0.0.1:<port>``, comma-separated (raises if not started)."""
        if self._bootstrap is None:
            raise RuntimeError("EmbeddedKafkaCluster is not started")
        return self._bootstrap

    def node(self, node_id: int) -> EmbeddedKafka:
        """The node with this id (1..size). Raises ``KeyError`` for another id."""
        return self.nodes[node_id]

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 120) -> str:
        """Format every node's log dir with one cluster id, start all nodes and wait until each
        answers a metadata request listing all of them; returns the bootstrap servers.

        Raises:
            KafkaJarsMissingError: the Kafka jars are missing (run ``make setup``).
            BrokerStartError: a node did not start within ``timeout_s`` seconds (the message
                holds the tail of its log); every node is stopped then.
        """
        if self._bootstrap is not None:
            return self._bootstrap
        deadline = time.monotonic() + timeout_s
        nodes = list(self.nodes.values())
        classpath = nodes[0].classpath()
        ports = free_ports(2 * self.size)
        quorum = Quorum({n.node_id: ports[2 * i + 1] for i, n in enumerate(nodes)}, kafka_uuid())
        try:
            for i, node in enumerate(nodes):
                node.prepare_work_dir()
                node.configure(ports[2 * i], ports[2 * i + 1], quorum)
            self._each(nodes, lambda node: node.format_log_dir(classpath, deadline))
            for node in nodes:
                node.launch(classpath)
            ids = set(self.nodes)
            self._each(nodes, lambda node: node.wait_ready(deadline, ids))
        except BaseException:
            self._stop_nodes(timeout_s=5)
            raise
        self._bootstrap = ",".join(node.bootstrap_servers for node in nodes)
        atexit.register(self.stop)
        return self._bootstrap

    @staticmethod
    def _each(nodes: list[EmbeddedKafka], step: Callable[[EmbeddedKafka], object]) -> None:
        """Run ``step(node)`` for every node in parallel threads; re-raise the first error."""
        errors: list[BaseException] = []

        def run(node: EmbeddedKafka) -> None:
            try:
                step(node)
            except BaseException as exc:  # re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(n,), name=f"duet-cluster-{n.node_id}") for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def stop(self, timeout_s: float = 15) -> None:
        """Stop every node at once (SIGTERM, SIGKILL after ``timeout_s`` seconds); idempotent.

        All nodes are signalled together: stopped one by one, the last ones would wait for a
        controller quorum that is already gone. Removes the work folder when it was temporary.
        """
        self._stop_nodes(timeout_s)
        self._bootstrap = None
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        atexit.unregister(self.stop)

    def _stop_nodes(self, timeout_s: float) -> None:
        for node in self.nodes.values():
            with contextlib.suppress(RuntimeError):
                node.resume()  # a paused JVM ignores SIGTERM until continued
        self._each(list(self.nodes.values()), lambda node: node.stop(timeout_s=timeout_s))

    # ------------------------------------------------------------------ faults
    def kill(self, node_id: int) -> None:
        """SIGKILL one node's JVM, keeping its data and ports for :meth:`restart`."""
        self.node(node_id).kill()

    def terminate(self, node_id: int, timeout_s: float = 30) -> None:
        """Shut one node down cleanly (SIGTERM, controlled shutdown), keeping its data and
        ports for :meth:`restart`: one step of a rolling restart."""
        self.node(node_id).terminate(timeout_s)

    def restart(self, node_id: int, timeout_s: float = 90) -> None:
        """Start a killed node again on its data and ports; returns once the cluster lists it.

        Raises:
            BrokerStartError: it is still running, or was not listed within ``timeout_s``.
        """
        self.node(node_id).restart(timeout_s=timeout_s)

    def pause(self, node_id: int) -> None:
        """SIGSTOP one node (it keeps its sockets open and answers nothing)."""
        self.node(node_id).pause()

    def resume(self, node_id: int) -> None:
        """SIGCONT a paused node."""
        self.node(node_id).resume()

    # ------------------------------------------------------------------ metadata
    def _admin(self) -> object:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers,
                            "socket.connection.setup.timeout.ms": 2000, "logger": _log})

    def leader_of(self, topic: str, partition: int, timeout_s: float = 30) -> int:
        """Node id of the leader of ``topic``'s ``partition``.

        Raises:
            TimeoutError: no leader was known within ``timeout_s`` seconds.
        """
        admin = self._admin()

        def leader() -> int | None:
            md = admin.list_topics(topic, timeout=5)  # type: ignore[attr-defined]
            node = md.topics[topic].partitions[partition].leader
            return int(node) if node >= 0 else None

        return _poll(leader, timeout_s, f"no leader for {topic}-{partition}")

    def coordinator_of(self, group_id: str, timeout_s: float = 30) -> int:
        """Node id of the group coordinator of ``group_id`` (the consumer group's broker).

        Raises:
            TimeoutError: it was not known within ``timeout_s`` seconds.
        """
        admin = self._admin()

        def coordinator() -> int:
            futures = admin.describe_consumer_groups([group_id], request_timeout=5)  # type: ignore[attr-defined]
            return int(futures[group_id].result(timeout=10).coordinator.id)

        return _poll(coordinator, timeout_s, f"no coordinator for group {group_id}")

    def under_replicated(self) -> list[str]:
        """``topic-partition`` of every partition whose in-sync replicas are fewer than its
        replicas (empty when all are in sync)."""
        md = self._admin().list_topics(timeout=10)  # type: ignore[attr-defined]
        return [f"{t}-{p}" for t, tmd in md.topics.items() for p, pmd in tmd.partitions.items()
                if len(pmd.isrs) < len(pmd.replicas)]

    def wait_in_sync(self, timeout_s: float = 120) -> None:
        """Wait until no partition is under-replicated (every replica caught up), seen in
        three metadata answers in a row: each may come from another node, and a node's
        metadata cache learns an ISR change from the controller a moment after another's.

        Raises:
            TimeoutError: some still are after ``timeout_s`` seconds (they are named).
        """
        deadline = time.monotonic() + timeout_s
        lagging: list[str] = ["?"]
        in_sync = 0
        while True:
            with contextlib.suppress(Exception):  # a metadata error counts as not yet
                lagging = self.under_replicated()
                in_sync = 0 if lagging else in_sync + 1
                if in_sync >= 3:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"under-replicated after {timeout_s} s: {', '.join(lagging[:10])}")
            time.sleep(0.5)

    def __enter__(self) -> EmbeddedKafkaCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedKafkaCluster({self.size} nodes, {self._bootstrap or 'stopped'})"


def _poll(ask: Callable[[], int | None], timeout_s: float, failure: str) -> int:
    """``ask()`` every 0.2 s until it answers (an error or None counts as not yet: leaders
    and coordinators move while nodes die).

    Raises:
        TimeoutError: ``failure``, after ``timeout_s`` seconds without an answer.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):  # KafkaException, TimeoutError while it moves
            answer = ask()
            if answer is not None:
                return answer
        if time.monotonic() > deadline:
            raise TimeoutError(f"{failure} within {timeout_s} s")
        time.sleep(0.2)
