"""A blocking client call the caller stops waiting for after a bound.

Some librdkafka calls can block forever when no broker answers: a transactional
producer's ``send_offsets_to_transaction`` after its coordinator timed out (seen in
``bench/faults/broker_outage.py``), a consumer's ``close()`` while one of its offset
commits is still looking for the group coordinator (librdkafka issue #3740, open). Such a
call runs in a daemon thread of its own; when it has not returned within the bound the
caller goes on without it and the call is left in that thread (the client it belongs to
must not be used again: confluent-kafka serializes the calls of one client).
"""
from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["run_bounded"]


def run_bounded(what: str, call: Callable[[], object], timeout_s: float) -> tuple[bool, BaseException | None]:
    """Run ``call`` in a daemon thread named ``what`` and wait for it at most ``timeout_s``
    seconds.

    Returns:
        ``(returned, error)``: whether the call returned within the bound, and the
        exception it raised (None when it returned normally or has not returned).
    """
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome.append(exc)

    worker = threading.Thread(target=run, name=what, daemon=True)
    worker.start()
    worker.join(max(0.0, timeout_s))
    if not outcome:
        return False, None
    return True, outcome[0]
