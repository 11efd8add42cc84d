"""The lake root a command works on (``--lake``, ``$DUET_LAKE``, a project's
``[tool.duet] lake``, ``<repo>/lake``); a pipeline's tables live in its folder of it
(:meth:`Pipeline.lake <pipelines.declaration.pipeline.Pipeline.lake>`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["resolve_lake"]


def resolve_lake(lake: str | Path | None, default: Path | None = None) -> Path:
    """The lake root: ``lake`` as an absolute path, else ``$DUET_LAKE``, else ``default``
    (a project's ``[tool.duet] lake``), else ``<repo>/lake``. A pipeline's tables live in
    ``<root>/<pipeline name>`` (:meth:`Pipeline.lake`)."""
    from speed_layer.runtime.paths import default_lake

    _refuse_object_store(str(lake) if lake else (os.environ.get("DUET_LAKE") or str(default or "")))
    if lake:
        return Path(lake).expanduser().resolve()
    if default is not None and not os.environ.get("DUET_LAKE"):
        return default
    return default_lake()


def _refuse_object_store(text: str) -> None:
    """An ``s3://`` root (typer's ``Path`` option makes it ``s3:/...``): checked first (a bad
    endpoint, bucket, credentials or permission is one line naming it), then refused with a
    :class:`UserError`: the commands read and write the lake through local paths still
    (docs/object-storage.md, "Status"), and ``Path("s3://b/p")`` would silently be a
    local folder named ``s3:``."""
    import re

    match = re.match(r"^(s3a?):/+(.*)$", text, re.IGNORECASE)
    if not match:
        return
    from pipelines.lake.uri import check_s3_lake
    from pipelines.preflight import UserError

    uri = f"{match[1].lower()}://{match[2]}"
    lake = check_s3_lake(uri)
    raise UserError(f"lake {lake.uri}: reachable and writable, but duet's commands do not run on an "
                    "object-store lake yet (docs/object-storage.md, \"Status\"); use a local --lake")
