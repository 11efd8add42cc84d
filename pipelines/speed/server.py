"""The speed layer as a long-running, observed service (``duet speed --follow --server HOST:PORT``).

One process runs a pipeline's topology on ``KafkaStreams`` (its own stream threads) and
serves, on a uvicorn thread (FastAPI):

* ``GET /speed/instances``, ``GET /speed/stores/{store}/keys/{key}``: the interactive queries
  of :mod:`serving.api.interactive`, with ``application.server`` set to the address served,
  so that an instance forwards a key's query to the instance that hosts it;
* ``GET /speed/late``: the records dropped as late and the windows they missed (what a
  comparison with the batch layer excludes);
* ``GET /health``: ``{"state", "threads", "application_id", "application_server"}``, 200
  while the client is ``RUNNING`` or ``REBALANCING``, 503 otherwise (``CREATED``,
  ``PENDING_SHUTDOWN``, ``NOT_RUNNING``, ``PENDING_ERROR``, ``ERROR``);
* ``GET /metrics``: the client's metrics in the Prometheus text format, under Kafka Streams'
  names (:mod:`speed_layer.runtime.prometheus`, read at each scrape), plus the process'
  own (``process_cpu_seconds_total``...).

The Streams config is a run's (:func:`pipelines.speed.service.streams_config`) plus
``application.server``. SIGINT and SIGTERM stop the service: the streams close (a final
commit), then the server; :func:`serve_speed` returns what it did and the caller prints
:meth:`ServedSpeed.line`. A failed client keeps being served (``/health`` says 503 and why)
until stopped, so that an orchestrator's probe sees it.
"""

from __future__ import annotations

import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from fastapi import Request  # at module level: FastAPI resolves the routes' annotations here

from pipelines.declaration.pipeline import Pipeline
from pipelines.preflight import UserError
from pipelines.progress import NullReporter, Reporter
from pipelines.produce.replay import Feed, ReplayStats
from pipelines.speed.service import (
    LIVE_REPLAY_CONFIG,
    feed_once_caught_up,
    metric_total,
    new_application_id,
    state_root,
    streams_config,
)

if TYPE_CHECKING:
    from fastapi import FastAPI

    from speed_layer import KafkaStreams

__all__ = ["HEALTHY_STATES", "ServedSpeed", "SpeedService", "parse_server", "serve_speed", "speed_app"]

#: client states in which ``/health`` answers 200 (Kafka Streams' usual liveness rule)
HEALTHY_STATES = ("RUNNING", "REBALANCING")
#: how long the server may take to start listening, s
_SERVER_START_S = 20.0


def parse_server(server: str) -> tuple[str, int]:
    """``HOST:PORT`` -> ``(host, port)``; port 0 picks a free one.

    Raises:
        UserError: not ``HOST:PORT`` with a port in 0..65535.
    """
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UserError(f"--server {server!r}: give HOST:PORT, e.g. 127.0.0.1:8081 (port 0: any free port)")
    return host.strip("[]"), int(port)


