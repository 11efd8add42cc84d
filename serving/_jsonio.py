"""Small JSON file helpers shared by the serving modules."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_json", "read_json_object"]


def atomic_write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` as indented JSON to ``path`` via a temp file + ``os.replace`` (readers
    never see a partial file). Creates the parent folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json_object(path: Path, error: type[Exception]) -> dict[str, Any] | None:
    """The JSON object in ``path``, or ``None`` when the file does not exist.

    Raises:
        error: (the caller's exception class) the file is not valid JSON or does not hold
            a JSON object; the message names the file.
    """
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise error(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise error(f"{path} must hold a JSON object")
    return doc
