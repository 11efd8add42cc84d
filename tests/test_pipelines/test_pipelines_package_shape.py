"""The shape of the ``pipelines`` package, without importing it (an ``ast`` walk of its
sources, as ``tests/test_batch_layer/test_package_shape.py`` does for the batch layer): its
modules import each other one way (no import cycle, counting function-level and
``if TYPE_CHECKING:`` imports too), its rooms import one way, and no module is over 500
lines.

The rooms, bottom up (a module imports its own room and the rooms below it, never one above):

* ``pipelines.preflight`` (``UserError``, the checks a command makes first) and
  ``pipelines.progress`` (the ``Reporter`` protocol): leaves;
* ``declaration`` (``Pipeline``, its samples, resolution, topology reading), with the package
  face ``pipelines`` that re-exports it;
* ``lake`` (the lake root, its lock, the record of what was loaded);
* ``produce`` (the topics a pipeline declares, the load and the live replay into them);
* ``speed`` (the speed service: one or N instances, placement, the HTTP server);
* ``job`` (the main job and its phases);
* ``dagster`` (the Dagster definitions, their client and home);
* ``cli`` (the ``duet`` commands, the scaffold);
* ``examples`` (the flights and shop pipelines: nothing else imports them).
"""
from __future__ import annotations

import subprocess
import sys

from pathlib import Path

from tests.package_shape import cycles_found, import_graph, long_modules, modules

PACKAGE = "pipelines"
ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 500
#: room -> its rank, bottom up (a module's room is the first name under ``pipelines``)
ROOMS = {"preflight": 0, "progress": 0, "declaration": 1, "lake": 2, "produce": 3, "speed": 4, "job": 5,
         "dagster": 6, "cli": 7, "examples": 8}


def _room(module: str) -> str:
    """``pipelines.speed.server`` -> ``speed``; the package face ``pipelines`` is the
    declaration's (it re-exports it)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "declaration"


def test_every_module_is_in_a_room() -> None:
    assert set(ROOMS) == {_room(m) for m in modules(PACKAGE)}, "a new top-level module or room: give it a rank in ROOMS"
    top = sorted(p.name for p in (ROOT / PACKAGE).glob("*.py"))
    assert top == ["__init__.py", "preflight.py", "progress.py"], top


def test_pipelines_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert f"{PACKAGE}.job.main_job" in graph and f"{PACKAGE}.speed.service" in graph
    found = cycles_found(graph)
    assert not found, f"pipelines modules import each other in a cycle (lazy and TYPE_CHECKING imports count):\n{found}"


def test_rooms_import_one_way() -> None:
    upward = sorted(
        f"{m} ({_room(m)}) imports {t} ({_room(t)})"
        for m, targets in import_graph(PACKAGE).items() for t in targets
        if ROOMS[_room(t)] > ROOMS[_room(m)]
    )
    assert not upward, "a room imports a room above it:\n  " + "\n  ".join(upward)


def test_the_framework_never_imports_the_examples() -> None:
    users = sorted(m for m, targets in import_graph(PACKAGE).items()
                   if _room(m) != "examples" and any(_room(t) == "examples" for t in targets))
    assert not users, users


def test_no_pipelines_module_is_over_500_lines() -> None:
    big = long_modules(PACKAGE, MAX_LINES)
    assert not big, f"pipelines files over {MAX_LINES} lines (split them by what they own): {big}"


def test_the_public_names_keep_working() -> None:
    """``from pipelines import ...`` imports no Dagster, Spark nor Kafka client; the names of
    ``__all__`` are the declaration's; ``pipelines.dagster.definitions`` and the console
    script's ``pipelines.cli:app`` resolve, and ``import pipelines.dagster`` alone imports no
    Dagster."""
    code = (
        "import sys, pipelines\n"
        "from pipelines import Pipeline, Source, View, Partitioning, Sample, SourceRecord, Highlights, PipelineError\n"
        "heavy = [m for m in ('dagster', 'pyspark', 'confluent_kafka', 'typer') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "for name in pipelines.__all__:\n"
        "    assert getattr(pipelines, name).__module__.startswith('pipelines.declaration.'), name\n"
        "import pipelines.dagster\n"
        "assert 'dagster' not in sys.modules\n"
        "assert callable(pipelines.dagster.definitions)\n"
        "from pipelines.cli import app\n"
        "import typer\n"
        "assert isinstance(app, typer.Typer)\n"
        "print(len(pipelines.__all__))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "8"