def speed_app(streams: KafkaStreams) -> FastAPI:
    """The FastAPI app of a speed service over ``streams`` (``application.server`` set to the
    address it is served at): interactive queries, ``/health`` and ``/metrics``."""
    from fastapi import FastAPI, Response
    from fastapi.responses import JSONResponse
    from prometheus_client import CollectorRegistry, ProcessCollector
    from prometheus_client.exposition import choose_encoder

    from serving.api.interactive import interactive_router
    from speed_layer.runtime.prometheus import KafkaStreamsCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(KafkaStreamsCollector(streams))
    ProcessCollector(registry=registry)
    app = FastAPI(title=f"duet speed layer ({streams.config.application_id})", docs_url=None, redoc_url=None)
    app.include_router(interactive_router(streams))

    @app.get("/health", tags=["speed layer"])
    def health() -> JSONResponse:
        """The client's state and its stream threads', and its ``commit.interval.ms`` (how often
        the view topics are written: the bound on how stale they are); 200 while RUNNING or
        REBALANCING, else 503."""
        state = streams.state
        body: dict[str, Any] = {
            "state": state,
            "threads": streams.local_thread_metadata(),
            "application_id": streams.config.application_id,
            "application_server": streams.config.application_server,
            "commit_interval_ms": streams.config.commit_interval_ms,
        }
        if streams.errors:
            body["error"] = repr(streams.errors[0])
        return JSONResponse(body, status_code=200 if state in HEALTHY_STATES else 503)

    @app.get("/speed/late", tags=["speed layer"])
    def late() -> dict[str, Any]:
        """The records this client dropped as late (``{"records": [[store, key, timestamp ms],
        ...], "windows": {store: [[key, window start ms], ...]}}``, as Kafka Streams'
        ``dropped-records`` sensor counts them): what a comparison with the batch layer
        excludes (:func:`pipelines.job.serving_steps.compare_layers`'s ``late``, ``late_windows``)."""
        from pipelines.speed.service import runtime_late_records, runtime_late_windows

        return {"records": [[r.store, r.key, r.timestamp] for r in runtime_late_records(streams)],
                "windows": {store: sorted(wins) for store, wins in runtime_late_windows(streams).items()}}

    @app.get("/metrics", tags=["speed layer"])
    def metrics(request: Request) -> Response:
        """Kafka Streams' metrics of this client, read now: Prometheus' text format 0.0.4, or
        the format the ``Accept`` header asks for (OpenMetrics, text 1.0.0), as
        ``prometheus_client``'s own exporters negotiate it."""
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(registry), headers={"Content-Type": content_type})

    return app


class SpeedService:
    """A started ``KafkaStreams`` on ``pipeline``'s topology and its HTTP server on a thread;
    a context manager (``with SpeedService(...) as svc``), or :meth:`start` / :meth:`close`.

    Args:
        pipeline: the pipeline.
        bootstrap: Kafka bootstrap servers.
        host: address to listen on; ``0.0.0.0`` / ``::`` listen everywhere.
        port: TCP port; 0 picks a free one (see :attr:`port` once started).
        application_id: the Streams application id; ``None``: a fresh ``duet-<name>-run-*``
            one whose state folder is deleted at close.
        state_dir: the state folder (default ``<duet_home>/state``).
        advertised: ``application.server``, the ``host:port`` other instances forward
            queries to; default ``host:port``, with the machine's host name for a wildcard host.
        extra: more Streams config (e.g. ``commit.interval.ms``).

    Raises (from :meth:`start`):
        UserError: the address cannot be listened on.
        speed_layer.errors.StreamsException: the streams do not start (a broker call past
            ``task.timeout.ms``...).
    """

    def __init__(self, pipeline: Pipeline, bootstrap: str, host: str = "127.0.0.1", port: int = 0, *,
                 application_id: str | None = None, state_dir: Path | None = None, advertised: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.pipeline = pipeline
        self.bootstrap = bootstrap
        self.host = host
        self.port = port
        self.fresh = application_id is None
        self.application_id = application_id or new_application_id(pipeline.run_app_id_prefix)
        self.state_dir = state_dir
        self._advertised = advertised
        self._extra = dict(extra or {})
        self.streams: KafkaStreams | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.started_at = 0.0

    @property
    def url(self) -> str:
        """``http://<application.server>``."""
        return f"http://{self.advertised}"

    @property
    def advertised(self) -> str:
        """``application.server``: ``host:port`` as other instances reach this one."""
        if self._advertised:
            return self._advertised
        host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
        return f"{host}:{self.port}"

    def start(self) -> SpeedService:
        """Listen, start the streams, then serve (``/health`` says 503 until the client runs).

        Raises:
            UserError: the address cannot be listened on.
        """
        import uvicorn

        from pipelines.produce.topics import ensure_pipeline_topics
        from speed_layer import KafkaStreams

        sock = self._sock = _listen(self.host, self.port)
        try:
            self.port = sock.getsockname()[1]
            root = self.state_dir or state_root()
            root.mkdir(parents=True, exist_ok=True)
            self.state_dir = root
            ensure_pipeline_topics(self.pipeline, self.bootstrap)
            conf = streams_config(self.pipeline, self.bootstrap, self.application_id, root,
                                  {**self._extra, "application.server": self.advertised})
            self.streams = KafkaStreams(self.pipeline.build_topology(), conf)
            config = uvicorn.Config(speed_app(self.streams), log_level="warning", access_log=False,
                                    timeout_graceful_shutdown=5)
            self._server = uvicorn.Server(config)
            self.started_at = time.monotonic()
            self.streams.start()
            self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                            name=f"speed-server-{self.port}", daemon=True)
            self._thread.start()
            deadline = time.monotonic() + _SERVER_START_S
            while not self._server.started:
                if not self._thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"the speed service's HTTP server did not start on {self.host}:{self.port}")
                time.sleep(0.02)
        except BaseException:
            self.close()
            raise
        return self

    def close(self, timeout_s: float = 60.0) -> None:
        """Close the streams (a final commit; within ``timeout_s``), then stop the server;
        a fresh application id's state folder is deleted. Idempotent."""
        if self.streams is not None:
            self.streams.close(timeout_s)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.fresh and self.state_dir is not None:
            shutil.rmtree(self.state_dir / self.application_id, ignore_errors=True)

    def __enter__(self) -> SpeedService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (uvicorn serves on it).

    Raises:
        UserError: the address cannot be bound (in use, not local...).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --server address") \
            from None
    return sock


