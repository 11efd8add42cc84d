"""A ``DAGSTER_HOME`` for duet, created at run time (never committed).

``<duet_home>/dagster/dagster.yaml`` sets two of Dagster's instance settings
(``dagster.yaml``'s ``telemetry`` and ``nux`` sections, ``DagsterInstance.telemetry_enabled``
and ``nux_enabled``): no telemetry (otherwise ``dagster dev`` tries to reach Dagster's
telemetry host), and no "Join the Dagster community" dialog over the UI's first page (the
webserver's ``shouldShowNux``), so ``duet ui`` opens on the pipeline, as a configured tool
does. Use it from a shell::

    export DAGSTER_HOME=$(.venv/bin/python -m pipelines.dagster.home)
    .venv/bin/dagster dev -w workspace.yaml
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ensure_dagster_home"]

DAGSTER_YAML = "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"
#: what earlier duet versions wrote: a ``dagster.yaml`` still exactly this gets the ``nux``
#: section too (a file the user edited is left as it is)
_EARLIER_YAML = "telemetry:\n  enabled: false\n"


def ensure_dagster_home(path: Path | None = None, *, set_env: bool = True) -> Path:
    """Create (if needed) a Dagster home with telemetry and the first-visit dialog disabled
    (:data:`DAGSTER_YAML`) and return it.

    ``path``: the folder (default ``$DAGSTER_HOME`` if set, else ``<duet_home>/dagster``).
    With ``set_env`` the process's ``DAGSTER_HOME`` is set to it.
    """
    from speed_layer.runtime.paths import duet_home

    env = os.environ.get("DAGSTER_HOME")
    home = Path(path or env or duet_home() / "dagster").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists() or config.read_text() == _EARLIER_YAML:
        config.write_text(DAGSTER_YAML)
    if set_env:
        os.environ["DAGSTER_HOME"] = str(home)
    return home


if __name__ == "__main__":
    print(ensure_dagster_home())
