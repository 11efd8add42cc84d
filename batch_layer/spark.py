"""One SparkSession per process, with Delta Lake configured from the jars of `make setup`.

Usage::

    from batch_layer.spark import get_spark, stop_spark
    spark = get_spark()                                   # local[*], or from the environment
    spark = get_spark(master="spark://10.0.0.5:7077")     # a standalone cluster
    ...
    stop_spark()

Where the session runs (first match wins):

1. Spark Connect: the ``remote`` argument, else ``$SPARK_REMOTE`` (``sc://HOST[:PORT]...``).
   The session is a Connect client; the server owns the cluster and must have Delta Lake
   configured itself (``spark.jars`` and the Delta SQL extension cannot be set from a client).
2. ``spark.master``: the ``master`` argument, else ``$DUET_SPARK_MASTER``, else ``local[*]``.
   Allowed forms: ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``,
   ``spark://HOST:PORT[,HOST:PORT...]``, ``yarn``, ``k8s://[https://]HOST[:PORT]``.

Environment (each also an argument of :func:`get_spark`):

- ``DUET_SPARK_MASTER``: Spark master URL (default ``local[*]``).
- ``SPARK_REMOTE``: Spark Connect URL (unset: no Connect).
- ``DUET_DELTA_JARS``: folder holding ``delta-spark_*.jar`` and ``delta-storage-*.jar``
  (default ``$DUET_HOME/jars/delta``, else ``<repo>/.duet/jars/delta``).
- ``DUET_SPARK_JARS_ON_WORKERS``: ``1`` when that folder is at the same path on every
  worker (one image, or a shared mount): the jars then go on the driver's and executors'
  ``extraClassPath``, and each executor loads them from its own disk instead of copying them
  from the driver at start (~660 MB with the S3A jars; :mod:`batch_layer.spark_jars`).
- ``DUET_SPARK_DRIVER_HOST``: the address executors use to reach the driver, also the one
  the driver binds to (default ``127.0.0.1``: right for ``local`` masters and a cluster on
  this machine; a cluster on other machines needs an address they can reach).
- ``DUET_SPARK_DRIVER_MEMORY``: driver heap (default ``1g``).
- ``DUET_SPARK_JAVA_OPTIONS``: more driver JVM options (:func:`driver_java_options`).
- ``DUET_CDS``: ``0`` starts the driver without the class-data-sharing archive
  ``make setup`` builds (:mod:`batch_layer.spark_cds`).

Other Spark settings (``spark.executor.memory``, ``spark.hadoop.fs.s3a.*``,
``spark.jars.packages``...) go in the ``conf`` argument of :func:`get_spark`, or in
``$SPARK_CONF_DIR/spark-defaults.conf`` (docs/cluster.md).
"""

from __future__ import annotations

# concurrent.futures.thread registers at-fork handlers when first imported (acquire its lock
# before a fork, release it after). pyspark launches the Spark JVM with a preexec_fn, so a
# fork runs them; if another thread imports the module meanwhile, the release runs without
# the acquire and stderr gets "Exception ignored in: <built-in method release of
# _thread.lock> ... RuntimeError: release unlocked lock" (seen in `duet run`, the Spark JVM
# starting beside the speed layer). Imported before this module forks anything.
import concurrent.futures.thread  # noqa: F401
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from batch_layer.errors import BatchLayerError, SparkConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "SparkConfigError",
    "default_delta_jars_dir",
    "delta_jars",
    "driver_java_options",
    "get_spark",
    "is_connect",
    "resolve_master",
    "resolve_remote",
    "resolve_target",
    "stop_spark",
]

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
MASTER_ENV = "DUET_SPARK_MASTER"
REMOTE_ENV = "SPARK_REMOTE"
JARS_ENV = "DUET_DELTA_JARS"
DRIVER_HOST_ENV = "DUET_SPARK_DRIVER_HOST"
DRIVER_MEMORY_ENV = "DUET_SPARK_DRIVER_MEMORY"
JAVA_OPTIONS_ENV = "DUET_SPARK_JAVA_OPTIONS"

#: The master URL forms :func:`resolve_master` accepts (shown in its errors).
MASTER_FORMS = (
    "local, local[N], local[*], local[N,F], spark://HOST:PORT[,HOST:PORT...], yarn, k8s://[https://]HOST[:PORT]"
)
REMOTE_FORMS = "sc://HOST[:PORT][/;param=value...]"