@dataclass
class ServedSpeed:
    """What a speed service did, for the line printed when it stops.

    Attributes:
        application_id: the Streams application id.
        url: where it was served (``http://<application.server>``).
        seconds: wall time served.
        processed: records processed (Kafka's ``process-total``: each sub-topology a record
            crosses counts it once).
        dropped_late: records dropped as late (``dropped-records-late-total``).
        dead_lettered: records sent to the dead-letter topic.
        state: the client's state when it stopped serving (before closing).
        stopped_by: ``"SIGINT"``, ``"SIGTERM"`` or ``"stop"`` (the ``stop`` event was set).
        replay: the live replay's stats, when a ``feed`` ran.
    """

    application_id: str
    url: str
    seconds: float
    processed: int
    dropped_late: int
    dead_lettered: int
    state: str
    stopped_by: str
    replay: ReplayStats | None = None

    def line(self) -> str:
        """One line: ``speed service stopped (SIGTERM) after 12.3 s at http://h:p: application.id
        X, 1,234 records processed, 0 dropped as late, 0 dead-lettered``."""
        failed = "" if self.state in HEALTHY_STATES + ("CREATED",) else f", client {self.state}"
        return (f"speed service stopped ({self.stopped_by}) after {self.seconds:.1f} s at {self.url}: "
                f"application.id {self.application_id}, {self.processed:,} records processed, "
                f"{self.dropped_late:,} dropped as late, {self.dead_lettered:,} dead-lettered{failed}")


