"""Where a lake location lives, local disk or an S3-compatible object store, and the few
file operations duet does outside Delta (its JSON files, listing, removing a table).

A location is a local path (``str`` or ``Path``, kept as before) or an object-store URI
``s3://bucket/key`` (``s3a://`` is the same place; a URI folded by ``Path()``, ``s3:/b/k``,
too). Each consumer gets its own form:

* delta-rs: :func:`delta_uri` (``s3://``) with :func:`storage_options`;
* Spark (Hadoop's S3A file system, ``hadoop-aws``): :func:`spark_uri` (``s3a://``);
* pyarrow, for the JSON files: :func:`s3_filesystem`.

Endpoint, region and credentials come from the standard AWS settings of the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_ENDPOINT_URL[_S3]``, ``AWS_REGION``, ``AWS_PROFILE``), never from the URI; nothing here
puts a key in a message. Local paths take exactly the code paths they took before
(docs/object-storage.md, "The lake location").
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

__all__ = ["is_object_store", "delta_uri", "spark_uri", "storage_options", "delta_storage_options",
           "s3_filesystem", "read_text", "write_text", "exists", "remove", "list_names"]

#: ``s3://``, ``s3a://``, or either folded by ``Path()`` (``s3:/bucket``)
_OBJECT_RE = re.compile(r"^(s3a?):/+(.*)$", re.IGNORECASE)


def is_object_store(location: str | Path | None) -> bool:
    """True for an ``s3://``/``s3a://`` location (also when ``Path()`` folded it to ``s3:/``)."""
    return location is not None and bool(_OBJECT_RE.match(str(location)))


def _key(location: str | Path) -> str:
    """``bucket/key`` of an object-store location, without trailing ``/``."""
    m = _OBJECT_RE.match(str(location))
    if m is None:
        raise ValueError(f"{location!s} is not an s3:// location")
    return m.group(2).rstrip("/")


def delta_uri(location: str | Path) -> str:
    """The location as delta-rs takes it: ``s3://bucket/key``; a local path as ``str``."""
    return f"s3://{_key(location)}" if is_object_store(location) else str(location)


def spark_uri(location: str | Path) -> str:
    """The location as Spark takes it: ``s3a://bucket/key`` (Hadoop's S3A file system); a
    local path or another URI as ``str``."""
    return f"s3a://{_key(location)}" if is_object_store(location) else str(location)


def delta_storage_options(env: dict[str, str] | None = None) -> dict[str, str]:
    """delta-rs ``storage_options`` for an S3 location from the AWS settings in ``env``
    (default ``os.environ``): delta-rs reads ``AWS_*`` from the environment itself, so this
    adds only what the environment cannot say: plain-http endpoints are allowed when the
    endpoint is ``http://``; a default region; commits use the store's conditional put
    (``If-None-Match: *``), so two writers never overwrite each other's log entry
    (docs/object-storage.md, "Commit protocol")."""
    env = os.environ if env is None else env
    options = {"conditional_put": "etag"}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or ""
    if endpoint.startswith("http://"):
        options["allow_http"] = "true"
    if not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
        options["region"] = "us-east-1"
    return options


def storage_options(location: str | Path) -> dict[str, str] | None:
    """delta-rs ``storage_options`` for ``location``: :func:`delta_storage_options` on an
    object store, ``None`` (delta-rs's defaults, as before) on local disk."""
    return delta_storage_options() if is_object_store(location) else None


def s3_filesystem(env: dict[str, str] | None = None, *, connect_timeout: float | None = None,
                  request_timeout: float | None = None, retries: int | None = None) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` for the AWS settings in ``env`` (default
    ``os.environ``): endpoint from ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, region from
    ``AWS_REGION``/``AWS_DEFAULT_REGION`` (default ``us-east-1``), keys from
    ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` when set, else the
    AWS SDK's default chain (``AWS_PROFILE``, ``~/.aws``, instance roles). Timeouts in s."""
    from pyarrow import fs

    env = dict(os.environ if env is None else env)
    kwargs: dict[str, Any] = {"region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host.rstrip("/"), scheme=scheme)
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        kwargs.update(access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
                      session_token=env.get("AWS_SESSION_TOKEN"))
    if connect_timeout is not None:
        kwargs["connect_timeout"] = connect_timeout
    if request_timeout is not None:
        kwargs["request_timeout"] = request_timeout
    if retries is not None:
        kwargs["retry_strategy"] = fs.AwsStandardS3RetryStrategy(max_attempts=retries)
    return fs.S3FileSystem(**kwargs)


def read_text(location: str | Path) -> str | None:
    """The text (UTF-8) of the file at ``location``; ``None`` when there is none.

    Raises:
        OSError: it exists but cannot be read (the store refuses, is unreachable...)."""
    if not is_object_store(location):
        path = Path(location)
        return path.read_text(encoding="utf-8") if path.exists() else None
    from pyarrow import fs

    s3 = s3_filesystem()
    if s3.get_file_info(_key(location)).type != fs.FileType.File:
        return None
    with s3.open_input_stream(_key(location)) as stream:
        return stream.read().decode("utf-8")


def write_text(location: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) at ``location``, replacing a file there; readers see the old or
    the new content, never a part: locally a temporary file renamed over it, on an object
    store one ``PutObject`` (atomic by S3's semantics). Creates a local parent folder.

    Raises:
        OSError: it cannot be written."""
    if is_object_store(location):
        with s3_filesystem().open_output_stream(_key(location)) as out:
            out.write(text.encode("utf-8"))
        return
    import tempfile

    path = Path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def exists(location: str | Path) -> bool:
    """A file or a non-empty folder (an object-store prefix with objects) is at ``location``."""
    if not is_object_store(location):
        return Path(location).exists()
    from pyarrow import fs

    s3 = s3_filesystem()
    info = s3.get_file_info(_key(location))
    if info.type == fs.FileType.File:
        return True
    return bool(list_names(location))


def remove(location: str | Path) -> None:
    """Remove the file or the folder (every object under the prefix) at ``location``; nothing
    there is no error."""
    if not is_object_store(location):
        path = Path(location)
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        return
    from pyarrow import fs

    s3 = s3_filesystem()
    key = _key(location)
    info = s3.get_file_info(key)
    if info.type == fs.FileType.File:
        s3.delete_file(key)
    elif info.type == fs.FileType.Directory:
        s3.delete_dir(key)


def list_names(folder: str | Path) -> list[str]:
    """The names of the entries directly in ``folder``, sorted; ``[]`` when it is missing."""
    if not is_object_store(folder):
        path = Path(folder)
        return sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    from pyarrow import fs

    infos = s3_filesystem().get_file_info(fs.FileSelector(_key(folder), allow_not_found=True))
    return sorted(i.base_name for i in infos)
