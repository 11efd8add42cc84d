"""The JVM of an embedded Kafka node: the jars, the command line, and a child that dies with us.

``make setup`` copies Apache Kafka 4.1.1's jars into ``<duet_home>/jars/kafka`` with Maven
(``jvm/kafka/pom.xml``); :func:`kafka_classpath` checks they and ``java`` are there.
:func:`jvm_command` is the command line of every Kafka JVM duet starts (its class-data-sharing
archive, C1 JIT only, G1, a heap cap), :func:`storage_format` runs
``kafka.tools.StorageTool format`` and :func:`launch_jvm` starts a long-lived JVM
(``kafka.Kafka``) that the kernel stops when this process dies, even by SIGKILL.

Kafka's own test harness runs its nodes in the test's JVM (``KafkaClusterTestKit`` builds
``ControllerServer``/``BrokerServer`` objects); duet runs each node in a child JVM, so this
module is the seam Kafka does not need. :mod:`speed_layer.runtime.kraft_node` uses it.
"""

from __future__ import annotations

# imported before the broker's JVM is forked with a preexec_fn: a thread importing it during
# that fork would run its at-fork release without the acquire (batch_layer.spark tells more)
import concurrent.futures.thread  # noqa: F401
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from speed_layer.runtime.kraft_cds import java_options
from speed_layer.runtime.kraft_errors import BrokerStartError, KafkaJarsMissingError

__all__ = ["BOOTSTRAP_ENV", "kafka_classpath", "jvm_command", "storage_format", "launch_jvm"]

#: Environment variable naming an external cluster; when set no broker is started.
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
_PR_SET_PDEATHSIG = 1


def kafka_classpath(jars_dir: Path, java: str) -> str:
    """The JVM classpath of the Kafka jars in ``jars_dir`` (``<jars_dir>/*``).

    Raises:
        KafkaJarsMissingError: ``jars_dir`` holds no ``kafka_2.13-*.jar`` (run ``make setup``).
        BrokerStartError: ``java`` is neither on ``$PATH`` nor a file.
    """
    jars = sorted(jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    if not any(j.name.startswith("kafka_2.13-") for j in jars):
        raise KafkaJarsMissingError(
            f"Apache Kafka's jars are missing from {jars_dir}: run `make setup` "
            "(it copies them with Maven from jvm/kafka/pom.xml), or set "
            f"${BOOTSTRAP_ENV} to use an existing cluster."
        )
    if shutil.which(java) is None and not Path(java).is_file():
        raise BrokerStartError(f"`{java}` not found: the embedded broker needs Java 17+")
    return str(jars_dir / "*")


def jvm_command(java: str, classpath: str, log4j: Path, heap: str) -> list[str]:
    """``java`` and its options, up to the main class: ``heap`` is ``-Xmx`` (e.g. ``512m``);
    the class-data-sharing archive and ``$DUET_KAFKA_JAVA_OPTIONS`` first
    (:func:`speed_layer.runtime.kraft_cds.java_options`)."""
    return [
        java,
        *java_options(java, Path(classpath).parent),
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


def storage_format(
    java: str, classpath: str, log4j: Path, config: Path, cluster_id: str, deadline: float
) -> subprocess.CompletedProcess[bytes]:
    """``kafka.tools.StorageTool format`` of the log dir of ``config`` with ``cluster_id``
    (static quorum voters, so no ``--standalone``); stdout and stderr together in ``stdout``.

    ``deadline`` is a ``time.monotonic()`` value; the tool gets at least 5 s.

    Raises:
        subprocess.TimeoutExpired: the tool did not finish in time.
    """
    return subprocess.run(
        [
            *jvm_command(java, classpath, log4j, "256m"),
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(config),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=max(5.0, deadline - time.monotonic()),
        check=False,
    )


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


def launch_jvm(cmd: list[str], cwd: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], threading.Event]:
    """Start ``cmd`` (its output appended to ``log_path``) from a launcher thread that lives
    until the returned event is set, in a session of its own.

    The JVM gets SIGTERM from the kernel when that thread ends (``PR_SET_PDEATHSIG``, see
    :func:`_child_setup`): set the event once the JVM has exited, and the broker never
    outlives this process.

    Raises:
        BrokerStartError: ``java`` could not be started.
    """
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
    launched = result[0]
    if isinstance(launched, BaseException):
        raise BrokerStartError(f"could not start java: {launched}") from launched
    return launched, done
