"""Writes the class-data-sharing archive of the embedded Kafka broker's JVM
(:mod:`speed_layer.runtime.kraft_cds` says where it lives and how a JVM maps it):
``python -m speed_layer.runtime.kraft_cds_build``, run by ``make setup``."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from speed_layer.runtime.jvm_cds import CDS_ENV, QUIET_OPTIONS, replace_archive, scoped_environment
from speed_layer.runtime.kraft_cds import JAVA_OPTIONS_ENV, kafka_archive
from speed_layer.runtime.kraft_errors import BrokerStartError

__all__ = ["build_archive"]


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
    :func:`_workload`, then stops and writes the file. This process' environment is left
    as it was.

    Raises:
        KafkaJarsMissingError, BrokerStartError: the broker cannot start (no jars, no java).
        FileNotFoundError: the JVM wrote no archive.
    """
    from speed_layer.runtime.broker import EmbeddedKafka

    path = kafka_archive()
    if path is None:
        raise BrokerStartError("`java` not found: cannot build the Kafka CDS archive")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    writing = {CDS_ENV: "0",  # the JVMs writing the archive must not map an older one
               JAVA_OPTIONS_ENV: " ".join([f"-XX:ArchiveClassesAtExit={tmp}", *QUIET_OPTIONS])}
    with scoped_environment(writing), EmbeddedKafka() as kafka:
        _workload(kafka.bootstrap_servers)  # the storage format tool wrote tmp first; the broker rewrites it at its stop
    replace_archive(tmp, path)
    return path


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"class-data-sharing archive: {build_archive()}", file=sys.stderr)
