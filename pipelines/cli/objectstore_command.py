"""``duet objectstore``: a local S3-compatible object store for the lake (SeaweedFS,
:mod:`pipelines.lake.objectstore`), in the foreground until Ctrl-C. See docs/object-storage.md."""

from __future__ import annotations

import shlex
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipelines.cli.support import app

__all__ = ["objectstore"]


@app.command()
def objectstore(
    data_dir: Annotated[Optional[Path], typer.Option(
        "--dir", help="Folder for the store's volumes and metadata (kept); default: a temporary one.")] = None,
    bucket: Annotated[str, typer.Option(help="The bucket to create.")] = "duet",
) -> None:
    """Start a local S3-compatible object store (SeaweedFS) on a free loopback port, create
    BUCKET, and print the AWS_* settings to export for `--lake s3://BUCKET/lake`."""
    from pipelines.lake.objectstore import ObjectStoreError, object_store

    try:
        with object_store(data_dir, bucket=bucket) as store:
            for key, value in store.env().items():
                typer.echo(f"export {key}={shlex.quote(value)}")
            typer.echo(f"# lake: --lake {store.lake_uri()}  (data in {store.data_dir}; Ctrl-C stops)")
            threading.Event().wait()
    except ObjectStoreError as exc:
        typer.echo(f"duet objectstore: {exc}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        pass
