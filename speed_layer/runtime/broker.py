"""An embedded Apache Kafka node (KRaft broker + controller) started from the jars.

``make setup`` copies Apache Kafka 4.1.1's jars into ``<duet_home>/jars/kafka``;
:class:`EmbeddedKafka` formats a KRaft log dir in a work folder, starts ``kafka.Kafka`` on
free loopback ports and waits until the broker answers a metadata request.
:func:`kafka_cluster` uses ``$KAFKA_BOOTSTRAP_SERVERS`` instead when it is set.

The broker is configured for a single node holding 2013 data: replication factors 1,
``log.retention.ms=-1``, no topic auto-creation, ``group.initial.rebalance.delay.ms=0``.
:class:`~speed_layer.runtime.cluster.EmbeddedKafkaCluster` runs several such nodes as one
cluster (replication factor 3, ``min.insync.replicas`` 2).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from speed_layer.runtime.paths import kafka_jars_dir

__all__ = ["EmbeddedKafka", "BrokerStartError", "KafkaJarsMissingError", "kafka_cluster"]

#: Environment variable naming an external cluster; when set no broker is started.
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
_PR_SET_PDEATHSIG = 1

_LOG4J2 = """\
# Written by duet's EmbeddedKafka: keep the embedded broker quiet.
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = STDOUT
# One line when the server is up or down, handy when reading broker.log.
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""


class BrokerStartError(RuntimeError):
    """The embedded broker did not start (the message holds the tail of its log)."""


class KafkaJarsMissingError(BrokerStartError):
    """The Kafka jars are not in ``<duet_home>/jars/kafka``: run ``make setup``."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (each may be taken by someone else before use)."""
    ports: list[int] = []
    while len(ports) < n:
        port = _free_port()
        if port not in ports:
            ports.append(port)
    return ports


