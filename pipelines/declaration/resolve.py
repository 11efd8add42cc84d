"""Find the pipeline a command runs: ``--pipeline``, ``$DUET_PIPELINE``, ``[tool.duet]``, flights.

A reference is ``module:attribute`` (``module`` importable, ``attribute`` a :class:`Pipeline`
or a function returning one), or ``module`` alone when it has an attribute ``pipeline``.
The order, first match wins:

1. the ``--pipeline`` option;
2. ``$DUET_PIPELINE``;
3. ``pipeline = "module:attribute"`` under ``[tool.duet]`` in the nearest ``pyproject.toml``
   at or above the working directory; that file's folder is put on ``sys.path`` (so a project
   made by ``duet init`` runs from its folder without being installed), and its ``lake``
   key, when set, is the default lake root (relative to that folder);
4. :data:`DEFAULT_PIPELINE`, the flights example.
"""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.declaration.pipeline import Pipeline, PipelineError
from batch_layer.delta.storage import is_object_store

__all__ = ["DEFAULT_PIPELINE", "EXAMPLE_PIPELINES", "PIPELINE_ENV", "Project", "find_project", "load_pipeline",
           "resolve_pipeline", "project_modules", "project_roots"]

#: The pipeline of a command given none and run outside a ``[tool.duet]`` project.
DEFAULT_PIPELINE = "pipelines.examples.flights:pipeline"
PIPELINE_ENV = "DUET_PIPELINE"
#: folders :func:`load_pipeline` put on ``sys.path`` (projects that are not installed)
_PROJECT_ROOTS: set[Path] = set()
#: What ``duet ui`` shows when given no pipeline outside a duet project: both examples.
EXAMPLE_PIPELINES = ("pipelines.examples.flights:pipeline", "pipelines.examples.shop:pipeline")


@dataclass(frozen=True)
class Project:
    """A ``pyproject.toml`` with a ``[tool.duet]`` table.

    Attributes:
        root: its folder.
        pipeline: the ``pipeline`` reference, if any.
        lake: the ``lake`` root (absolute), if any.
    """

    root: Path
    pipeline: str | None
    lake: Path | str | None  # a local path, or an object-store URI (s3://bucket/prefix)


def find_project(start: Path | None = None) -> Project | None:
    """The nearest ``pyproject.toml`` with ``[tool.duet]`` at or above ``start`` (default the
    working directory), or ``None``.

    Raises:
        PipelineError: the file is not valid TOML, or ``[tool.duet]`` has an unknown key.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        path = folder / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            doc = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise PipelineError(f"{path}: not valid TOML ({exc})") from None
        table = doc.get("tool", {}).get("duet")
        if table is None:
            continue
        unknown = sorted(set(table) - {"pipeline", "lake"})
        if unknown:
            raise PipelineError(f"{path}: [tool.duet] has unknown key {unknown[0]!r}; allowed: pipeline, lake")
        lake = table.get("lake")
        if lake and is_object_store(lake):
            return Project(folder, table.get("pipeline"), str(lake))
        return Project(folder, table.get("pipeline"), (folder / lake).resolve() if lake else None)
    return None


def load_pipeline(ref: str, search_path: Path | None = None) -> Pipeline:
    """Import the pipeline ``ref`` (``module:attribute`` or ``module``).

    ``search_path`` is put first on ``sys.path`` (a project's folder).

    Raises:
        PipelineError: the module cannot be imported, has no such attribute, the attribute is
            not a Pipeline, or the declaration is wrong (one line each).
    """
    module_name, _, attr = ref.partition(":")
    attr = attr or "pipeline"
    if not module_name or not all(p.isidentifier() for p in module_name.split(".")) or not attr.isidentifier():
        raise PipelineError(f"--pipeline {ref!r}: expected module:attribute, e.g. {DEFAULT_PIPELINE}")
    if search_path is not None:
        _PROJECT_ROOTS.add(search_path.resolve())
        if str(search_path) not in sys.path:
            sys.path.insert(0, str(search_path))
    try:
        module = importlib.import_module(module_name)
    except PipelineError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise PipelineError(f"--pipeline {ref!r}: no module {exc.name!r} (is its folder on PYTHONPATH, or "
                                f"run from the project folder?)") from None
        raise PipelineError(f"--pipeline {ref!r}: importing {module_name} failed: {exc}") from exc
    try:
        value: Any = getattr(module, attr)
    except AttributeError:
        found = [n for n, v in vars(module).items() if isinstance(v, Pipeline)]
        raise PipelineError(f"--pipeline {ref!r}: module {module_name} has no attribute {attr!r}; "
                            f"its pipelines: {', '.join(found) or 'none'}") from None
    if not isinstance(value, Pipeline) and callable(value):
        value = value()
    if not isinstance(value, Pipeline):
        raise PipelineError(f"--pipeline {ref!r}: {attr} is a {type(value).__name__}, not a pipelines.Pipeline")
    return value


def resolve_pipeline(ref: str | None = None, cwd: Path | None = None) -> tuple[Pipeline, Project | None]:
    """The pipeline a command runs (see the module docstring) and the project it came from.

    Raises:
        PipelineError: see :func:`load_pipeline` and :func:`find_project`.
    """
    project = find_project(cwd)
    search = project.root if project is not None else None
    chosen = ref or os.environ.get(PIPELINE_ENV, "").strip() or (project.pipeline if project else None)
    return load_pipeline(chosen or DEFAULT_PIPELINE, search), project


def project_roots() -> list[Path]:
    """The project folders :func:`load_pipeline` put on ``sys.path`` (projects that are not
    installed): what a process importing the same pipeline needs on its ``PYTHONPATH``."""
    return sorted(_PROJECT_ROOTS)


def project_modules() -> list[Any]:
    """The imported modules that live in a project folder :func:`load_pipeline` put on
    ``sys.path`` (a project made by ``duet init`` and not installed). Spark's Python workers
    cannot import them: the batch layer ships them by value (cloudpickle)."""
    out = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and any(Path(file).resolve().is_relative_to(root) for root in _PROJECT_ROOTS):
            out.append(module)
    return out
