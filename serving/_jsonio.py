"""Small JSON file helpers shared by the serving modules; a file is a local path or an
object-store location (``s3://bucket/key``, :mod:`batch_layer.delta.storage`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from batch_layer.delta.storage import read_text, write_text

__all__ = ["atomic_write_json", "read_json_object"]


def atomic_write_json(path: Path | str, doc: Any) -> None:
    """Write ``doc`` as indented JSON to ``path``; readers never see a partial file (locally a
    temp file + ``os.replace``, creating the parent folder; on an object store one
    ``PutObject``).

    Raises:
        OSError: it cannot be written."""
    write_text(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def read_json_object(path: Path | str, error: type[Exception]) -> dict[str, Any] | None:
    """The JSON object in ``path``, or ``None`` when the file does not exist.

    Raises:
        error: (the caller's exception class) the file is not valid JSON or does not hold
            a JSON object; the message names the file.
        OSError: it exists but cannot be read.
    """
    text = read_text(path)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise error(f"{path} must hold a JSON object")
    return doc
