"""What a streams client does when one of its stream threads dies (Kafka's
``StreamsUncaughtExceptionHandler`` and its ``StreamThreadExceptionResponse``, as
``KafkaStreams#handleStreamsUncaughtException`` reads the answer).

A handler is ``handler(exc)`` answering one of :data:`EXCEPTION_HANDLER_RESPONSES`, as a
string or an enum member of that name (e.g. ``"REPLACE_THREAD"``,
``Response.SHUTDOWN_CLIENT``, case-insensitive). Without a handler, with a handler that
raises or that answers something else, the answer is ``SHUTDOWN_CLIENT`` (Kafka's default).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

__all__ = ["EXCEPTION_HANDLER_RESPONSES", "UncaughtExceptionHandler", "handler_response"]

log = logging.getLogger("speed_layer.streams")

#: what an uncaught exception handler may answer (Kafka's StreamThreadExceptionResponse)
EXCEPTION_HANDLER_RESPONSES = ("REPLACE_THREAD", "SHUTDOWN_CLIENT", "SHUTDOWN_APPLICATION")

#: ``handler(exc)`` -> one of :data:`EXCEPTION_HANDLER_RESPONSES` (a string or an enum member)
UncaughtExceptionHandler = Callable[[BaseException], Any]


def handler_response(handler: UncaughtExceptionHandler | None, exc: BaseException) -> str:
    """The answer of ``handler`` to ``exc``, one of :data:`EXCEPTION_HANDLER_RESPONSES`
    (``SHUTDOWN_CLIENT`` when ``handler`` is None, raises, logged, or answers something
    else, logged at ERROR). Never raises."""
    if handler is None:
        return "SHUTDOWN_CLIENT"
    action = "SHUTDOWN_CLIENT"
    try:
        answer = handler(exc)
        action = str(getattr(answer, "name", answer)).upper().rsplit(".", 1)[-1]
    except Exception:  # noqa: BLE001 - a failing handler means shut down
        log.exception("uncaught exception handler failed: shutting down the client")
    if action not in EXCEPTION_HANDLER_RESPONSES:
        log.error("uncaught exception handler answered %r, not one of %s: shutting down the client", action, EXCEPTION_HANDLER_RESPONSES)
        action = "SHUTDOWN_CLIENT"
    return action
