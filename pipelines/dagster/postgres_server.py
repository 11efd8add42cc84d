"""A throwaway PostgreSQL server on loopback, for Dagster's storage in tests and trials.

Debian's ``postgresql`` package (``make setup`` installs it) ships ``initdb`` and ``pg_ctl``
in ``/usr/lib/postgresql/<major>/bin``. ``initdb`` refuses to run as root, so as root both
run as the ``postgres`` user the package creates (``runuser -u postgres``), on a folder
handed to that user. The cluster listens on ``127.0.0.1:<port>`` only (no Unix socket
outside the folder), with one password-authenticated user ``duet`` and database ``dagster``.
From a shell::

    .venv/bin/python -m pipelines.dagster.postgres_server /tmp/duet-pg 55432
    # prints the postgresql:// URL; stop it with
    /usr/lib/postgresql/*/bin/pg_ctl -D /tmp/duet-pg/data stop   (as root: runuser -u postgres -- ...)
"""

from __future__ import annotations

import glob
import os
import secrets
import subprocess
from pathlib import Path

__all__ = ["postgres_bin", "start_postgres", "stop_postgres"]


def postgres_bin() -> Path:
    """The newest ``/usr/lib/postgresql/<major>/bin`` holding ``initdb``.

    Raises:
        FileNotFoundError: Debian's PostgreSQL server is not installed (``make setup``).
    """
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise FileNotFoundError("no /usr/lib/postgresql/*/bin/initdb: install Debian's postgresql (make setup)")
    return Path(found[-1]).parent


def _as_owner() -> list[str]:
    """The prefix that runs a PostgreSQL tool as a non-root user: none unless root."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def start_postgres(folder: Path, port: int, timeout_s: int = 60) -> str:
    """Create a cluster in ``folder/data`` (unless there is one) and start it on
    ``127.0.0.1:port``; return its ``postgresql://duet:<password>@127.0.0.1:<port>/dagster``
    URL (the password is new per cluster, kept in ``folder/password``).

    Raises:
        FileNotFoundError: no PostgreSQL server installed.
        subprocess.CalledProcessError: ``initdb``, ``pg_ctl`` or ``createdb`` failed.
    """
    bin_dir = postgres_bin()
    folder.mkdir(parents=True, exist_ok=True)
    data, secret = folder / "data", folder / "password"
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "postgres:postgres", str(folder)], check=True)
    if not (data / "PG_VERSION").exists():
        password = secrets.token_hex(16)
        secret.write_text(password + "\n")
        os.chmod(secret, 0o600)
        if os.geteuid() == 0:
            subprocess.run(["chown", "postgres:postgres", str(secret)], check=True)
        subprocess.run([*_as_owner(), str(bin_dir / "initdb"), "-D", str(data), "-U", "duet", "-A", "scram-sha-256",
                        "--pwfile", str(secret), "-E", "UTF8", "--locale", "C"], check=True, capture_output=True)
    password = secret.read_text().strip()
    options = f"-h 127.0.0.1 -p {port} -k {data}"
    subprocess.run([*_as_owner(), str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"),
                    "-o", options, "-w", "-t", str(timeout_s), "start"], check=True, capture_output=True)
    env = {**os.environ, "PGPASSWORD": password}
    exists = subprocess.run([str(bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "duet", "-d",
                             "postgres", "-tAc", "SELECT 1 FROM pg_database WHERE datname = 'dagster'"],
                            env=env, check=True, capture_output=True, text=True).stdout.strip()
    if not exists:
        subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "duet", "dagster"],
                       env=env, check=True, capture_output=True)
    return f"postgresql://duet:{password}@127.0.0.1:{port}/dagster"


def stop_postgres(folder: Path) -> None:
    """Stop the cluster in ``folder/data`` (``pg_ctl stop -m fast``); nothing if it is not running."""
    data = folder / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run([*_as_owner(), str(postgres_bin() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       check=True, capture_output=True)


if __name__ == "__main__":
    import sys

    print(start_postgres(Path(sys.argv[1]).resolve(), int(sys.argv[2])))
