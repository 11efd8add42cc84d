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

import ast
from pathlib import Path

PACKAGE = "batch_layer"
ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of the package (a package's
    ``__init__.py`` is the package's name)."""
    out: dict[str, Path] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path) -> set[str]:
    """Every name ``module`` imports anywhere in its source (module level, in functions, under
    ``if TYPE_CHECKING:``): ``import a.b`` gives ``a.b``; ``from m import x`` gives ``m`` and
    ``m.x`` (``x`` may be a submodule), relative ``m`` resolved against ``module``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            out.add(source)
            out.update(f"{source}.{alias.name}" for alias in node.names)
    return out


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's other modules it imports."""
    modules = _modules()
    return {m: {t for t in _imported(m, p) if t in modules and t != m} for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan's
    algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One import cycle through ``component``'s first module, as ``[a, b, ..., a]``."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first, inside the component, back to start
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return component


def test_cycle_check_finds_a_cycle() -> None:
    """The check itself: a two-module cycle and a longer one are found, a chain is not."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "f"}, "f": set(), "g": {"f"}}
    assert _cycles(graph) == [["a", "b"], ["c", "d", "e"]]
    assert _cycle_path(graph, ["c", "d", "e"]) == ["c", "d", "e", "c"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_batch_layer_has_no_import_cycle() -> None:
    graph = _import_graph()
    assert f"{PACKAGE}.compiler" in graph and f"{PACKAGE}.translators._plan" in graph
    cycles = _cycles(graph)
    found = "\n".join(f"  {len(c)} modules {c}; e.g. {' -> '.join(_cycle_path(graph, c))}" for c in cycles)
    assert not cycles, f"batch_layer modules import each other in a cycle (lazy and TYPE_CHECKING imports count):\n{found}"


def test_no_batch_layer_module_is_over_500_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _modules().values()}
    big = {f: n for f, n in sorted(sizes.items()) if n > MAX_LINES}
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
