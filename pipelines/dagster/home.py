"""A ``DAGSTER_HOME`` for duet, created at run time (never committed).

``<duet_home>/dagster/dagster.yaml`` sets two of Dagster's instance settings
(``dagster.yaml``'s ``telemetry`` and ``nux`` sections, ``DagsterInstance.telemetry_enabled``
and ``nux_enabled``): no telemetry (otherwise ``dagster dev`` tries to reach Dagster's
telemetry host), and no "Join the Dagster community" dialog over the UI's first page (the
webserver's ``shouldShowNux``), so ``duet ui`` opens on the pipeline, as a configured tool
does. Use it from a shell::

    export DAGSTER_HOME=$(.venv/bin/python -m pipelines.dagster.home)
    .venv/bin/dagster dev -w workspace.yaml

With ``$DUET_DAGSTER_STORAGE`` (or ``duet ui --dagster-storage``) set to a
``postgresql://user:password@host:port/db`` URL (kept there as
``postgresql+psycopg2://``, the driver dagster-postgres installs), the file also gets Dagster's ``storage:
postgres:`` section (dagster-postgres: run, event-log and schedule storage in PostgreSQL,
Dagster's "Dagster instance" docs) whose ``postgres_url`` is read from that variable
(``{env: DUET_DAGSTER_STORAGE}``): the credentials are never written to the file.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["STORAGE_ENV", "check_storage", "dagster_yaml", "ensure_dagster_home", "redact_url"]

#: the variable holding the PostgreSQL URL of Dagster's storage (unset: Dagster's SQLite)
STORAGE_ENV = "DUET_DAGSTER_STORAGE"
DAGSTER_YAML = "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"
#: Dagster's schema (dagster_postgres.DagsterPostgresStorage): one ``storage: postgres:``
#: block for the run, event-log and schedule storage; the URL from the environment
POSTGRES_YAML = f"storage:\n  postgres:\n    postgres_url:\n      env: {STORAGE_ENV}\n"
#: what earlier duet versions wrote: a ``dagster.yaml`` still exactly this gets the ``nux``
#: section too (a file the user edited is left as it is)
_EARLIER_YAML = "telemetry:\n  enabled: false\n"
_MANAGED = {_EARLIER_YAML, DAGSTER_YAML, DAGSTER_YAML + POSTGRES_YAML}


def dagster_yaml(postgres: bool) -> str:
    """The ``dagster.yaml`` duet writes: :data:`DAGSTER_YAML`, plus :data:`POSTGRES_YAML`
    when ``postgres``."""
    return DAGSTER_YAML + (POSTGRES_YAML if postgres else "")


def redact_url(url: str) -> str:
    """``url`` with its password (and user) replaced by ``***``, for messages."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def sqlalchemy_url(url: str) -> str:
    """``url`` with SQLAlchemy's psycopg2 driver named (``postgresql+psycopg2://``): the driver
    dagster-postgres installs; SQLAlchemy 2.1's default for ``postgresql://`` is psycopg 3.

    Raises:
        ValueError: not a ``postgresql://`` (``postgres://``, ``postgresql+psycopg2://``) URL.
    """
    for scheme in ("postgresql+psycopg2://", "postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg2://" + url[len(scheme):]
    raise ValueError(f"Dagster storage {redact_url(url)!r}: expected a postgresql://user:password@host:port/db URL")


def ensure_dagster_home(path: Path | None = None, *, set_env: bool = True, storage: str | None = None) -> Path:
    """Create (if needed) a Dagster home with telemetry and the first-visit dialog disabled
    (:data:`DAGSTER_YAML`) and return it.

    ``path``: the folder (default ``$DAGSTER_HOME`` if set, else ``<duet_home>/dagster``).
    ``storage``: a ``postgresql://`` URL for Dagster's storage (default
    ``$DUET_DAGSTER_STORAGE``; none: Dagster's SQLite in the folder); given, it is put in
    ``$DUET_DAGSTER_STORAGE`` of this process, which the file refers to. A file duet wrote is
    rewritten to match; a file the user edited is left as it is.
    With ``set_env`` the process's ``DAGSTER_HOME`` is set to it.

    Raises:
        ValueError: ``storage`` is not a ``postgresql://`` (or ``postgres://``) URL.
    """
    from speed_layer.runtime.paths import duet_home

    if storage is not None:
        os.environ[STORAGE_ENV] = sqlalchemy_url(storage)
    postgres = bool(os.environ.get(STORAGE_ENV))
    env = os.environ.get("DAGSTER_HOME")
    home = Path(path or env or duet_home() / "dagster").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    wanted = dagster_yaml(postgres)
    if not config.exists() or (config.read_text() in _MANAGED and config.read_text() != wanted):
        config.write_text(wanted)
    if set_env:
        os.environ["DAGSTER_HOME"] = str(home)
    return home


def check_storage(url: str, timeout_s: int = 5) -> None:
    """Check that the PostgreSQL ``url`` accepts a connection (psycopg2, ``timeout_s``), then
    put it in ``$DUET_DAGSTER_STORAGE`` of this process.

    Raises:
        ValueError: not a ``postgresql://`` URL, or the server refused or did not answer;
            the message names the URL without its credentials.
    """
    import psycopg2

    dsn = sqlalchemy_url(url).replace("postgresql+psycopg2://", "postgresql://", 1)
    try:
        psycopg2.connect(dsn, connect_timeout=timeout_s).close()
    except psycopg2.Error as exc:
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"--dagster-storage {redact_url(url)}: cannot connect: {cause}") from None
    os.environ[STORAGE_ENV] = sqlalchemy_url(url)


if __name__ == "__main__":
    print(ensure_dagster_home())
