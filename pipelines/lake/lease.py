"""The lake lock on an object store: a lease object (docs/object-storage.md, "The lake lock
on an object store").

Object stores have no ``flock``. A pipeline folder ``s3://bucket/prefix/<name>`` is locked by
the object ``<folder>/.duet.lock``, holding the holder's pid, host, command line, start time
and the lease's expiry (JSON, epoch s):

* taking it: ``PutObject`` with ``If-None-Match: *``: exactly one of two racing writers
  creates it (the other gets 412 Precondition Failed);
* holding it: a daemon thread renews it every ``ttl_s / 3`` with ``PutObject`` and
  ``If-Match: <its ETag>``, moving the expiry ``ttl_s`` ahead; a renewal refused (412: the
  lease was taken over after the holder stalled longer than ``ttl_s``) is logged as an error
  and the holder's :attr:`LeaseLock.lost` is set;
* a second writer reads the object: an unexpired lease fails with :class:`LakeBusy` naming the
  holder; an expired one (its holder died without releasing it, or stalled) is taken over with
  ``If-Match: <its ETag>`` and the one-line "stale lock" warning, so that of two writers
  finding the same stale lease one wins;
* releasing it: ``DeleteObject`` with ``If-Match: <its ETag>`` (a lease taken over meanwhile
  stays).

A holder killed with ``kill -9`` blocks the folder until its lease expires (``ttl_s``, default
60 s), not forever. The client is boto3 with the standard AWS settings
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, keys, ``AWS_PROFILE``), path-style addressing.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from pipelines.lake.lock import LOCK_FILE, LakeBusy, LockHolder

__all__ = ["LEASE_TTL_S", "LEASE_ENV", "lease_ttl_s", "LeaseLock", "lease_holder"]

log = logging.getLogger(__name__)

#: how long a lease lasts without renewal (s) by default; the holder renews it every third of that
LEASE_TTL_S = 60.0
#: the environment variable that sets another lease length (s)
LEASE_ENV = "DUET_LAKE_LEASE_S"


def lease_ttl_s() -> float:
    """``$DUET_LAKE_LEASE_S`` (s, > 0), else :data:`LEASE_TTL_S`.

    Raises:
        UserError: the variable is not a number of seconds > 0 (the message names it)."""
    from pipelines.preflight import UserError

    text = os.environ.get(LEASE_ENV, "").strip()
    if not text:
        return LEASE_TTL_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise UserError(f"{LEASE_ENV}={text!r}: expected the lake lock's lease length in seconds, a number > 0 "
                        f"(default {LEASE_TTL_S:.0f})")
    return value


def _client() -> Any:
    """A boto3 S3 client from the standard AWS settings, path-style (SeaweedFS, MinIO...),
    short timeouts; region ``us-east-1`` when none is set."""
    import boto3
    from botocore.config import Config

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    config = Config(s3={"addressing_style": "path"}, connect_timeout=3, read_timeout=10,
                    retries={"max_attempts": 2, "mode": "standard"})
    return boto3.session.Session(region_name=region).client("s3", config=config)


def _split(folder: str) -> tuple[str, str]:
    """``(bucket, key of the lease object)`` of the pipeline folder ``s3://bucket/prefix``."""
    from batch_layer.delta.storage import delta_uri

    bucket, _, prefix = delta_uri(folder)[len("s3://"):].partition("/")
    return bucket, f"{prefix.strip('/')}/{LOCK_FILE}" if prefix.strip("/") else LOCK_FILE


