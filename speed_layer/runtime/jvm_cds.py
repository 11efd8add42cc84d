"""Class-data-sharing archives of the JVMs duet starts: the embedded Kafka broker's and
Spark's driver, so that a cold JVM starts faster.

A JVM spends much of its start loading, parsing and verifying classes (about 20,000 for a
Spark driver, 8,000 for a Kafka broker). HotSpot's dynamic class-data sharing (JEP 350, JDK
13+: ``-XX:ArchiveClassesAtExit`` writes the classes a run loaded, ``-XX:SharedArchiveFile``
maps them read-only) keeps them ready in a file. ``make setup`` writes one archive per kind
(:mod:`speed_layer.runtime.kraft_cds_build`, :mod:`batch_layer.spark_cds_build`); the JVMs map them
(:mod:`speed_layer.runtime.kraft_cds`, :mod:`batch_layer.spark_cds`).

An archive is valid only for the ``java`` and the class path that wrote it: its name
carries a digest of the ``java`` binary and of every jar (name, size, modification time),
so after a JDK, Kafka or PySpark upgrade no archive matches and the JVM starts as before,
until the next ``make setup``. A JVM that refuses an archive anyway starts without it,
silently (:data:`QUIET_OPTIONS`).

Environment:

- ``DUET_CDS``: ``0`` never maps an archive (default: map one when it matches).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from speed_layer.runtime.paths import duet_home

__all__ = ["CDS_ENV", "QUIET_OPTIONS", "archive_options", "archive_path", "map_options", "replace_archive",
           "resolve_java", "scoped_environment"]

log = logging.getLogger(__name__)

CDS_ENV = "DUET_CDS"
#: HotSpot options that keep a refused archive silent (the JVM then starts without it), and
#: the writing of one free of its per-class warnings.
QUIET_OPTIONS = ("-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def resolve_java(java: str | None = None) -> Path | None:
    """The ``java`` binary, symlinks resolved: ``java`` (a command or a path) when given, else
    the one Spark's launcher runs (``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``); None
    when there is none."""
    if java is None:
        home = os.environ.get("JAVA_HOME", "").strip()
        java = str(Path(home) / "bin" / "java") if home else "java"
    found = shutil.which(java) or (java if Path(java).is_file() else None)
    return Path(found).resolve() if found else None


def archive_path(kind: str, java: Path, jars: Iterable[Path]) -> Path:
    """``<duet_home>/cds/<kind>-<digest>.jsa``: the archive of ``kind`` (``kafka``, ``spark``)
    for this ``java`` binary and these jars.

    Raises:
        OSError: a jar cannot be read (e.g. removed while listed).
    """
    h = hashlib.sha256()
    for path in (java, *sorted(jars)):
        st = path.stat()
        h.update(f"{path.name if path != java else path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return duet_home() / "cds" / f"{kind}-{h.hexdigest()[:16]}.jsa"


def map_options(archive: Path | None) -> list[str]:
    """The JVM options mapping ``archive``: none when it is None or absent, or when
    ``$DUET_CDS`` is ``0``."""
    if archive is None or os.environ.get(CDS_ENV, "").strip() == "0" or not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", *QUIET_OPTIONS]


def archive_options(archive: Callable[[], Path | None]) -> list[str]:
    """:func:`map_options` of the archive ``archive()`` names (``None``: no ``java``); none
    when a jar cannot be read while the name is computed (logged at INFO): the JVM then
    starts without an archive."""
    try:
        return map_options(archive())
    except OSError as exc:  # a jar vanished while listed
        log.info("no class-data-sharing archive: %s", exc)
        return []


@contextmanager
def scoped_environment(variables: dict[str, str]) -> Iterator[None]:
    """Set ``variables`` in ``os.environ`` for the block (the JVMs started in it inherit
    them), then restore each one's earlier value or absence, also when the block raises."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def replace_archive(written: Path, archive: Path) -> None:
    """Move the archive a JVM ``written`` into place as ``archive``; the archives of the same
    kind for other digests (an older JDK or jars) are removed.

    Raises:
        FileNotFoundError: the JVM wrote no archive.
    """
    if not written.is_file():
        raise FileNotFoundError(f"the JVM wrote no class-data-sharing archive at {written}")
    written.replace(archive)
    kind = archive.name.split("-", 1)[0]
    for old in archive.parent.glob(f"{kind}-*.jsa"):
        if old != archive:
            old.unlink()
