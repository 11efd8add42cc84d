"""Checks the CLI runs before it starts work, each failing with one line a new user can act on.

Every check raises :class:`UserError`; the CLI prints its message (no traceback) and exits
with status 2.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

__all__ = ["UserError", "check_kafka_reachable", "check_port_free", "check_lake_served"]


class UserError(Exception):
    """A mistake of the user's (a bad flag, an unreachable broker, a missing lake): the
    message says what is wrong and what to do."""


CLI_KAFKA_HINT = ("start the broker, fix --bootstrap / $KAFKA_BOOTSTRAP_SERVERS, or unset both to use the "
                  "embedded broker")


def check_kafka_reachable(bootstrap: str, timeout_s: float = 8.0, hint: str = CLI_KAFKA_HINT) -> None:
    """Ask the cluster for its metadata; ``hint`` ends the error message (what to do).

    Raises:
        UserError: no broker answered within ``timeout_s`` seconds.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    refused = _no_address_answers(bootstrap, min(timeout_s, PROBE_TIMEOUT_S))
    if refused:
        raise UserError(f"cannot reach Kafka at {bootstrap} ({refused}); {hint}")
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout_s * 1000),
                         "log_level": 0, "logger": _SILENT})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise UserError(
            f"cannot reach Kafka at {bootstrap} ({exc.args[0].str() if exc.args else exc}); {hint}"
        ) from None


PROBE_TIMEOUT_S = 3.0


def _no_address_answers(bootstrap: str, timeout_s: float) -> str | None:
    """Open a TCP connection to each bootstrap address in turn: ``None`` as soon as one accepts
    (or an address cannot be parsed: the admin client judges), else why the last one failed.

    librdkafka retries a refused connection until its metadata timeout runs out; a plain
    connect fails at once, so a broker that is not there is reported in a second, not in
    ``timeout_s`` of the metadata request."""
    reason: str | None = None
    for server in (s.strip() for s in bootstrap.split(",")):
        if not server:
            continue
        address = server.split("://", 1)[-1]
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            return None
        host = host.strip("[]") or "localhost"
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return None
        except socket.gaierror as exc:
            reason = f"cannot resolve {host}: {exc.strerror or exc}"
        except TimeoutError:
            reason = f"no answer from {server} within {timeout_s:g} s"
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
    return reason


class _Silent:
    """A logger for librdkafka that drops its connection-refused lines (the CLI says it once)."""

    def log(self, *args: object, **kwargs: object) -> None:
        pass

    def __getattr__(self, name: str) -> object:
        return self.log


_SILENT = _Silent()


def check_port_free(host: str, port: int, flag: str = "--port") -> None:
    """Bind ``host:port`` once and release it.

    Raises:
        UserError: the port is in use, or ``host`` is not an address of this machine.
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"port {port} on {host} is already in use; choose another with {flag}") from None
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}; check --host") from None


def check_lake_served(lake: Path | str) -> None:
    """The lake holds published views (``<lake>/serving/_views.json``); ``lake`` a local path
    or an object-store folder (``s3://bucket/prefix/<pipeline>``).

    Raises:
        UserError: the lake folder or its serving catalogue does not exist yet.
    """
    from batch_layer.delta.storage import exists
    from serving.views.model import catalogue_path

    if not exists(lake):
        raise UserError(f"no lake at {lake}: run `duet run` (or `duet batch`) first, or pass --lake")
    if not exists(catalogue_path(lake)):
        raise UserError(f"the lake at {lake} has no published views yet: run `duet run` or `duet batch` first")
