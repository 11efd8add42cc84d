"""The lake root a command works on (``--lake``, ``$DUET_LAKE``, a project's
``[tool.duet] lake``, ``<repo>/lake``); a pipeline's tables live in its folder of it
(:meth:`Pipeline.lake <pipelines.declaration.pipeline.Pipeline.lake>`).

A root is a local ``Path`` or an object-store URI ``s3://bucket/prefix`` (a ``str``,
:mod:`batch_layer.delta.storage`; docs/object-storage.md)."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["resolve_lake", "LakeRoot"]

#: a lake root or a pipeline's folder of it: a local path, or ``s3://bucket/prefix``
LakeRoot = Path | str

_S3 = re.compile(r"^(s3a?):/+(.*)$", re.IGNORECASE)


def resolve_lake(lake: str | Path | None, default: Path | str | None = None, *, write: bool = True) -> LakeRoot:
    """The lake root: ``lake``, else ``$DUET_LAKE``, else ``default`` (a project's
    ``[tool.duet] lake``), else ``<repo>/lake``. A local root is an absolute ``Path``; an
    ``s3://``/``s3a://`` root (typer's ``Path`` option folds it to ``s3:/``; both schemes
    name the same place) is checked first (:func:`pipelines.lake.uri.check_s3_lake`: endpoint,
    bucket, credentials and, with ``write``, write permission: one line naming the cause,
    within ~8 s; once per root and process) and returned as ``"s3://bucket/prefix"``. Readers
    (``duet query``, ``duet serve``) pass ``write=False``: a read-only identity serves.

    Raises:
        LakeUnreachable: an object-store root that cannot be used (a :class:`UserError`)."""
    from speed_layer.runtime.paths import default_lake

    env = os.environ.get("DUET_LAKE")
    chosen = lake if lake else (env or default)
    if chosen and _S3.match(str(chosen)):
        return _object_store_root(str(chosen), write)
    if lake:
        return Path(lake).expanduser().resolve()
    if env:
        return default_lake()
    if default is not None:
        return default
    return default_lake()


#: the object-store roots this process checked: True with write permission, False for reading
_CHECKED: dict[str, bool] = {}


def _object_store_root(text: str, write: bool) -> str:
    from batch_layer.spark_s3a import want_s3a_jars
    from pipelines.lake.uri import check_s3_lake, parse_s3_lake

    want_s3a_jars()  # a Spark session this process starts reads s3a://

    match = _S3.match(text)
    assert match is not None
    uri = parse_s3_lake(f"{match[1].lower()}://{match[2]}").uri
    done = _CHECKED.get(uri)
    if done is None or (write and not done):
        check_s3_lake(uri, write=write)
        _CHECKED[uri] = write
    return uri
