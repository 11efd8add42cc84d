"""Spark on a lake in an S3-compatible object store: Hadoop's S3A file system (``s3a://``,
``org.apache.hadoop:hadoop-aws`` at the Hadoop version PySpark ships, in ``jvm/delta/pom.xml``)
configured from the standard AWS settings (docs/object-storage.md, "Spark").

:func:`configure_s3a` sets, for the lake's bucket only (S3A's per-bucket options
``fs.s3a.bucket.<bucket>.*``), in the running session's Hadoop configuration:

* ``endpoint`` from ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` (then ``path.style.access``:
  stores other than AWS serve ``http://host/bucket/key``; ``connection.ssl.enabled`` false for
  an ``http://`` endpoint), ``endpoint.region`` from ``AWS_REGION`` (default ``us-east-1``);
* the credentials botocore resolves from the same settings (``AWS_ACCESS_KEY_ID``/
  ``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and ``~/.aws``...) as
  ``access.key``/``secret.key`` (``session.token`` with S3A's temporary-credentials provider),
  since the JVM's environment is the one it started with. None found: S3A's default chain.

The keys go into the Hadoop configuration object only: not into ``SparkConf`` (the UI's
environment page, event logs) nor any message.

The S3A jars (~660 MB, most of it the AWS SDK bundle) sit beside Delta's in
``.duet/jars/delta`` but join a session's ``spark.jars`` only when it may need them
(:func:`s3a_jars_wanted`): a ``local`` master copies every jar of ``spark.jars`` into its
temporary folder at start, which a local lake should not pay for.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["S3A_ENV", "S3A_JAR_PREFIXES", "want_s3a_jars", "s3a_jars_wanted", "is_s3a_jar", "s3a_settings",
           "configure_s3a"]

log = logging.getLogger(__name__)

#: set to ``1`` to give every Spark session of a process the S3A jars
S3A_ENV = "DUET_SPARK_S3A"
#: the file names of the S3A jars in the Delta jars folder (``jvm/delta/pom.xml``): hadoop-aws,
#: the AWS SDK bundle, the analytics accelerator, and slf4j-nop, the SLF4J 1.x binding the
#: bundle's shaded SLF4J looks for (without one it prints ``SLF4J: Failed to load class
#: "org.slf4j.impl.StaticLoggerBinder"`` on stderr; docs/object-storage.md, "SLF4J")
S3A_JAR_PREFIXES = ("hadoop-aws-", "bundle-", "analyticsaccelerator-s3-", "slf4j-nop-")
_wanted = False


def want_s3a_jars() -> None:
    """Say that this process works on an object-store lake: the Spark session it starts from
    now on gets the S3A jars (``pipelines.lake.root.resolve_lake`` calls it for ``s3://``)."""
    global _wanted
    _wanted = True


def s3a_jars_wanted() -> bool:
    """A Spark session started now gets the S3A jars: :func:`want_s3a_jars` was called,
    ``$DUET_SPARK_S3A`` is ``1``, or ``$DUET_LAKE`` is an ``s3://``/``s3a://`` root."""
    from batch_layer.delta.storage import is_object_store

    return _wanted or os.environ.get(S3A_ENV, "").strip() == "1" or is_object_store(os.environ.get("DUET_LAKE"))


def is_s3a_jar(name: str) -> bool:
    """``name`` (a jar's file name) is one of the S3A jars."""
    return name.startswith(S3A_JAR_PREFIXES)


def s3a_settings(bucket: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The ``fs.s3a.bucket.<bucket>.*`` settings for ``bucket`` from the AWS settings in
    ``env`` (default ``os.environ``) and the credentials botocore resolves from them."""
    env = dict(os.environ if env is None else env)
    pre = f"fs.s3a.bucket.{bucket}."
    out = {pre + "endpoint.region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        out[pre + "endpoint"] = endpoint.rstrip("/")
        out[pre + "path.style.access"] = "true"
        out[pre + "connection.ssl.enabled"] = "false" if endpoint.startswith("http://") else "true"
    key, secret, token = _credentials(env)
    if key and secret:
        out[pre + "access.key"] = key
        out[pre + "secret.key"] = secret
        if token:
            out[pre + "session.token"] = token
            out[pre + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        else:
            out[pre + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    return out


def _credentials(env: dict[str, str]) -> tuple[str | None, str | None, str | None]:
    """``(key, secret, token)`` from ``env``'s keys, else botocore's chain (profiles...)."""
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN")
    try:
        import boto3

        found = boto3.session.Session(profile_name=env.get("AWS_PROFILE")).get_credentials()
    except Exception as exc:  # noqa: BLE001 - S3A's own chain then; said at debug level
        log.debug("no AWS credentials from botocore (%s): S3A's default chain", type(exc).__name__)
        return None, None, None
    if found is None:
        return None, None, None
    frozen = found.get_frozen_credentials()
    return frozen.access_key, frozen.secret_key, frozen.token


def configure_s3a(spark: "SparkSession", location: str, env: dict[str, str] | None = None) -> None:
    """Set :func:`s3a_settings` for the bucket of ``location`` (``s3://``/``s3a://``) in
    ``spark``'s Hadoop configuration. When a setting changed from an earlier call (another
    store or other keys), the cached S3A file system of that bucket is closed so that the next
    use builds one with the new settings. A Spark Connect session cannot be configured from
    the client: its server needs the same ``spark.hadoop.fs.s3a.*`` settings in its own
    configuration (docs/object-storage.md)."""
    from batch_layer.delta.storage import spark_uri

    if type(spark).__module__.startswith("pyspark.sql.connect"):  # batch_layer.spark.is_connect (no import cycle)
        log.debug("Spark Connect session: the server's own spark.hadoop.fs.s3a.* settings apply")
        return
    from .errors import BatchLayerError

    uri = spark_uri(location)
    bucket = uri[len("s3a://"):].split("/", 1)[0]
    jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
    try:
        jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem", False,
                                    jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader())
    except Exception:  # noqa: BLE001 - py4j's error for a ClassNotFoundException
        raise BatchLayerError(
            f"the Spark session cannot read {uri.split('/', 3)[0]}//{bucket}: it was started without the S3A jars "
            f"(hadoop-aws; `make setup` puts them in the Delta jars folder). Start the session after the lake is "
            f"resolved, or set {S3A_ENV}=1 (or DUET_LAKE=s3://...) before it starts") from None
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    changed = False
    for key, value in s3a_settings(bucket, env).items():
        if conf.get(key) != value:
            conf.set(key, value)
            changed = True
    if changed:
        root = jvm.java.net.URI(f"s3a://{bucket}/")
        jvm.org.apache.hadoop.fs.FileSystem.get(root, conf).close()  # drops the cached one, if any