class _Stopped(BaseException):
    """Raised in the main thread by SIGINT / SIGTERM while the service runs."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


class _Signals:
    """While :attr:`armed`, SIGINT and SIGTERM raise :class:`_Stopped` in the main thread;
    disarmed (closing), they are ignored."""

    def __init__(self) -> None:
        self.armed = True

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        if self.armed:
            self.armed = False
            raise _Stopped(signal.Signals(signum).name)


@contextmanager
def _stop_signals() -> Iterator[_Signals]:
    """SIGINT and SIGTERM raise :class:`_Stopped` in the block while armed (in the main
    thread; elsewhere signals are left alone); the previous handlers come back after it."""
    signals = _Signals()
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return
    previous = {s: signal.signal(s, signals.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield signals
    finally:
        signals.armed = False
        for s, h in previous.items():
            signal.signal(s, h)


def serve_speed(
    pipeline: Pipeline,
    bootstrap: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    application_id: str | None = None,
    state_dir: Path | None = None,
    advertised: str | None = None,
    feed: Feed | None = None,
    reporter: Reporter | None = None,
    timeout_s: float = 3600.0,
    on_ready: Callable[[SpeedService], None] | None = None,
    stop: threading.Event | None = None,
    config: dict[str, Any] | None = None,
    on_stop: Callable[[], None] | None = None,
) -> ServedSpeed:
    """Run ``pipeline``'s speed layer as a service on ``host:port`` until SIGINT / SIGTERM
    (or ``stop`` is set): see the module docstring.

    Args:
        pipeline: the pipeline.
        bootstrap: Kafka bootstrap servers.
        host, port: where to listen (port 0: a free one).
        application_id: the Streams application id (``duet speed``: the pipeline's
            ``service_app_id``); ``None``: a fresh one, its state deleted at the end.
        state_dir: the state folder (default ``<duet_home>/state``).
        advertised: ``application.server`` when other instances reach this one at another
            address than ``host:port``.
        feed: as :func:`pipelines.job.steps.run_speed`'s: once caught up with what the topics hold
            (within ``timeout_s``), called with the processed-records counter and a catch-up
            wait; it replays more input (the live sample on an embedded broker).
        reporter: phase ``"speed"``: finished once serving, with the URL.
        timeout_s: for ``feed``: how long the speed layer may take to catch up, s.
        on_ready: called with the started :class:`SpeedService` once it serves.
        stop: an event that stops the service like a signal (for callers on other threads).
        config: more Streams config, over the live replay's (``duet up``: ``commit.interval.ms``
            200, so that the view topics trail by a fifth of a second).
        on_stop: called once the service is told to stop, before the streams close (``duet
            up`` tells its child processes to stop meanwhile).

    Returns:
        What the service did (:meth:`ServedSpeed.line` is the line to print).

    Raises:
        UserError: a bad address, or one that cannot be listened on.
        TimeoutError: ``feed`` was given and the speed layer did not catch up in ``timeout_s``.
        speed_layer.errors.StreamsException: the streams did not start.
    """
    rep = reporter or NullReporter()
    stop = stop or threading.Event()
    stopped_by = "stop"
    replay: ReplayStats | None = None
    service = SpeedService(pipeline, bootstrap, host, port, application_id=application_id, state_dir=state_dir,
                           advertised=advertised,
                           extra={**(LIVE_REPLAY_CONFIG if feed is not None else {}), **(config or {})} or None)
    state = "CREATED"
    metrics: dict[str, Any] = {}
    with _stop_signals() as signals:
        try:
            rep.start("speed", None)
            service.start()
            assert service.streams is not None
            streams = service.streams
            rep.finish("speed", f"serving {service.url} (/health, /metrics, /speed/...); Ctrl-C stops")
            if on_ready is not None:
                on_ready(service)

            def processed() -> int:
                return metric_total(streams.metrics(), "process-total")

            if feed is not None:
                replay = feed_once_caught_up(streams, feed, processed, timeout_s)
            while not stop.wait(0.5):
                pass
        except _Stopped as exc:
            stopped_by = exc.signame
        finally:
            signals.armed = False  # a second Ctrl-C does not interrupt the close
            if on_stop is not None:
                on_stop()
            if service.streams is not None:
                state = service.streams.state
                metrics = _final_metrics(service.streams)
            service.close()
    return ServedSpeed(
        application_id=service.application_id,
        url=service.url,
        seconds=time.monotonic() - service.started_at if service.started_at else 0.0,
        processed=metric_total(metrics, "process-total"),
        dropped_late=metric_total(metrics, "dropped-records-late-total"),
        dead_lettered=metric_total(metrics, "dead-lettered-total"),
        state=state,
        stopped_by=stopped_by,
        replay=replay,
    )


def _final_metrics(streams: KafkaStreams) -> dict[str, Any]:
    try:
        return dict(streams.metrics())
    except Exception:  # noqa: BLE001 - the summary line is informative only
        return {}
