"""The CLI's Ctrl-C boundary (:func:`pipelines.cli.support.interrupts`), in process: one line
and exit status 130; a Ctrl-C that Python raised inside a finalizer (where it cannot
propagate, and was lost: ``duet run`` went on as if nothing happened) is delivered again;
py4j's logged tracebacks of the interrupt are dropped."""

from __future__ import annotations

import logging
import time

import pytest
import typer

from pipelines.cli.support import interrupts, setup_logging


class RaisesInItsFinalizer:
    """What Python does when the signal is handled while a finalizer runs (a ``__del__``, a
    weakref callback during a garbage collection)."""

    def __del__(self) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_is_one_line_and_status_130(capsys: pytest.CaptureFixture[str]) -> None:
    cleaned: list[bool] = []
    with pytest.raises(typer.Exit) as done, interrupts("run", lambda: "during the speed phase: all kept",
                                                       cleanup=lambda: cleaned.append(True)):
        raise KeyboardInterrupt
    assert done.value.exit_code == 130
    assert cleaned == [True]
    err = capsys.readouterr().err
    assert err.splitlines() == ["duet run: interrupted during the speed phase: all kept"], err


def test_a_ctrl_c_lost_in_a_finalizer_is_delivered_again(capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    with pytest.raises(typer.Exit) as done, interrupts("run", lambda: "during the load phase: kept"):
        RaisesInItsFinalizer()  # dropped at once: its KeyboardInterrupt is "unraisable"
        for _ in range(100):  # the command goes on meanwhile
            time.sleep(0.05)
    assert done.value.exit_code == 130
    assert time.monotonic() - start < 2
    captured = capsys.readouterr()
    assert "Exception ignored" not in captured.err and "Traceback" not in captured.err, captured.err
    assert captured.err.strip() == "duet run: interrupted during the load phase: kept"


def test_logged_tracebacks_of_the_interrupt_are_dropped() -> None:
    """py4j logs ``KeyboardInterrupt while sending command.`` and then the broken socket it
    leaves, each with a traceback, as ERRORs on the root logger."""
    setup_logging(verbose=False)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    for existing in root.handlers:  # the filter setup_logging put on the root's handlers
        for f in existing.filters:
            handler.addFilter(f)
    assert handler.filters, "setup_logging put no filter on the root logger's handlers"
    root.addHandler(handler)
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            logging.exception("KeyboardInterrupt while sending command.")
            try:
                raise BrokenPipeError(32, "Broken pipe")
            except BrokenPipeError:
                logging.getLogger("py4j.clientserver").exception("Exception occurred while shutting down connection")
        try:
            raise ValueError("a real error")
        except ValueError:
            logging.exception("kept")
    finally:
        root.removeHandler(handler)
    assert [r.getMessage() for r in records] == ["kept"]
