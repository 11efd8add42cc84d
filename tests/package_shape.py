"""What the package-shape tests share (``tests/test_*/test_*package_shape.py``): a package's
modules and the imports between them, read from its sources with ``ast`` (nothing imported),
and the import cycles among them (Tarjan's strongly connected components)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(package: str) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of ``package`` (a package's
    ``__init__.py`` is the package's name)."""
    out: dict[str, Path] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported(module: str, path: Path) -> set[str]:
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


def import_graph(package: str) -> dict[str, set[str]]:
    """Module of ``package`` -> the package's other modules it imports."""
    found = modules(package)
    return {m: {t for t in imported(m, p) if t in found and t != m} for m, p in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
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


def cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
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


def cycles_found(graph: dict[str, set[str]]) -> str:
    """The import cycles of ``graph``, one line each with an example path (``""``: none)."""
    return "\n".join(f"  {len(c)} modules {c}; e.g. {' -> '.join(cycle_path(graph, c))}" for c in cycles(graph))


def long_modules(package: str, max_lines: int = 500) -> dict[str, int]:
    """``{file: lines}`` of the modules of ``package`` over ``max_lines`` lines."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules(package).values()}
    return {f: n for f, n in sorted(sizes.items()) if n > max_lines}
