"""The class-data-sharing archive of the embedded Kafka broker's JVM
(:mod:`speed_layer.runtime.jvm_cds`).

Measured on a 2-core machine (start a single-node KRaft broker, create a topic, stop; two
runs each): the start took 4.7-5.2 s and 7.1-8.1 s of CPU without the archive, 2.8-2.9 s
and 5.0-5.4 s with it. Tests and ``duet run`` start brokers often (a fault test restarts
nodes of a three-node cluster).

``make setup`` writes it (``python -m speed_layer.runtime.kraft_cds_build``: a broker that serves
a topic's produce and fetch, a consumer group and a transaction, ~15 s, once);
:func:`speed_layer.runtime.kraft_jvm.jvm_command` maps it when it matches ``java`` and the
Kafka jars.
"""

from __future__ import annotations

import os
from pathlib import Path

from speed_layer.runtime.jvm_cds import archive_options, archive_path, resolve_java
from speed_layer.runtime.paths import kafka_jars_dir

__all__ = ["JAVA_OPTIONS_ENV", "java_options", "kafka_archive"]

#: JVM options given to every Kafka JVM duet starts (how the build writes the archive).
JAVA_OPTIONS_ENV = "DUET_KAFKA_JAVA_OPTIONS"


def kafka_archive(java: str = "java", jars_dir: Path | None = None) -> Path | None:
    """Where the archive for ``java`` and the Kafka jars of ``jars_dir`` (default
    ``<duet_home>/jars/kafka``) lives; None when ``java`` is not found."""
    found = resolve_java(java)
    return archive_path("kafka", found, (jars_dir or kafka_jars_dir()).glob("*.jar")) if found else None


def java_options(java: str, jars_dir: Path) -> list[str]:
    """The options of a Kafka JVM: the archive's when there is one for ``java`` and
    ``jars_dir`` (and ``$DUET_CDS`` is not ``0``), then ``$DUET_KAFKA_JAVA_OPTIONS``."""
    options = archive_options(lambda: kafka_archive(java, jars_dir))
    return [*options, *os.environ.get(JAVA_OPTIONS_ENV, "").split()]
