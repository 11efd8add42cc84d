"""The class-data-sharing archive of the embedded Kafka broker's JVM
(:mod:`speed_layer.runtime.jvm_cds`).

Measured on a 2-core machine (start a single-node KRaft broker, create a topic, stop; two
runs each): the start took 4.7-5.2 s and 7.1-8.1 s of CPU without the archive, 2.8-2.9 s
and 5.0-5.4 s with it. Tests and ``duet run`` start brokers often (a fault test restarts
nodes of a three-node cluster).

``make setup`` writes it (``python -m speed_layer.runtime.kraft_cds``: a broker that serves
a topic's produce and fetch, a consumer group and a transaction, ~15 s, once);
:func:`speed_layer.runtime.kraft_jvm.jvm_command` maps it when it matches ``java`` and the
Kafka jars.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from speed_layer.runtime.jvm_cds import CDS_ENV, archive_path, map_options, replace_archive, resolve_java
from speed_layer.runtime.kraft_errors import BrokerStartError
from speed_layer.runtime.paths import kafka_jars_dir

__all__ = ["build_archive", "java_options", "kafka_archive"]

log = logging.getLogger(__name__)
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
    try:
        options = map_options(kafka_archive(java, jars_dir))
    except OSError as exc:  # a jar vanished while listed: start without the archive
        log.info("no class-data-sharing archive: %s", exc)
        options = []
    return [*options, *os.environ.get(JAVA_OPTIONS_ENV, "").split()]


def _workload(bootstrap: str) -> None:
    """Produce, fetch, a consumer group's commit and a transaction on the broker."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import NewTopic

    from speed_layer.runtime.admin import admin_client, client_config

    admin = admin_client(bootstrap)
    for future in admin.create_topics([NewTopic("cds", 2, 1)]).values():
        future.result(30)
    producer = Producer(client_config(bootstrap, {"transactional.id": "cds"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(100):
        producer.produce("cds", key=str(i), value=str(i))
    producer.commit_transaction(30)
    consumer = Consumer(client_config(bootstrap, {"group.id": "cds", "auto.offset.reset": "earliest",
                                                  "isolation.level": "read_committed"}))
    consumer.subscribe(["cds"])
    seen = 0
    for _ in range(60):
        seen += len(consumer.consume(100, 0.5))
        if seen >= 100:
            break
    consumer.commit(asynchronous=False)
    consumer.close()


def build_archive() -> Path:
    """Write the Kafka broker's archive (see :func:`kafka_archive`), replacing the Kafka
    archives of other digests: a broker started with ``-XX:ArchiveClassesAtExit`` serves
    :func:`_workload`, then stops and writes the file.

    Raises:
        KafkaJarsMissingError, BrokerStartError: the broker cannot start (no jars, no java).
        FileNotFoundError: the JVM wrote no archive.
    """
    from speed_layer.runtime.broker import EmbeddedKafka
    from speed_layer.runtime.jvm_cds import QUIET_OPTIONS

    path = kafka_archive()
    if path is None:
        raise BrokerStartError("`java` not found: cannot build the Kafka CDS archive")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    os.environ[CDS_ENV] = "0"  # the JVMs writing the archive must not map an older one
    os.environ[JAVA_OPTIONS_ENV] = " ".join([f"-XX:ArchiveClassesAtExit={tmp}", *QUIET_OPTIONS])
    with EmbeddedKafka() as kafka:  # its storage format tool writes tmp first; the broker at its stop
        _workload(kafka.bootstrap_servers)
    replace_archive(tmp, path)
    return path


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"class-data-sharing archive: {build_archive()}", file=sys.stderr)