def _status(exc: BaseException) -> int | None:
    """The HTTP status of a botocore ``ClientError`` (None for another error)."""
    response = getattr(exc, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def _conflict(exc: BaseException) -> bool:
    """The store refused a conditional request: 412 Precondition Failed, or 409
    ConditionalRequestConflict (AWS: a concurrent conditional write in flight)."""
    return _status(exc) in (409, 412)


class LeaseLock:
    """The lake lock of one pipeline folder on an object store; a context manager with the
    interface of :class:`pipelines.lake.lock.LakeLock`.

    Args:
        folder: the pipeline's folder of the lake, ``s3://bucket/prefix/<name>``.
        command: the holder's command line, named to a second writer.
        warn: receives the one-line warning when an expired lease is taken over (default: stderr).
        ttl_s: the lease's length (s, default :func:`lease_ttl_s`); renewed every ``ttl_s / 3``.
    """

    def __init__(self, folder: str, command: str, warn: Callable[[str], None] | None = None,
                 ttl_s: float | None = None) -> None:
        self.folder = str(folder)
        self.bucket, self.key = _split(self.folder)
        self.path = f"s3://{self.bucket}/{self.key}"
        self.command = command
        self.ttl_s = lease_ttl_s() if ttl_s is None else ttl_s
        self._warn = warn or (lambda message: print(message, file=sys.stderr))
        self._client = _client()
        self._etag: str | None = None
        self._me: LockHolder | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        #: the lease was taken over by another writer while this object held it
        self.lost = False

    @property
    def held(self) -> bool:
        """This object holds the lease."""
        return self._etag is not None

    def _body(self) -> bytes:
        assert self._me is not None
        doc = {"pid": self._me.pid, "host": self._me.host, "command": self._me.command,
               "since": self._me.since, "expires": time.time() + self.ttl_s}
        return json.dumps(doc).encode()

    def acquire(self) -> LockHolder:
        """Take the lease; returns the holder written into it (this process).

        Raises:
            LakeBusy: another writer holds an unexpired lease (the message names it).
            botocore.exceptions.ClientError, BotoCoreError: the store refused or did not answer.
        """
        if self._etag is not None:
            raise RuntimeError(f"{self.path} is already held by this LeaseLock")
        self._me = LockHolder(pid=os.getpid(), host=socket.gethostname(), command=self.command, since=time.time())
        while self._etag is None:
            try:
                answer = self._client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), IfNoneMatch="*")
                self._etag = answer["ETag"]
                break
            except Exception as exc:  # noqa: BLE001 - only a refused condition is handled here
                if not _conflict(exc):
                    raise
            current = _read(self._client, self.bucket, self.key)
            if current is None:  # released between our put and our read: try again
                continue
            holder, expires, etag = current
            if expires > time.time():
                who = holder.describe() if holder is not None else "another duet command"
                raise LakeBusy(f"{self.folder} is in use by {who}; wait until it ends, or stop it (one command at a "
                               f"time writes a pipeline's lake; its lease expires {max(0.0, expires - time.time()):.0f} "
                               "s after its holder stops renewing it)")
            try:
                answer = self._client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), IfMatch=etag)
            except Exception as exc:  # noqa: BLE001 - another writer took it over first: busy on the next turn
                if not _conflict(exc):
                    raise
                continue
            self._etag = answer["ETag"]
            who = holder.describe() if holder is not None else "an unnamed holder"
            self._warn(f"taking over the stale lake lock of {who} in {self.folder}: its lease expired "
                       f"{time.time() - expires:.0f} s ago")
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name="duet-lake-lease", daemon=True)
        self._renewer.start()
        return self._me

    def _renew(self) -> None:
        """Every ``ttl_s / 3`` until released: move the expiry ahead (``If-Match`` our ETag)."""
        while not self._stop.wait(self.ttl_s / 3):
            etag = self._etag
            if etag is None:
                return
            try:
                answer = self._client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), IfMatch=etag)
            except Exception as exc:  # noqa: BLE001 - logged; a transient failure is retried next turn
                if _conflict(exc) or _status(exc) == 404:
                    self.lost = True
                    log.error("the lake lock of %s was taken over by another writer (this holder stalled longer "
                              "than its %.0f s lease); stop this command", self.folder, self.ttl_s)
                    return
                log.warning("renewing the lake lock of %s failed (%s); retrying", self.folder, exc)
                continue
            if self._etag == etag:
                self._etag = answer["ETag"]

    def release(self) -> None:
        """Stop renewing and delete the lease object if it is still ours (``If-Match``)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(30)
            self._renewer = None
        etag, self._etag = self._etag, None
        if etag is None or self.lost:
            return
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=etag)
        except Exception as exc:  # noqa: BLE001 - a lease taken over meanwhile stays; anything else is said
            if not _conflict(exc):
                log.warning("could not remove the lake lock %s (%s): it expires in %.0f s", self.path, exc, self.ttl_s)

    def __enter__(self) -> LeaseLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _read(client: Any, bucket: str, key: str) -> tuple[LockHolder | None, float, str] | None:
    """``(holder, expiry in epoch s, ETag)`` of the lease object; ``None`` when there is none.
    An unreadable body counts as expired (0)."""
    try:
        answer = client.get_object(Bucket=bucket, Key=key)
    except Exception as exc:  # noqa: BLE001 - only "no such key" is an answer
        if _status(exc) == 404:
            return None
        raise
    text = answer["Body"].read().decode(errors="replace")
    try:
        expires = float(json.loads(text)["expires"])
    except (ValueError, KeyError, TypeError):
        expires = 0.0
    return LockHolder.from_json(text), expires, answer["ETag"]


def lease_holder(folder: str) -> LockHolder | None:
    """Who holds the lease of the pipeline folder ``folder`` now; ``None`` when nobody does (no
    object, or an expired lease). Takes nothing."""
    bucket, key = _split(folder)
    current = _read(_client(), bucket, key)
    if current is None or current[1] <= time.time():
        return None
    return current[0] or LockHolder(pid=0, host="?", command="duet", since=time.time())
