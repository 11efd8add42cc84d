"""The modules that fork a JVM with a ``preexec_fn`` register CPython's at-fork handlers first.

``subprocess`` with a ``preexec_fn`` runs the interpreter's at-fork handlers around the fork.
``concurrent.futures.thread`` registers a pair (acquire its lock before, release it after)
when first imported; imported by another thread while one forks (``duet run`` imports the
batch layer and Great Expectations beside the thread that starts the Spark JVM), the release
runs without the acquire and stderr gets "Exception ignored in: <built-in method release of
_thread.lock> ... RuntimeError: release unlocked lock". The race itself is a window of
microseconds (not reproducible on demand), so the test checks what closes it: the handlers
are registered by the time the forking module is imported, in a fresh interpreter.
"""
from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["batch_layer.spark", "speed_layer.runtime.kraft_jvm"])
def test_the_module_that_forks_a_jvm_registers_the_at_fork_handlers_first(module: str) -> None:
    code = (f"import sys; assert 'concurrent.futures.thread' not in sys.modules; import {module}; "
            "print('concurrent.futures.thread' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