_N = r"[1-9][0-9]*"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.\-_]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
_PORT = r"(?:[1-9][0-9]{0,4})"
_MASTER_RE = re.compile(
    rf"""^(?:
        local
      | local\[(?:\*|{_N})(?:,\s*{_N})?\]
      | spark://{_HOST}:{_PORT}(?:,{_HOST}:{_PORT})*
      | yarn
      | k8s://(?:https?://)?{_HOST}(?::{_PORT})?(?:/\S*)?
    )$""",
    re.VERBOSE,
)
_REMOTE_RE = re.compile(rf"^sc://{_HOST}(?::{_PORT})?(?:/(?:;[^;=\s]+=[^;\s]*)*)?$")

_lock = threading.Lock()
_spark: SparkSession | None = None
_target: str | None = None  # "master=..." or "remote=..." of the running session


def _port_ok(url: str) -> bool:
    return all(0 < int(p) < 65536 for p in re.findall(r":([0-9]+)(?=[,/]|$)", url))


def _setting(value: str | None, argument: str, env: str) -> tuple[str, str] | None:
    """``(value, where it came from)``: the non-blank argument, else the non-blank ``$env``,
    else None."""
    if value is not None and value.strip():
        return value.strip(), argument
    if os.environ.get(env, "").strip():
        return os.environ[env].strip(), f"${env}"
    return None


def resolve_master(master: str | None = None) -> str:
    """The ``spark.master`` to use: ``master``, else ``$DUET_SPARK_MASTER``, else ``local[*]``.

    Raises:
        SparkConfigError: the value is not one of :data:`MASTER_FORMS` (the message names
            ``spark.master``, its source and the allowed forms).
    """
    found = _setting(master, "the master argument", MASTER_ENV)
    if found is None:
        return DEFAULT_MASTER
    value, source = found
    if not _MASTER_RE.match(value) or not _port_ok(value):
        raise SparkConfigError(
            f"spark.master {value!r} (from {source}) is not a master URL duet accepts; allowed forms: "
            f"{MASTER_FORMS}. For Spark Connect set SPARK_REMOTE={REMOTE_FORMS} instead."
        )
    return value


def resolve_remote(remote: str | None = None) -> str | None:
    """The Spark Connect URL to use: ``remote``, else ``$SPARK_REMOTE``, else ``None``.

    Raises:
        SparkConfigError: the value is not of the form :data:`REMOTE_FORMS`.
    """
    found = _setting(remote, "the remote argument", REMOTE_ENV)
    if found is None:
        return None
    value, source = found
    if not _REMOTE_RE.match(value) or not _port_ok(value.split("/;")[0]):
        raise SparkConfigError(
            f"SPARK_REMOTE {value!r} (from {source}) is not a Spark Connect URL; allowed form: {REMOTE_FORMS}"
        )
    return value


def resolve_target(master: str | None = None, remote: str | None = None) -> tuple[str, str]:
    """Where :func:`get_spark` would run: ``("remote", Connect URL)`` or ``("master", master
    URL)``, from the arguments, else the environment, else ``("master", "local[*]")``.

    Raises:
        SparkConfigError: a malformed master or Connect URL, or both a master and a Connect
            URL given (arguments or environment).
    """
    url = resolve_remote(remote)
    if url is None:
        return "master", resolve_master(master)
    if (master and master.strip()) or os.environ.get(MASTER_ENV, "").strip():
        given = master.strip() if master and master.strip() else f"${MASTER_ENV}={os.environ[MASTER_ENV]}"
        raise SparkConfigError(
            f"both spark.master ({given}) and SPARK_REMOTE ({url}) are set: set only one of them "
            "(with SPARK_REMOTE the Connect server owns the cluster)"
        )
    return "remote", url


