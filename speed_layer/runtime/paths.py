"""Well-known locations of duet: the repository, the local state folder (jars), the lake.

See docs/contracts.md ("Paths").
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["repo_root", "duet_home", "state_root", "kafka_jars_dir", "delta_jars_dir", "default_lake"]


def repo_root() -> Path:
    """The repository root (the folder holding ``pyproject.toml``), found from this file."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    # Installed outside a checkout: fall back to the folder above the package.
    return here.parents[2]


def duet_home() -> Path:
    """``$DUET_HOME`` when set, else ``<repo>/.duet`` (git-ignored; holds the JVM jars)."""
    env = os.environ.get("DUET_HOME")
    return Path(env).expanduser().resolve() if env else repo_root() / ".duet"


def state_root() -> Path:
    """``$DUET_STATE_DIR`` when set, else ``<duet_home>/state``: the folder of the speed
    layer's state folders (one per application id, Kafka Streams' ``state.dir``) and of
    serving's live stores (``serving-live``). Separate roots keep two users of one checkout
    (or two test workers) out of each other's state: ``duet run``'s reset leaves a folder a
    running speed layer holds, and warns."""
    env = os.environ.get("DUET_STATE_DIR", "").strip()
    return Path(env).expanduser().resolve() if env else duet_home() / "state"


def kafka_jars_dir() -> Path:
    """Folder with the Apache Kafka broker's jars (``make setup`` copies them)."""
    return duet_home() / "jars" / "kafka"


def delta_jars_dir() -> Path:
    """Folder with delta-spark's jars for ``spark.jars`` (``make setup`` copies them)."""
    return duet_home() / "jars" / "delta"


def default_lake() -> Path:
    """``$DUET_LAKE`` when set, else ``<repo>/lake``."""
    env = os.environ.get("DUET_LAKE")
    return Path(env).expanduser().resolve() if env else repo_root() / "lake"
