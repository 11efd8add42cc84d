"""Lake roots on an object store: ``s3://bucket/prefix`` URIs, their delta-rs storage
options, and the start-up check that the lake is reachable and writable.

Credentials and endpoint come from the standard AWS settings only (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_PROFILE`` and the shared config files), never from the URI; no message of this module
names a key. See docs/object-storage.md.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from batch_layer.delta.storage import delta_storage_options, s3_filesystem
from pipelines.preflight import UserError

__all__ = ["S3Lake", "LakeUnreachable", "is_object_store_uri", "parse_s3_lake",
           "delta_storage_options", "check_s3_lake"]

#: how long the start-up check may take before it names the lake unreachable
CHECK_TIMEOUT_S = 8.0


class LakeUnreachable(UserError):
    """The object-store lake cannot be used: endpoint down, bucket missing, credentials
    refused, or no write permission (one line naming the lake URI and the cause)."""


@dataclass(frozen=True)
class S3Lake:
    """``s3://<bucket>/<prefix>``: ``prefix`` without leading or trailing slashes."""

    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def table_uri(self, *parts: str) -> str:
        """The URI of a table (or folder) below the root: ``s3://bucket/prefix/a/b``."""
        return "/".join([self.uri, *(p.strip("/") for p in parts)])


def is_object_store_uri(lake: object) -> bool:
    """True for ``s3://``/``s3a://`` lake roots (anything else is a local path)."""
    return isinstance(lake, str) and lake.split("://", 1)[0].lower() in ("s3", "s3a") and "://" in lake


def parse_s3_lake(uri: str) -> S3Lake:
    """``s3://bucket/prefix`` (or ``s3a://``) as an :class:`S3Lake`.

    Raises :class:`UserError` for another scheme, a missing bucket, or credentials in the URI
    (``s3://key:secret@bucket``: they belong in the AWS settings)."""
    parts = urlsplit(uri)
    if parts.scheme.lower() not in ("s3", "s3a"):
        raise UserError(f"lake {uri!r}: not an s3:// URI")
    if "@" in parts.netloc:
        raise UserError("lake URI: credentials do not belong in the URI; set AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) instead")
    if not parts.netloc:
        raise UserError(f"lake {uri!r}: no bucket (expected s3://BUCKET/PREFIX)")
    return S3Lake(bucket=parts.netloc, prefix=parts.path.strip("/"))


def _cause(exc: BaseException) -> str:
    """A short cause from an S3 client error (pyarrow's messages carry the AWS error name)."""
    text = " ".join(str(exc).split())
    for needle, cause in (("NoSuchBucket", "the bucket does not exist"),
                          ("InvalidAccessKeyId", "the credentials were refused (unknown access key)"),
                          ("SignatureDoesNotMatch", "the credentials were refused (wrong secret key)"),
                          ("ACCESS_DENIED during HeadBucket", "the credentials were refused (or may not read the bucket)"),
                          ("ACCESS_DENIED", "access denied (no write permission?)"),
                          ("AccessDenied", "access denied (no write permission?)"),
                          ("Couldn't connect", "cannot connect to the endpoint"),
                          ("Connection refused", "cannot connect to the endpoint"),
                          ("curlCode: 7", "cannot connect to the endpoint"),
                          ("curlCode: 28", "the endpoint did not answer in time"),
                          ("HTTP response code: 404", "the bucket does not exist"),
                          ("HTTP response code: 403", "access denied")):
        if needle in text:
            return cause
    return text[:200]


def check_s3_lake(uri: str, env: dict[str, str] | None = None, *, write: bool = True) -> S3Lake:
    """Check within ~:data:`CHECK_TIMEOUT_S` that the lake at ``uri`` answers: the endpoint
    connects, the bucket exists, the credentials are accepted, and (``write``) a probe object
    under ``<prefix>/_duet_probe/`` can be written and deleted. Nothing else is written.

    Raises :class:`LakeUnreachable` with one line: ``lake s3://b/p: <cause> (endpoint ...)``."""
    from pyarrow import fs

    lake = parse_s3_lake(uri)
    env = dict(os.environ if env is None else env)
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    where = f" (endpoint {endpoint})" if endpoint else ""
    started = time.monotonic()
    try:
        s3 = s3_filesystem(env, connect_timeout=3.0, request_timeout=4.0, retries=1)
        info = s3.get_file_info(lake.bucket)
        if info.type == fs.FileType.NotFound:
            raise LakeUnreachable(f"lake {lake.uri}: the bucket {lake.bucket} does not exist{where}")
        if write:
            probe = f"{lake.table_uri('_duet_probe', uuid.uuid4().hex)}"[len("s3://"):]
            with s3.open_output_stream(probe) as out:
                out.write(b"duet write probe\n")
            s3.delete_file(probe)
    except LakeUnreachable:
        raise
    except OSError as exc:
        raise LakeUnreachable(f"lake {lake.uri}: {_cause(exc)}{where} "
                              f"[{time.monotonic() - started:.1f} s]") from None
    return lake
