"""``retry_broker_call`` leaves no reference cycle behind: after a retried error and a
success, the callers' frames and their locals are freed on return (by reference counting,
not only by the cyclic garbage collector, which a stream thread runs rarely)."""
from __future__ import annotations

import gc
import weakref
from typing import Iterator

import pytest

from speed_layer.runtime.task_timeout import NotYet, TaskTimeout, retry_broker_call


class _Held:
    """Stands for what a caller holds while it calls the broker (a producer...)."""


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _caller(failures: int) -> "weakref.ref[_Held]":
    held = _Held()
    left = [failures]

    def attempt(request_s: float) -> str:
        if left[0]:
            left[0] -= 1
            raise NotYet("topic not in the metadata yet")
        return "ok"

    timeouts = TaskTimeout(task_timeout_ms=5_000, retry_backoff_ms=1, max_block_ms=100)
    assert retry_broker_call("probe", attempt, timeouts) == "ok"
    return weakref.ref(held)


@pytest.mark.parametrize("failures", [0, 1, 3])
def test_callers_locals_are_freed_on_return_after_retries(no_cyclic_gc: None, failures: int) -> None:
    held = _caller(failures)
    assert held() is None, "a retried error kept the caller's frame alive"
