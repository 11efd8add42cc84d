"""One embedded KRaft node: a child JVM that is broker and controller, and its work folder.

:class:`KRaftNode` owns one node's work folder (``server.properties``, ``log4j2.properties``,
the log dir ``data/`` and ``broker.log``), its JVM and that JVM's faults. Its lifecycle is
public, so that :class:`~speed_layer.runtime.broker.EmbeddedKafka` (one node that is its own
quorum) and :class:`~speed_layer.runtime.cluster.EmbeddedKafkaCluster` (several nodes, one
quorum) drive it the same way, in this order:

1. :meth:`~KRaftNode.prepare_work_dir`: the given folder, or a temporary one;
2. :meth:`~KRaftNode.configure`: ports and :class:`~speed_layer.runtime.kraft_config.Quorum`
   -> ``server.properties`` over an empty log dir;
3. :meth:`~KRaftNode.format_log_dir`: ``StorageTool format`` with the quorum's cluster id;
4. :meth:`~KRaftNode.launch`: ``kafka.Kafka`` in a child JVM;
5. :meth:`~KRaftNode.wait_ready`: until the node answers a metadata request listing the
   given brokers; the node is started then (:attr:`~KRaftNode.bootstrap_servers`).

then :meth:`~KRaftNode.stop`, or the faults :meth:`~KRaftNode.kill`,
:meth:`~KRaftNode.terminate`, :meth:`~KRaftNode.pause`, :meth:`~KRaftNode.resume` and
:meth:`~KRaftNode.restart` (same ports and data, no format).

This is the split of Kafka's test harness: a ``TestKitNode`` is one node's id, folders and
property overrides, and ``KafkaClusterTestKit`` formats each node (``formatNode``), starts
them, waits for them (``waitForReadyBrokers``) and closes them; the per-node steps are
here, the per-cluster ones in the two classes above. Steps 1-5 take no lock: the owner's
``start`` runs them, under its own lock if it has one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Set
from pathlib import Path

from speed_layer.runtime.kraft_config import LOG4J2, Quorum, server_properties
from speed_layer.runtime.kraft_errors import BrokerStartError
from speed_layer.runtime.kraft_jvm import jvm_command, kafka_classpath, launch_jvm, storage_format
from speed_layer.runtime.paths import kafka_jars_dir

__all__ = ["KRaftNode"]


def _tail(path: Path, max_lines: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-max_lines:])


class KRaftNode:
    """One Apache Kafka 4.1 KRaft node (``process.roles=broker,controller``) in a child JVM.

    ``work_dir`` receives ``server.properties``, the log dir (``data/``) and ``broker.log``;
    when ``None`` a temporary folder is used and removed by :meth:`stop`. ``heap`` is the
    JVM's ``-Xmx`` (e.g. ``512m``); ``jars_dir`` defaults to ``<duet_home>/jars/kafka``;
    ``extra_properties`` are added to ``server.properties`` last; ``java`` is the ``java``
    command; ``node_id`` is KRaft's ``node.id``.
    """

    def __init__(
        self,
        work_dir: Path | None = None,
        *,
        heap: str = "512m",
        jars_dir: Path | None = None,
        extra_properties: dict[str, str] | None = None,
        java: str = "java",
        node_id: int = 1,
    ) -> None:
        self.node_id = node_id
        self._work_dir_arg = Path(work_dir) if work_dir is not None else None
        self._work_dir: Path | None = None
        self._owns_work_dir = False
        self.heap = heap
        self.jars_dir = Path(jars_dir) if jars_dir is not None else kafka_jars_dir()
        self.extra_properties = dict(extra_properties or {})
        self.java = java
        self._proc: subprocess.Popen[bytes] | None = None
        self._bootstrap: str | None = None
        self._lock = threading.Lock()
        self._ports: tuple[int, ...] = ()
        self._launcher_done: threading.Event | None = None
        self._cluster_id = ""
        #: Exit code of the last stopped JVM (143 after SIGTERM, -9 when it had to be killed).
        self.last_exit_code: int | None = None

    # ------------------------------------------------------------------ properties
    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker.

        Raises:
            RuntimeError: the node is not started.
        """
        if self._bootstrap is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._bootstrap

    @property
    def work_dir(self) -> Path | None:
        """The folder with ``server.properties``, ``data/`` and ``broker.log`` (once started)."""
        return self._work_dir

    @property
    def log_path(self) -> Path | None:
        """``<work_dir>/broker.log`` (once started)."""
        return self._work_dir / "broker.log" if self._work_dir else None

    @property
    def pid(self) -> int | None:
        """PID of the broker's JVM while it runs."""
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        """True while the broker's JVM is alive."""
        return self._proc is not None and self._proc.poll() is None

    def classpath(self) -> str:
        """The classpath of :attr:`jars_dir`.

        Raises:
            KafkaJarsMissingError: the Kafka jars are missing (run ``make setup``).
            BrokerStartError: :attr:`java` is not found.
        """
        return kafka_classpath(self.jars_dir, self.java)

    # ------------------------------------------------------------------ lifecycle
    def prepare_work_dir(self) -> Path:
        """Step 1: create the given work folder, or a temporary one (removed by :meth:`stop`)."""
        if self._work_dir_arg is not None:
            self._work_dir = self._work_dir_arg
            self._work_dir.mkdir(parents=True, exist_ok=True)
            self._owns_work_dir = False
        else:
            self._work_dir = Path(tempfile.mkdtemp(prefix="duet-kafka-"))
            self._owns_work_dir = True
        return self._work_dir

    def configure(self, port: int, controller_port: int, quorum: Quorum) -> None:
        """Step 2: write ``log4j2.properties`` and ``server.properties`` (client listener on
        ``port``, controller listener on ``controller_port``, member of ``quorum``) for a
        fresh, empty log dir: an existing ``data/`` is removed (ports change every start)."""
        assert self._work_dir is not None, "prepare_work_dir() first"
        work = self._work_dir
        data_dir = work / "data"
        if data_dir.exists():
            shutil.rmtree(data_dir)  # a fresh cluster each start (ports change)
        (work / "log4j2.properties").write_text(LOG4J2)
        self._ports = (port, controller_port)
        self._cluster_id = quorum.cluster_id
        props = server_properties(self.node_id, port, controller_port, data_dir, quorum, self.extra_properties)
        (work / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def format_log_dir(self, classpath: str, deadline: float) -> None:
        """Step 3: format the KRaft log dir with the configured cluster id; ``deadline`` is a
        ``time.monotonic()`` value (the tool gets at least 5 s).

        Raises:
            BrokerStartError: the format tool failed or timed out (its output in the message
                and in ``broker.log``).
        """
        assert self._work_dir is not None, "configure() first"
        work = self._work_dir
        try:
            fmt = storage_format(self.java, classpath, work / "log4j2.properties", work / "server.properties",
                                 self._cluster_id, deadline)
        except subprocess.TimeoutExpired as exc:
            raise BrokerStartError("formatting the KRaft log dir timed out") from exc
        if fmt.returncode != 0:
            out = fmt.stdout.decode(errors="replace")
            (work / "broker.log").write_text(out)
            raise BrokerStartError(f"formatting the KRaft log dir failed:\n{out[-4000:]}")

    def launch(self, classpath: str) -> None:
        """Step 4: start ``kafka.Kafka`` on the configured ``server.properties``, its output
        appended to ``broker.log``; the JVM dies with this process.

        Raises:
            BrokerStartError: ``java`` could not be started.
        """
        assert self._work_dir is not None, "configure() first"
        work = self._work_dir
        self._proc, self._launcher_done = launch_jvm(
            [*jvm_command(self.java, classpath, work / "log4j2.properties", self.heap),
             "kafka.Kafka", str(work / "server.properties")],
            work, work / "broker.log",
        )

    def wait_ready(self, deadline: float, brokers: Set[int]) -> str:
        """Step 5: wait until the node's client port answers a metadata request listing every
        node of ``brokers`` (a restarted node of a cluster is listed once the controller
        unfenced it); the node is started then. Returns :attr:`bootstrap_servers`.

        Raises:
            BrokerStartError: the JVM exited or ``deadline`` (``time.monotonic()``) passed;
                the message holds the tail of ``broker.log``.
        """
        assert self._proc is not None and self._work_dir is not None, "launch() first"
        proc = self._proc
        bootstrap = f"127.0.0.1:{self._ports[0]}"
        log_path = self._work_dir / "broker.log"

        def fail(why: str) -> BrokerStartError:
            return BrokerStartError(f"{why}; tail of {log_path}:\n{_tail(log_path)}")

        # First the listener (quiet), then a real metadata round trip.
        while True:
            if proc.poll() is not None:
                raise fail(f"the broker exited with code {proc.returncode}")
            if time.monotonic() > deadline:
                raise fail(f"the broker did not open {bootstrap} in time")
            try:
                with socket.create_connection(("127.0.0.1", self._ports[0]), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.1)

        from .admin import admin_client  # local: keep import of this module light

        admin = admin_client(bootstrap, {"socket.connection.setup.timeout.ms": 2000})
        while True:
            if proc.poll() is not None:
                raise fail(f"the broker exited with code {proc.returncode}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise fail(f"the broker at {bootstrap} did not answer in time")
            try:
                md = admin.list_topics(timeout=min(2.0, max(0.1, remaining)))
                if brokers <= set(md.brokers):
                    self._bootstrap = bootstrap
                    return bootstrap
            except Exception:  # KafkaException: not ready yet
                pass
            time.sleep(0.1)

    def stop(self, timeout_s: float = 20) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after ``timeout_s`` seconds; idempotent.

        Removes the work folder when it was a temporary one.
        """
        with self._lock:
            if self._proc is not None:
                proc = self._proc
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=timeout_s)
                    except subprocess.TimeoutExpired:
                        self._kill()
                self.last_exit_code = proc.returncode
                self._proc = None
            self._release_launcher()
            self._bootstrap = None
            self._cleanup_work_dir()
            atexit.unregister(self.stop)

    # ------------------------------------------------------------------ faults
    def pause(self) -> None:
        """SIGSTOP the broker JVM (it holds its sockets but answers nothing).

        Raises:
            RuntimeError: the JVM is not running.
        """
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused broker.

        Raises:
            RuntimeError: the JVM is not running.
        """
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the broker JVM, keeping its data and ports for :meth:`restart`."""
        with self._lock:
            self._kill()

    def terminate(self, timeout_s: float = 30) -> None:
        """Shut the broker down cleanly (SIGTERM: a controlled shutdown that hands its
        leaderships over), keeping its data and ports for :meth:`restart`, as one step of a
        rolling restart; SIGKILL after ``timeout_s`` seconds."""
        with self._lock:
            self._end(signal.SIGTERM, timeout_s)
            self._kill()

    def restart(self, timeout_s: float = 60) -> str:
        """Start the broker again on the same ports and data (after :meth:`kill` or
        :meth:`terminate`), without formatting: the topics, offsets and transactions
        survive, as after a machine reboot. Returns :attr:`bootstrap_servers`.

        Raises:
            BrokerStartError: it is still running, or does not answer within ``timeout_s``
                seconds.
        """
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                raise BrokerStartError("the broker is running: kill() it first")
            assert self._work_dir is not None and self._bootstrap is not None, "never started"
            self.launch(self.classpath())
            return self.wait_ready(time.monotonic() + timeout_s, {self.node_id})

    def _signal(self, sig: int) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError(f"{type(self).__name__} is not running")
        os.kill(self._proc.pid, sig)

    def _end(self, sig: int, timeout_s: float) -> None:
        """Send ``sig`` to a running JVM and wait up to ``timeout_s`` seconds for its exit."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout_s)

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._end(signal.SIGKILL, 10)
        self.last_exit_code = proc.returncode
        self._proc = None
        self._release_launcher()

    def _release_launcher(self) -> None:
        if self._launcher_done is not None:
            self._launcher_done.set()
            self._launcher_done = None

    def _cleanup_work_dir(self) -> None:
        if self._owns_work_dir and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None
            self._owns_work_dir = False

    def __repr__(self) -> str:
        state = self._bootstrap if self._bootstrap else "stopped"
        return f"{type(self).__name__}({state}, pid={self.pid})"