@dataclass(frozen=True)
class _Quorum:
    """The KRaft controller quorum a node belongs to: node id -> controller port, cluster id."""

    controller_ports: dict[int, int]
    cluster_id: str

    @property
    def voters(self) -> str:
        """``controller.quorum.voters``: ``1@127.0.0.1:<port>,2@...``."""
        return ",".join(f"{n}@127.0.0.1:{p}" for n, p in sorted(self.controller_ports.items()))

    @property
    def replication_factor(self) -> int:
        return min(3, len(self.controller_ports))

    @property
    def min_insync_replicas(self) -> int:
        return min(2, len(self.controller_ports))


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _kafka_uuid() -> str:
    """A random Kafka ``Uuid`` string (what ``StorageTool random-uuid`` prints).

    Kafka prints 16 random bytes as URL-safe base64 without padding and never hands out an
    id whose string starts with ``-``; generating it here saves one JVM start.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _child_setup(parent_pid: int) -> Callable[[], None]:
    """``preexec_fn`` for the JVM: default signal handlers, and SIGTERM when we die."""

    def setup() -> None:  # runs in the child between fork and exec
        # Background processes may ignore or block signals: the JVM would inherit that.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        if sys.platform.startswith("linux"):
            # The kernel sends SIGTERM to the broker when the thread that started it ends
            # (that thread lives until stop(), so: when this process dies, even by SIGKILL).
            with contextlib.suppress(Exception):
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent_pid:  # the parent died before prctl
                os._exit(1)

    return setup


def _tail(path: Path, max_lines: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-max_lines:])


class EmbeddedKafka:
    """A single-node Apache Kafka 4.1 KRaft broker+controller in a child JVM.

    Example::

        with EmbeddedKafka() as kafka:
            producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})

    ``work_dir`` receives ``server.properties``, the log dir (``data/``) and ``broker.log``;
    when ``None`` a temporary folder is used and removed by :meth:`stop`.
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
        """``127.0.0.1:<port>`` of the running broker (raises if not started)."""
        if self._bootstrap is None:
            raise RuntimeError("EmbeddedKafka is not started")
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

    # ------------------------------------------------------------------ lifecycle
    def _classpath(self) -> str:
        jars = sorted(self.jars_dir.glob("*.jar")) if self.jars_dir.is_dir() else []
        if not any(j.name.startswith("kafka_2.13-") for j in jars):
            raise KafkaJarsMissingError(
                f"Apache Kafka's jars are missing from {self.jars_dir}: run `make setup` "
                "(it copies them with Maven from jvm/kafka/pom.xml), or set "
                f"${BOOTSTRAP_ENV} to use an existing cluster."
            )
        if shutil.which(self.java) is None and not Path(self.java).is_file():
            raise BrokerStartError(f"`{self.java}` not found: the embedded broker needs Java 17+")
        return str(self.jars_dir / "*")

    def _jvm(self, classpath: str, log4j: Path, heap: str) -> list[str]:
        return [
            self.java,
            f"-Xmx{heap}",
            # C1 only: the C2 JIT spent 7-8 s of CPU compiling during a fresh broker's first
            # flagship run (23.8 s of the broker's 0.07 ms per flight; the stream thread is
            # on the other core of two), and a broker of a test or of `duet run` lives
            # minutes. With C1 alone: 8.6 s, the request handlers no slower (5.7 s vs 6.8 s).
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath,
        ]

    def _properties(self, port: int, controller_port: int, data_dir: Path, quorum: _Quorum) -> dict[str, str]:
        replicas, min_isr = str(quorum.replication_factor), str(quorum.min_insync_replicas)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": quorum.voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data_dir),
            # One node: replication factor 1; three or more: 3 with min.insync.replicas 2.
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "8",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            # Fast groups in tests; clients may use short session timeouts.
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            # 2013 data must never be deleted by time retention.
            "log.retention.ms": "-1",
            "log.retention.bytes": "-1",
            # Roll segments by size only. A segment's time-based roll compares record
            # (event) timestamps: it rolls once an appended batch is log.roll.ms (7 days)
            # past the segment's first (KIP-33). A backfill of a year of 2013 flights thus
            # rolled a segment per week of event time in every partition (~1,000 rolls and
            # compactions per flagship run): the broker's CPU per flight fell from 0.036 to
            # 0.020 ms without them. 1,000 years, in ms.
            "log.roll.ms": str(1000 * 365 * 24 * 3600 * 1000),
            # Small machine: few threads, a small cleaner buffer (compacted changelogs).
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "4",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
            "log.cleaner.io.buffer.size": str(1024 * 1024),
            "message.max.bytes": str(8 * 1024 * 1024),
        }
        props.update(self.extra_properties)
        return props

    def start(self, timeout_s: float = 60) -> str:
        """Format a log dir, start the broker and wait until it answers; returns bootstrap servers.

        Raises :class:`KafkaJarsMissingError` when the jars are missing and
        :class:`BrokerStartError` (with the tail of ``broker.log``) when the broker does not
        answer within ``timeout_s`` seconds or exits.
        """
        with self._lock:
            if self._proc is not None:
                return self.bootstrap_servers
            classpath = self._classpath()
            self._prepare_work_dir()
            deadline = time.monotonic() + timeout_s
            attempts = 3  # a picked port may be taken by someone else before the JVM binds it
            for attempt in range(attempts):
                try:
                    self._start_once(classpath, deadline)
                    break
                except BrokerStartError as exc:
                    self._kill()
                    port_race = "Address already in use" in str(exc) or any(
                        _port_in_use(p) for p in self._ports
                    )
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
        port, controller_port = _free_ports(2)
        quorum = _Quorum({self.node_id: controller_port}, _kafka_uuid())
        self._configure(port, controller_port, quorum)
        self._format_log_dir(classpath, deadline)
        self._launch_broker(classpath)
        self._wait_ready(f"127.0.0.1:{port}", deadline, {self.node_id})
        self._bootstrap = f"127.0.0.1:{port}"

    def _prepare_work_dir(self) -> None:
        if self._work_dir_arg is not None:
            self._work_dir = self._work_dir_arg
            self._work_dir.mkdir(parents=True, exist_ok=True)
            self._owns_work_dir = False
        else:
            self._work_dir = Path(tempfile.mkdtemp(prefix="duet-kafka-"))
            self._owns_work_dir = True

    def _configure(self, port: int, controller_port: int, quorum: _Quorum) -> None:
        """Write ``log4j2.properties`` and ``server.properties`` for a fresh (empty) log dir."""
        assert self._work_dir is not None
        work = self._work_dir
        data_dir = work / "data"
        if data_dir.exists():
            shutil.rmtree(data_dir)  # a fresh cluster each start (ports change)
        (work / "log4j2.properties").write_text(_LOG4J2)
        self._ports = (port, controller_port)
        self._cluster_id = quorum.cluster_id
        props = self._properties(port, controller_port, data_dir, quorum)
        (work / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _format_log_dir(self, classpath: str, deadline: float) -> None:
        """Format the KRaft log dir with the configured cluster id.

        Raises:
            BrokerStartError: the format tool failed or timed out (its output in the message).
        """
        assert self._work_dir is not None
        work = self._work_dir
        try:
            fmt = self._format(classpath, work / "log4j2.properties", work / "server.properties", deadline)
        except subprocess.TimeoutExpired as exc:
            raise BrokerStartError("formatting the KRaft log dir timed out") from exc
        if fmt.returncode != 0:
            out = fmt.stdout.decode(errors="replace")
            (work / "broker.log").write_text(out)
            raise BrokerStartError(f"formatting the KRaft log dir failed:\n{out[-4000:]}")

    def _launch_broker(self, classpath: str) -> None:
        assert self._work_dir is not None
        work = self._work_dir
        self._proc = self._launch(
            [*self._jvm(classpath, work / "log4j2.properties", self.heap), "kafka.Kafka", str(work / "server.properties")],
            work, work / "broker.log",
        )

    def _format(
        self, classpath: str, log4j: Path, config: Path, deadline: float
    ) -> subprocess.CompletedProcess[bytes]:
        """``kafka.tools.StorageTool format`` with a fresh cluster id (static quorum voters,
        so no ``--standalone``)."""
        return subprocess.run(
            [
                *self._jvm(classpath, log4j, "256m"),
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self._cluster_id,
                "-c",
                str(config),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=max(5.0, deadline - time.monotonic()),
            check=False,
        )

    def _launch(self, cmd: list[str], cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
        """Start the JVM from a launcher thread that lives until :meth:`stop` (see
        :func:`_child_setup`: the broker dies with this process, never outlives it)."""
        result: list[subprocess.Popen[bytes] | BaseException] = []
        started = threading.Event()
        done = threading.Event()
        parent = os.getpid()

        def run() -> None:
            try:
                with open(log_path, "ab") as log:
                    result.append(
                        subprocess.Popen(
                            cmd,
                            cwd=cwd,
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                            preexec_fn=_child_setup(parent),  # noqa: PLW1509
                        )
                    )
            except BaseException as exc:  # reported to the caller below
                result.append(exc)
                started.set()
                return
            started.set()
            done.wait()

        thread = threading.Thread(target=run, name="duet-kafka-launcher", daemon=True)
        thread.start()
        started.wait()
        if isinstance(result[0], BaseException):
            raise BrokerStartError(f"could not start java: {result[0]}") from result[0]
        self._launcher_done = done
        return result[0]

    def _wait_ready(self, bootstrap: str, deadline: float, brokers: set[int]) -> None:
        """Wait until ``bootstrap`` answers a metadata request listing every node of ``brokers``
        (a restarted node of a cluster is listed once the controller unfenced it).

        Raises:
            BrokerStartError: the JVM exited or ``deadline`` (``time.monotonic()``) passed.
        """
        assert self._proc is not None and self._work_dir is not None
        log_path = self._work_dir / "broker.log"
        host, port = bootstrap.rsplit(":", 1)

        def fail(why: str) -> BrokerStartError:
            return BrokerStartError(f"{why}; tail of {log_path}:\n{_tail(log_path)}")

        # First the listener (quiet), then a real metadata round trip.
        while True:
            if self._proc.poll() is not None:
                raise fail(f"the broker exited with code {self._proc.returncode}")
            if time.monotonic() > deadline:
                raise fail(f"the broker did not open {bootstrap} in time")
            try:
                with socket.create_connection((host, int(port)), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.1)

        from .admin import admin_client  # local: keep import of this module light

        admin = admin_client(bootstrap, {"socket.connection.setup.timeout.ms": 2000})
        while True:
            if self._proc.poll() is not None:
                raise fail(f"the broker exited with code {self._proc.returncode}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise fail(f"the broker at {bootstrap} did not answer in time")
            try:
                md = admin.list_topics(timeout=min(2.0, max(0.1, remaining)))
                if brokers <= set(md.brokers):
                    return
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
        """SIGSTOP the broker JVM (it holds its sockets but answers nothing)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused broker."""
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
        :meth:`terminate`), without
        formatting: the topics, offsets and transactions survive, as after a machine reboot.

        Raises:
            BrokerStartError: it does not answer within ``timeout_s`` seconds.
        """
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                raise BrokerStartError("the broker is running: kill() it first")
            assert self._work_dir is not None and self._bootstrap is not None, "never started"
            self._launch_broker(self._classpath())
            self._wait_ready(self._bootstrap, time.monotonic() + timeout_s, {self.node_id})
            return self._bootstrap

    def _signal(self, sig: int) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError("EmbeddedKafka is not running")
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

    def __repr__(self) -> str:
        state = self._bootstrap if self._bootstrap else "stopped"
        return f"EmbeddedKafka({state}, pid={self.pid})"


@contextlib.contextmanager
def kafka_cluster(
    work_dir: Path | None = None, *, timeout_s: float = 60, heap: str = "512m"
) -> Iterator[str]:
    """Yield bootstrap servers: ``$KAFKA_BOOTSTRAP_SERVERS`` when set, else an embedded broker.

    The embedded broker (if any) is stopped on exit.
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
