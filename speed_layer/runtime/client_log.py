"""The ``speed_layer.kafka`` logger, where every Kafka client of the runtime and of
:mod:`speed_layer.admin` logs librdkafka's own messages (never to stderr), and its filter of
librdkafka's notices of a transient broker state.

librdkafka logs, at WARNING, a retriable broker error it retries by itself: e.g. an
idempotent producer's ``GETPID ... Failed to acquire idempotence PID from broker ...:
Broker: Coordinator load in progress: retrying`` while a fresh broker loads its transaction
coordinator. Kafka's Java clients log these at DEBUG/INFO and retry (``Sender``,
``TransactionManager``); a WARNING is for a state that lasts. So a notice of
:data:`TRANSIENT_ERRORS` ending in ``retrying`` is DEBUG while it lasts less than
:data:`~speed_layer.runtime.task_timeout.WARN_AFTER_MS` (5 s) for that client and facility,
and then one WARNING says it is still failing and for how long.
"""
from __future__ import annotations

import logging
import re
import threading
import time

from . import task_timeout

__all__ = ["CLIENT_LOGGER", "TRANSIENT_ERRORS", "TransientNotices"]

#: the logger of librdkafka's own messages (the ``logger`` of every client's config): without
#: one, librdkafka prints them to stderr (e.g. "BGQUEUE Purging N unserved events" when an
#: admin client is freed with a late answer queued), in the middle of a command's one-line error
CLIENT_LOGGER = logging.getLogger("speed_layer.kafka")

#: librdkafka's texts of the retriable broker errors (Kafka's ``RetriableException`` s) that
#: a fresh cluster or topic answers for its first seconds
TRANSIENT_ERRORS = ("Coordinator load in progress", "Coordinator not available", "Not coordinator",
                    "Leader not available", "Not leader for partition", "Not leader or follower")

_NOTICE = re.compile(r"^(?P<fac>\S+) \[(?P<client>[^\]]+)\].*?(?P<error>" +
                     "|".join(re.escape(e) for e in TRANSIENT_ERRORS) + r").*retrying\s*$", re.IGNORECASE | re.DOTALL)
#: a notice this long after the last one of the same client, facility and error starts anew
_QUIET_S = 30.0


class TransientNotices(logging.Filter):
    """Lowers librdkafka's WARNING notices of a transient broker error (see the module
    docstring) to DEBUG while they last less than ``WARN_AFTER_MS`` for one client,
    facility and error; the first one after that is a WARNING saying how long it has
    lasted, the later ones DEBUG again. Other records pass as they are."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        #: (client, facility, error) -> [first seen, last seen, warned] (monotonic s)
        self._seen: dict[tuple[str, str, str], list[float | bool]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        m = _NOTICE.match(message)
        if m is None:
            return True
        now = time.monotonic()
        key = (m["client"], m["fac"], m["error"].lower())
        with self._lock:
            seen = self._seen.get(key)
            if seen is None or now - seen[1] > _QUIET_S:
                seen = self._seen[key] = [now, now, False]
            seen[1] = now
            lasted_s = now - seen[0]
            if not seen[2] and lasted_s * 1000 >= task_timeout.WARN_AFTER_MS:
                seen[2] = True
                record.msg, record.args = "%s (still failing after %.1f s)", (message, lasted_s)
                return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


CLIENT_LOGGER.addFilter(TransientNotices())
