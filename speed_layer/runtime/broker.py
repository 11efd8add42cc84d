"""An embedded Apache Kafka node (KRaft broker + controller) started from the jars.

``make setup`` copies Apache Kafka 4.1.1's jars into ``<duet_home>/jars/kafka``;
:class:`EmbeddedKafka` formats a KRaft log dir in a work folder, starts ``kafka.Kafka`` on
free loopback ports and waits until the broker answers a metadata request.
:func:`kafka_cluster` uses ``$KAFKA_BOOTSTRAP_SERVERS`` instead when it is set.

The broker is configured for a single node holding 2013 data: replication factors 1,
``log.retention.ms=-1``, no topic auto-creation, ``group.initial.rebalance.delay.ms=0``.
:class:`~speed_layer.runtime.cluster.EmbeddedKafkaCluster` runs several such nodes as one
cluster (replication factor 3, ``min.insync.replicas`` 2).

The parts, as Kafka's test harness splits them (``TestKitNode`` for a node,
``KafkaClusterTestKit`` for the cluster that formats, starts and waits for its nodes):

* :mod:`~speed_layer.runtime.kraft_node`: :class:`~speed_layer.runtime.kraft_node.KRaftNode`,
  one JVM's work folder, config, format, launch, readiness, stop and faults;
* :mod:`~speed_layer.runtime.kraft_config`: the quorum, ports and ``server.properties``;
* :mod:`~speed_layer.runtime.kraft_jvm`: the jars, the JVM command line and its launch;
* :mod:`~speed_layer.runtime.kraft_errors`: :class:`BrokerStartError`,
  :class:`KafkaJarsMissingError`;
* this module: :class:`EmbeddedKafka`, a node that is its own one-node quorum, and
  :func:`kafka_cluster`; :mod:`~speed_layer.runtime.cluster`: n nodes, one quorum.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from speed_layer.runtime.kraft_config import Quorum, free_ports, kafka_uuid, port_in_use
from speed_layer.runtime.kraft_errors import BrokerStartError, KafkaJarsMissingError
from speed_layer.runtime.kraft_jvm import BOOTSTRAP_ENV
from speed_layer.runtime.kraft_node import KRaftNode

__all__ = ["EmbeddedKafka", "BrokerStartError", "KafkaJarsMissingError", "kafka_cluster"]


class EmbeddedKafka(KRaftNode):
    """A single-node Apache Kafka 4.1 KRaft broker+controller in a child JVM.

    Example::

        with EmbeddedKafka() as kafka:
            producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})

    ``work_dir`` receives ``server.properties``, the log dir (``data/``) and ``broker.log``;
    when ``None`` a temporary folder is used and removed by :meth:`stop`. ``heap`` is the
    JVM's ``-Xmx``; ``extra_properties`` are added to ``server.properties`` last. The
    properties, :meth:`stop` and the faults (:meth:`kill`, :meth:`terminate`,
    :meth:`pause`, :meth:`resume`, :meth:`restart`) are those of
    :class:`~speed_layer.runtime.kraft_node.KRaftNode`; :meth:`start` makes the node its
    own quorum.
    """

    def start(self, timeout_s: float = 60) -> str:
        """Format a log dir, start the broker and wait until it answers; returns bootstrap servers.

        Picks two free loopback ports (client, controller) and a fresh cluster id; when
        another process takes a port first, retries with new ports (3 attempts in all).
        Returns at once when already started.

        Raises:
            KafkaJarsMissingError: the jars are missing (run ``make setup``).
            BrokerStartError: the broker did not answer within ``timeout_s`` seconds or
                exited (the message holds the tail of ``broker.log``); its JVM is killed and a
                temporary work folder removed.
        """
        with self._lock:
            if self._proc is not None:
                return self.bootstrap_servers
            classpath = self.classpath()
            self.prepare_work_dir()
            deadline = time.monotonic() + timeout_s
            attempts = 3  # a picked port may be taken by someone else before the JVM binds it
            for attempt in range(attempts):
                try:
                    self._start_once(classpath, deadline)
                    break
                except BrokerStartError as exc:
                    self._kill()
                    port_race = "Address already in use" in str(exc) or any(port_in_use(p) for p in self._ports)
                    if not port_race or attempt == attempts - 1 or time.monotonic() > deadline:
                        self._cleanup_work_dir()
                        raise
                except BaseException:  # e.g. KeyboardInterrupt: never leave a JVM behind
                    self._kill()
                    self._cleanup_work_dir()
                    raise
            atexit.register(self.stop)
            return self.bootstrap_servers

    def _start_once(self, classpath: str, deadline: float) -> None:
        """Steps 2-5 of :class:`~speed_layer.runtime.kraft_node.KRaftNode` on new ports."""
        port, controller_port = free_ports(2)
        self.configure(port, controller_port, Quorum({self.node_id: controller_port}, kafka_uuid()))
        self.format_log_dir(classpath, deadline)
        self.launch(classpath)
        self.wait_ready(deadline, {self.node_id})

    def __enter__(self) -> EmbeddedKafka:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def kafka_cluster(
    work_dir: Path | None = None, *, timeout_s: float = 60, heap: str = "512m"
) -> Iterator[str]:
    """Yield bootstrap servers: ``$KAFKA_BOOTSTRAP_SERVERS`` when set, else an embedded broker.

    The embedded broker (if any) is stopped on exit; ``timeout_s`` (seconds) bounds its start.

    Raises:
        KafkaJarsMissingError: no external cluster and the jars are missing.
        BrokerStartError: the embedded broker did not start within ``timeout_s``.
    """
    external = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if external:
        yield external
        return
    broker = EmbeddedKafka(work_dir, heap=heap)
    broker.start(timeout_s=timeout_s)
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()
