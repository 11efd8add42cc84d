"""The state of a streams client (Kafka's ``KafkaStreams.State`` with its valid
transitions, ``KafkaStreams#setState``, ``#waitOnState`` and the client's
``StreamStateListener``, which derives RUNNING/REBALANCING from the stream threads'
states).

CREATED -> REBALANCING <-> RUNNING -> PENDING_SHUTDOWN -> NOT_RUNNING, and PENDING_ERROR ->
ERROR after a thread failed and the uncaught exception handler chose to shut down. Times
are s (``timeout_s``).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Callable

__all__ = ["TRANSITIONS", "ClientState"]

log = logging.getLogger("speed_layer.streams")

#: state -> the states it may move to (Kafka's ``KafkaStreams.State#isValidTransition``)
TRANSITIONS: dict[str, set[str]] = {
    "CREATED": {"REBALANCING", "PENDING_SHUTDOWN", "PENDING_ERROR"},
    "REBALANCING": {"RUNNING", "PENDING_SHUTDOWN", "PENDING_ERROR"},
    "RUNNING": {"REBALANCING", "PENDING_SHUTDOWN", "PENDING_ERROR"},
    "PENDING_SHUTDOWN": {"NOT_RUNNING"},
    "NOT_RUNNING": set(),
    "PENDING_ERROR": {"ERROR"},
    "ERROR": set(),
}


class ClientState:
    """The state of the streams client of ``application_id``, starting CREATED.

    Attributes:
        state: the current state (a key of :data:`TRANSITIONS`).
        lock: the client's lock (re-entrant): held while the state changes; the client
            holds it too while it changes its threads.
        listener: ``listener(new_state, old_state)`` after every change (Kafka's
            ``KafkaStreams.StateListener``), None for none.
    """

    def __init__(self, application_id: str) -> None:
        self.application_id = application_id
        self.state = "CREATED"
        self.lock = threading.RLock()
        self.listener: Callable[[str, str], None] | None = None

    def set(self, new: str) -> bool:
        """Move to ``new`` if that is a valid transition (else nothing: False), then tell
        the listener (a failing listener is logged, never raised)."""
        with self.lock:
            old = self.state
            if new == old or new not in TRANSITIONS[old]:
                return False
            self.state = new
        log.info("stream-client %s: state %s -> %s", self.application_id, old, new)
        if self.listener is not None:
            try:
                self.listener(new, old)
            except Exception:  # noqa: BLE001 - a listener must not break the client
                log.exception("state listener failed")
        return True

    def threads_changed(self, thread_states: Callable[[], Iterable[str]]) -> None:
        """A stream thread changed state (Kafka's ``StreamStateListener#onChange``): while
        REBALANCING or RUNNING, the client is RUNNING when every thread not DEAD is (and
        one is), else REBALANCING. ``thread_states``: the states of the client's stream
        threads, read under :attr:`lock`."""
        with self.lock:
            if self.state not in ("REBALANCING", "RUNNING"):
                return
            alive = [s for s in thread_states() if s != "DEAD"]
            running = bool(alive) and all(s == "RUNNING" for s in alive)
        self.set("RUNNING" if running else "REBALANCING")

    def wait_for(self, states: Iterable[str], timeout_s: float | None) -> bool:
        """Wait until the state is one of ``states`` (Kafka's ``waitOnState``): False after
        ``timeout_s`` seconds (None: no limit) without it, polling every 50 ms."""
        wanted = set(states)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.state not in wanted:
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True