def _repo_root() -> Path:
    """The folder holding ``pyproject.toml`` above this file (else the package's parent)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    return here.parents[1]


def default_delta_jars_dir() -> Path:
    """``$DUET_DELTA_JARS``, else ``$DUET_HOME/jars/delta``, else ``<repo>/.duet/jars/delta``
    (where ``make setup`` copies delta-spark's jars)."""
    env = os.environ.get(JARS_ENV, "").strip()
    if env:
        return Path(env).expanduser().resolve()
    home = os.environ.get("DUET_HOME", "").strip()
    base = Path(home).expanduser().resolve() if home else _repo_root() / ".duet"
    return base / "jars" / "delta"


def delta_jars(jars_dir: str | Path | None = None) -> list[Path]:
    """All jars in ``jars_dir`` (default :func:`default_delta_jars_dir`), sorted.

    Raises:
        BatchLayerError: delta-spark's or delta-storage's jar is missing there (the message
            names the folder, ``make setup``, ``DUET_DELTA_JARS`` and ``DUET_HOME``).
    """
    folder = Path(jars_dir).expanduser().resolve() if jars_dir else default_delta_jars_dir()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    names = [j.name for j in jars]
    if not all(any(n.startswith(prefix) for n in names) for prefix in ("delta-spark", "delta-storage")):
        raise BatchLayerError(
            f"Delta Lake jars not found in {folder} (expected delta-spark_*.jar and delta-storage-*.jar). "
            f"Run `make setup` to fetch them, or point {JARS_ENV} at a folder holding them "
            "(or DUET_HOME at a folder holding jars/delta)."
        )
    return jars


def is_connect(spark: object) -> bool:
    """True when ``spark`` is a Spark Connect session (no ``sparkContext``, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def get_spark(
    app_name: str = "duet",
    *,
    master: str | None = None,
    remote: str | None = None,
    jars_dir: str | Path | None = None,
    driver_memory: str | None = None,
    driver_host: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return the process-wide SparkSession with Delta configured, starting it on first call
    (~8 s for ``local[*]``; a cluster adds the executors' start).

    Later calls return the same session whatever they pass (a Python process holds one
    SparkContext); a later call asking for another master or Connect URL logs a warning.

    Args:
        app_name: the application name (shown by the cluster manager).
        master: ``spark.master`` (see :func:`resolve_master`); default ``$DUET_SPARK_MASTER``,
            else ``local[*]``.
        remote: a Spark Connect URL (see :func:`resolve_remote`); default ``$SPARK_REMOTE``.
            Delta must then be configured on the Connect server.
        jars_dir: the folder of Delta's jars (see :func:`delta_jars`); they are shipped to
            the executors with ``spark.jars``.
        driver_memory: the driver heap, e.g. ``"2g"`` (default ``$DUET_SPARK_DRIVER_MEMORY``,
            else ``1g``).
        driver_host: the address executors reach the driver at, also its bind address
            (default ``$DUET_SPARK_DRIVER_HOST``, else ``127.0.0.1``).
        conf: more Spark settings, applied last (they override duet's); a ``spark.jars``
            given here is added to Delta's jars.

    Raises:
        SparkConfigError: a malformed master or Connect URL, or both a master and a Connect
            URL given.
        BatchLayerError: Delta's jars are missing (not for Connect sessions).
    """
    global _spark, _target
    kind, url = resolve_target(master, remote)
    target = f"{kind}={url}"
    with _lock:
        if _spark is not None and not _is_stopped(_spark):
            if target != _target and (master or remote):
                log.warning("a SparkSession (%s) is already running in this process; %s ignored", _target, target)
            return _spark
        if kind == "remote":
            spark = _connect_session(app_name, url, conf)
        else:
            spark = _classic_session(app_name, url, jars_dir, driver_memory, driver_host, conf)
        _spark, _target = spark, target
        return spark


#: Runtime SQL settings duet relies on (also sent to a Connect server).
_SQL_CONF = {
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "true",
}


def _classic_session(
    app_name: str,
    master: str,
    jars_dir: str | Path | None,
    driver_memory: str | None,
    driver_host: str | None,
    conf: Mapping[str, str] | None,
) -> SparkSession:
    from .spark_jars import jar_settings, jars_on_workers
    from .spark_s3a import is_s3a_jar, s3a_jars_wanted

    s3a = s3a_jars_wanted()  # the S3A jars only for a process on an object-store lake (batch_layer.spark_s3a)
    jars = [j for j in delta_jars(jars_dir) if s3a or not is_s3a_jar(j.name)]
    extra = dict(conf or {})
    extra_jars = [j for j in extra.pop("spark.jars", "").split(",") if j.strip()]
    classpath = jar_settings(jars, extra_jars, jars_on_workers())
    for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath"):
        if key in classpath and extra.get(key):  # the user's entries after duet's
            classpath[key] += os.pathsep + extra.pop(key)
    host = (driver_host or os.environ.get(DRIVER_HOST_ENV, "") or "127.0.0.1").strip()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Keep the JVM off the network name service and quiet before log4j is reconfigured.
    os.environ.setdefault("SPARK_LOCAL_IP", host)

    settings = {
        "spark.app.name": app_name,
        "spark.master": master,
        **classpath,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.host": host,
        "spark.driver.bindAddress": host,
        "spark.driver.memory": driver_memory or os.environ.get(DRIVER_MEMORY_ENV, "1g"),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
        "spark.databricks.delta.snapshotPartitions": "2",
        **_SQL_CONF,
        **extra,
        "spark.driver.extraJavaOptions": driver_java_options(extra.get("spark.driver.extraJavaOptions")),
    }
    _launch_gateway(settings)

    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def driver_java_options(user: str | None = None) -> str:
    """The Spark driver JVM's options (``spark.driver.extraJavaOptions``), in this order, a
    later option winning over an earlier one as the JVM reads them: duet's log4j2 file, the
    class-data-sharing archive when there is one (:mod:`batch_layer.spark_cds`),
    ``$DUET_SPARK_JAVA_OPTIONS``, then ``user`` (a ``spark.driver.extraJavaOptions`` given in
    ``conf``). In ``local`` masters the executors run in this JVM, so the options are theirs too.

    E.g. ``DUET_SPARK_JAVA_OPTIONS=-XX:TieredStopAtLevel=1`` (C1 only) takes a cold JVM's small
    job from 69 to 38-42 s of CPU on 2 cores, but makes a warm full-year batch 1.29x slower
    (docs/batch-executors.md): the test suite sets it, the main job does not.
    """
    from batch_layer.spark_cds import java_options as cds_options

    parts = [f"-Dlog4j2.configurationFile=file:{_log4j2_config()}", cds_options(),
             os.environ.get(JAVA_OPTIONS_ENV, "").strip(), (user or "").strip()]
    return " ".join(p for p in parts if p)


def _launch_gateway(settings: Mapping[str, str]) -> None:
    """Start the Spark driver JVM (pyspark's ``launch_gateway``, with ``settings`` as its
    ``--conf``s) with its stderr relayed to this process' stderr by a daemon thread, unless
    a JVM is already running for this process.

    The JVM writes to a pipe this process reads instead of to the terminal: whatever the JVM
    prints after this process has ended (e.g. the errors of a SparkContext still starting
    when Ctrl-C ends ``duet run``, and Spark's shutdown hooks then delete its files) goes
    nowhere, as the JVM's own output should once its driver is gone.
    """
    from subprocess import PIPE

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # type: ignore[attr-defined]
        return
    conf = SparkConf(loadDefaults=False)
    conf.setAll(list(settings.items()))
    gateway = launch_gateway(conf, popen_kwargs={"stderr": PIPE})
    if gateway.proc is not None:  # None: pyspark attached to a JVM given by $PYSPARK_GATEWAY_PORT
        threading.Thread(target=_relay, args=(gateway.proc.stderr,), name="spark-jvm-stderr",
                         daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)  # type: ignore[attr-defined]


#: lines the JVM prints on every start, which say nothing to a user: Spark 4's launcher adds
#: ``--add-modules=jdk.incubator.vector`` (its vectorized code), and the JVM then notes
#: ``WARNING: Using incubator modules: jdk.incubator.vector`` (no JVM flag silences it)
JVM_START_NOTICES: tuple[bytes, ...] = (b"WARNING: Using incubator modules: ",)


def _relay(stream: IO[bytes]) -> None:
    """Copy the JVM's stderr to this process' stderr (file descriptor 2, as the JVM wrote
    before) line by line until the JVM closes it, but for :data:`JVM_START_NOTICES` (logged at
    DEBUG). Once fd 2 fails (closed), the rest is read
    and dropped, so that the JVM never blocks on a full pipe; the failure is logged once."""
    lines = iter(stream.readline, b"")
    try:
        for line in lines:
            if line.startswith(JVM_START_NOTICES):
                log.debug("Spark JVM: %s", line.decode(errors="replace").rstrip())
                continue
            os.write(2, line)
    except OSError as exc:
        log.debug("the Spark JVM's stderr is dropped from now on: this process' stderr failed: %s", exc)
        for _ in lines:  # drain: a JVM writing to a full pipe would block
            continue


def _connect_session(app_name: str, url: str, conf: Mapping[str, str] | None) -> SparkSession:
    """A Spark Connect client session; only runtime settings reach the server (static ones
    such as ``spark.jars`` are ignored by it)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(url).appName(app_name)
    settings = {k: v for k, v in _SQL_CONF.items() if "arrow.pyspark.fallback" not in k}  # not a Connect setting
    for key, value in {**settings, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


_LOG4J2 = """\
# duet: Spark's JVM logs to stderr, WARN during start-up (pyspark's shell prints a banner when the
# root level is not WARN), then get_spark() lowers the root to ERROR.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""


def _log4j2_config() -> Path:
    """A log4j2 properties file keeping the JVM quiet from its first line (written once per user)."""
    path = Path(tempfile.gettempdir()) / f"duet-spark-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        tmp.replace(path)
    return path


def stop_spark() -> None:
    """Stop the process-wide SparkSession if one is running (the next `get_spark` starts a new one)."""
    global _spark, _target
    with _lock:
        if _spark is not None:
            _spark.stop()
            _spark, _target = None, None


def _is_stopped(spark: SparkSession) -> bool:
    if is_connect(spark):
        return bool(spark.is_stopped)  # type: ignore[attr-defined]
    sc = spark.sparkContext
    return sc._jsc is None  # type: ignore[attr-defined]
