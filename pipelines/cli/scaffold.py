"""``duet init PATH``: scaffold a new pipeline project (the command and the scaffolding).

The project runs as created (``cd PATH && duet run``, ``pytest``): a ``pyproject.toml`` whose
``[tool.duet]`` table names the pipeline and the lake, a module ``<name>_pipeline`` with an
example topology (sensor readings joined with a sensors table, a windowed and a plain view),
its declaration and deterministic sample data, tests with the ``TopologyTestDriver``, a README
and a ``.gitignore``.

The files are the templates in ``pipelines/cli/templates/project`` (shipped as package data),
where ``{{name}}`` is the pipeline name and ``{{package}}`` the module (``<name>_pipeline``);
plain text substitution, no template engine.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipelines.cli.support import app, make_console, user_errors
from pipelines.preflight import UserError

__all__ = ["init_project", "pipeline_name_from", "check_name", "TEMPLATES"]

#: a pipeline name (as :class:`pipelines.declaration.pipeline.Pipeline` allows), at most 64 characters
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
#: names the new project cannot take: its package would be the project's own dependency
_RESERVED = frozenset({"duet"})
_ALLOWED = "lower-case letters, digits and '_', starting with a letter, at most 64 characters (e.g. 'sensors')"

#: ``(template, file written)``: templates under ``pipelines/cli/templates/project``; the written
#: path is formatted with ``package`` (``<name>_pipeline``)
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("pyproject.toml.tmpl", "pyproject.toml"),
    ("README.md.tmpl", "README.md"),
    ("gitignore.tmpl", ".gitignore"),
    ("pipeline/__init__.py.tmpl", "{package}/__init__.py"),
    ("pipeline/sample.py.tmpl", "{package}/sample.py"),
    ("tests/test_pipeline.py.tmpl", "tests/test_{package}.py"),
)


def pipeline_name_from(folder: str) -> str:
    """A pipeline name made from a folder name: lower-cased, every run of other characters
    than ``[a-z0-9]`` turned into one ``_``, leading digits and ``_`` dropped
    (``"My Sensors-2"`` -> ``"my_sensors_2"``); ``""`` when nothing is left."""
    name = re.sub(r"[^a-z0-9]+", "_", folder.lower())
    return name.lstrip("_0123456789").rstrip("_")[:64].rstrip("_")


def check_name(name: str) -> str:
    """``name`` when it is a usable pipeline name.

    Raises:
        UserError: it is not (the message says what is allowed).
    """
    if not _NAME.match(name):
        raise UserError(f"pipeline name {name!r} is not allowed: use {_ALLOWED}")
    if name in _RESERVED:
        raise UserError(f"pipeline name {name!r} is taken (the project depends on the package of that name); "
                        f"choose another one with --name")
    return name


def _render(text: str, name: str) -> str:
    out = text.replace("{{name}}", name).replace("{{package}}", f"{name}_pipeline")
    if "{{" in out:  # a template names a placeholder this function does not know
        raise AssertionError(f"unknown placeholder in a project template near {out[out.index('{{'):][:40]!r}")
    return out


def init_project(path: Path, name: str | None = None, *, force: bool = False) -> list[Path]:
    """Create a pipeline project in the folder ``path`` (created with its parents).

    Args:
        path: the project's folder: absent or empty (unless ``force``).
        name: the pipeline name (``[a-z][a-z0-9_]*``); default: made from the folder's name
            (:func:`pipeline_name_from`). The module is ``<name>_pipeline``.
        force: write into a folder that is not empty (files of the same names are
            overwritten; other files are kept).

    Returns:
        The files written (absolute paths), in the order of :data:`TEMPLATES`.

    Raises:
        UserError: ``path`` is a file, or a folder that is not empty and ``force`` is false;
            the name is not allowed, or none can be made from the folder's name.
    """
    root = Path(path).expanduser().resolve()
    if name is None:
        name = pipeline_name_from(root.name)
        if not name:
            raise UserError(f"cannot make a pipeline name from the folder name {root.name!r}: pass --name NAME "
                            f"({_ALLOWED})")
    check_name(name)
    if root.exists() and not root.is_dir():
        raise UserError(f"{root} is a file: give the path of a new (or empty) folder")
    if root.is_dir() and any(root.iterdir()) and not force:
        raise UserError(f"{root} is not empty: give a new folder, or pass --force to write the project's files "
                        f"into it (files of the same names are overwritten)")
    package = f"{name}_pipeline"
    source = resources.files("pipelines.cli") / "templates" / "project"
    # render every file before writing any: nothing half-written when a template is missing
    files = [(root / target.format(package=package), _render((source / template).read_text(encoding="utf-8"), name))
             for template, target in TEMPLATES]
    for out, text in files:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8", newline="\n")
    return [out for out, _ in files]


# --------------------------------------------------------------------------- init
@app.command()
def init(
    path: Annotated[Path, typer.Argument(help="Folder of the new project (created; must be empty or absent).")],
    name: Annotated[
        Optional[str], typer.Option("--name", help="Pipeline name, [a-z][a-z0-9_]* (default: from the folder name).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a folder that is not empty.")] = False,
) -> None:
    """Scaffold a new pipeline project: a module with an example topology, its views and
    expectations, sample data, a test with the TopologyTestDriver, and a `[tool.duet]` entry.
    It runs as created: `cd PATH && duet run`."""
    console = make_console()
    with user_errors("init"):
        written = init_project(path, name, force=force)
    root = path.resolve()
    console.print(f"created {root}:")
    for f in written:
        console.print(f"  {f.relative_to(root)}")
    console.print(f"next: [bold]cd {path} && duet run[/] (then `duet serve`, `duet ui`, `pytest`)")
