"""The shape of the ``batch_layer`` package, without importing it (an ``ast`` walk of its
sources, no Spark): its modules import each other one way (no import cycle, counting
function-level and ``if TYPE_CHECKING:`` imports too), and no module is over 500 lines.

The layers, bottom up: ``errors``, ``model`` (the shared model) and general's leaves
(``general.store_rows``, ``general.topology``); the worker-side modules of ``translators/``
(``_records`` ... ``_folds``, ``_fused``, the ``_*_runtime`` modules); ``translators._plan``
(the driver-side node representations and ``ExecContext``); ``views``; the translators and
the general executor (``general.run``, ``general.plan``); ``compiler`` on top.
"""
from __future__ import annotations

from tests.package_shape import cycle_path, cycles, cycles_found, import_graph, long_modules, modules

PACKAGE = "batch_layer"
MAX_LINES = 500


def test_cycle_check_finds_a_cycle() -> None:
    """The check itself: a two-module cycle and a longer one are found, a chain is not."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "f"}, "f": set(), "g": {"f"}}
    assert cycles(graph) == [["a", "b"], ["c", "d", "e"]]
    assert cycle_path(graph, ["c", "d", "e"]) == ["c", "d", "e", "c"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_batch_layer_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert f"{PACKAGE}.compiler" in graph and f"{PACKAGE}.translators._plan" in graph
    found = cycles_found(graph)
    assert not found, f"batch_layer modules import each other in a cycle (lazy and TYPE_CHECKING imports count):\n{found}"


def test_no_batch_layer_module_is_over_500_lines() -> None:
    big = long_modules(PACKAGE, MAX_LINES)
    assert not big, f"batch_layer files over {MAX_LINES} lines (split them by what they own): {big}"


def test_the_package_face_is_lazy_and_complete() -> None:
    """``import batch_layer`` imports no pyspark, pandas nor the compiler; every name of
    ``__all__`` then resolves to the object of the module that defines it."""
    import subprocess
    import sys

    code = (
        "import sys, batch_layer\n"
        "heavy = [m for m in ('pyspark', 'pandas', 'batch_layer.compiler') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "for name in batch_layer.__all__:\n"
        "    obj = getattr(batch_layer, name)\n"
        "    assert getattr(sys.modules[obj.__module__], name) is obj, name\n"
        "print(len(batch_layer.__all__))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "10"
