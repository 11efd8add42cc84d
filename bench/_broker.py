"""The broker of a bench: ``--bootstrap`` when given, else an embedded one for the run.

    from _broker import bench_broker   # a bench run as a script has bench/ on sys.path

    with bench_broker(args.bootstrap) as (bootstrap, broker_pid):
        ...
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def bench_broker(bootstrap: str | None, work_dir: Path | None = None) -> Iterator[tuple[str, int | None]]:
    """Yield ``(bootstrap servers, broker pid)``: ``bootstrap`` and ``None`` when given, else
    those of an :class:`~speed_layer.admin.EmbeddedKafka` (its log dir in
    ``work_dir``, default a temp dir of its own) started here and stopped on exit."""
    if bootstrap:
        yield bootstrap, None
        return
    from speed_layer.admin import EmbeddedKafka

    broker = EmbeddedKafka(work_dir)
    broker.start()
    try:
        yield broker.bootstrap_servers, broker.pid
    finally:
        broker.stop()
