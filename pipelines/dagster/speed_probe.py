"""What Dagster knows of a pipeline's speed layer: a reading of its service, or of its consumer
group, and the lag bound its check holds it to.

A pipeline ``<p>``'s speed layer is read from:

1. its speed service(s), when ``$DUET_SPEED_SERVER_<NAME>`` (the pipeline's name upper-cased)
   names them: ``host:port`` or ``http://host:port``, comma-separated for several instances of
   the application (``duet speed --follow --server HOST:PORT``). Each instance's ``GET
   /metrics`` is scraped (:mod:`speed_layer.runtime.prometheus`): the client state
   (``kafka_streams_client_state``), the consumer lag per partition (``kafka_streams_records_lag``,
   records, over the source AND repartition topics the instance consumes), the processing rate
   (``kafka_streams_stream_thread_process_rate``, records/s) and total, the live threads;
2. else its consumer group on the configured cluster (``p.service_app_id``, or
   ``$DUET_SPEED_APPLICATION_ID_<NAME>``): end offset minus committed offset of each source
   topic (records; the state of the client is unknown).

The lag check ``speed_lag`` of ``[<p>, speed_layer]`` fails when the service is not
``RUNNING``/``REBALANCING`` (or cannot be reached) or when the total lag is above the bound:
``$DUET_SPEED_MAX_LAG_<NAME>`` (records), else the bound given to the check's factory, else
:data:`DEFAULT_MAX_LAG_RECORDS`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from pipelines.declaration.pipeline import Pipeline

__all__ = [
    "DEFAULT_MAX_LAG_RECORDS",
    "SPEED_CHECK_NAME",
    "SpeedReading",
    "app_id_env",
    "consumer_lag",
    "lag_check",
    "max_lag_env",
    "max_lag_records",
    "observation_metadata",
    "read_consumer_group",
    "read_service",
    "read_speed",
    "server_env",
    "speed_servers",
]

#: the lag bound of the check when none is configured, records
DEFAULT_MAX_LAG_RECORDS = 10_000
#: the name of the lag check of ``[<p>, speed_layer]``
SPEED_CHECK_NAME = "speed_lag"
#: client states in which the speed layer counts as up (Kafka Streams' usual liveness rule)
_UP = ("RUNNING", "REBALANCING")
#: from the best to the worst: the state of several instances is the worst of theirs
_STATE_ORDER = ("RUNNING", "REBALANCING", "CREATED", "PENDING_SHUTDOWN", "NOT_RUNNING", "PENDING_ERROR", "ERROR",
                "UNREACHABLE")


def server_env(p: Pipeline) -> str:
    """``DUET_SPEED_SERVER_<NAME>``: the speed service(s) of ``p``."""
    return f"DUET_SPEED_SERVER_{p.name.upper()}"


def max_lag_env(p: Pipeline) -> str:
    """``DUET_SPEED_MAX_LAG_<NAME>``: the lag bound (records) of ``p``'s check."""
    return f"DUET_SPEED_MAX_LAG_{p.name.upper()}"


def app_id_env(p: Pipeline) -> str:
    """``DUET_SPEED_APPLICATION_ID_<NAME>``: overrides the consumer group read for ``p``."""
    return f"DUET_SPEED_APPLICATION_ID_{p.name.upper()}"


def speed_servers(p: Pipeline) -> list[str]:
    """The base URLs of ``p``'s speed service instances from ``$DUET_SPEED_SERVER_<NAME>``
    (``http://`` added to a bare ``host:port``); ``[]`` when unset."""
    raw = os.environ.get(server_env(p), "")
    urls = []
    for part in raw.split(","):
        part = part.strip().rstrip("/")
        if part:
            urls.append(part if "://" in part else f"http://{part}")
    return urls


def max_lag_records(p: Pipeline, declared: int | None = None) -> int:
    """The lag bound of ``p``'s check, records: ``$DUET_SPEED_MAX_LAG_<NAME>``, else
    ``declared``, else :data:`DEFAULT_MAX_LAG_RECORDS`.

    Raises:
        ValueError: the variable is not a non-negative integer.
    """
    raw = os.environ.get(max_lag_env(p), "").strip()
    if raw:
        if not raw.isdigit():
            raise ValueError(f"{max_lag_env(p)}={raw!r}: give the largest acceptable lag in records (an integer >= 0)")
        return int(raw)
    return DEFAULT_MAX_LAG_RECORDS if declared is None else int(declared)


@dataclass
class SpeedReading:
    """One look at a pipeline's speed layer.

    Attributes:
        source: ``"service"`` or ``"consumer_group"``.
        where: the URLs read, or the consumer group.
        state: the client state (the worst instance's), ``"UNREACHABLE"`` when a service
            did not answer, ``None`` when read from the consumer group.
        lag: records not yet processed per topic (sources, and repartition topics from a
            service).
        process_rate: records processed per second (all threads and instances), service only.
        process_total: records processed since the instances started, service only.
        alive_threads: stream threads alive, service only.
        seen_at: epoch seconds of the reading; ``None`` if nothing answered.
        error: why a service could not be read.
    """

    source: str
    where: str
    state: str | None = None
    lag: dict[str, int] = field(default_factory=dict)
    process_rate: float | None = None
    process_total: int | None = None
    alive_threads: int | None = None
    seen_at: float | None = None
    error: str | None = None

    @property
    def lag_total(self) -> int:
        """The sum of :attr:`lag`, records."""
        return sum(self.lag.values())

    @property
    def up(self) -> bool:
        """Whether the speed layer counts as up: RUNNING or REBALANCING (a consumer-group
        reading cannot tell: True)."""
        return self.state is None or self.state in _UP


def consumer_lag(bootstrap: str, group: str, topics: list[str]) -> dict[str, int]:
    """``{topic: end offset - committed offset}`` (records) summed over partitions (a
    partition without a committed offset counts from its start).

    Raises:
        confluent_kafka.KafkaException: the cluster cannot be reached.
    """
    from confluent_kafka import Consumer, TopicPartition

    from speed_layer.admin import client_config, end_offsets

    consumer = Consumer(client_config(bootstrap, {"group.id": group, "enable.auto.commit": False,
                                                  "client.id": f"duet-lag-{uuid.uuid4().hex[:6]}"}))
    try:
        out: dict[str, int] = {}
        for topic in topics:
            ends = end_offsets(bootstrap, topic)
            committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
            done = {tp.partition: max(0, tp.offset) for tp in committed}
            out[topic] = sum(max(0, end - done.get(p, 0)) for p, end in ends.items())
        return out
    finally:
        consumer.close()


def read_consumer_group(p: Pipeline, bootstrap: str) -> SpeedReading:
    """The committed lag of ``p``'s consumer group on its source topics.

    Raises:
        confluent_kafka.KafkaException: the cluster cannot be reached.
    """
    group = os.environ.get(app_id_env(p), "").strip() or p.service_app_id
    lag = consumer_lag(bootstrap, group, list(p.input_topics))
    return SpeedReading(source="consumer_group", where=group, lag=lag, seen_at=time.time())


def read_service(urls: list[str], timeout_s: float = 5.0) -> SpeedReading:
    """Scrape ``GET <url>/metrics`` of each instance; never raises: an instance that does not
    answer makes the reading ``UNREACHABLE`` with the error."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    reading = SpeedReading(source="service", where=", ".join(urls))
    states: list[str] = []
    errors: list[str] = []
    rate = 0.0
    total = alive = 0
    for url in urls:
        try:
            res = httpx.get(f"{url}/metrics", timeout=timeout_s)
            res.raise_for_status()
            families = list(text_string_to_metric_families(res.text))
        except (httpx.HTTPError, ValueError) as exc:
            states.append("UNREACHABLE")
            errors.append(f"{url}: {exc}")
            continue
        state = "CREATED"
        for family in families:
            for s in family.samples:
                if s.name == "kafka_streams_client_state" and s.value == 1:
                    state = s.labels.get("kafka_streams_client_state", state)
                elif s.name == "kafka_streams_records_lag":
                    topic = s.labels.get("topic", "")
                    reading.lag[topic] = reading.lag.get(topic, 0) + int(s.value)
                elif s.name == "kafka_streams_stream_thread_process_rate":
                    rate += s.value
                elif s.name == "kafka_streams_stream_thread_process_total":
                    total += int(s.value)
                elif s.name == "kafka_streams_alive_stream_threads":
                    alive += int(s.value)
        states.append(state)
    reading.state = max(states, key=_STATE_ORDER.index) if states else "UNREACHABLE"
    if len(errors) < len(urls):  # at least one instance answered
        reading.seen_at = time.time()
        reading.process_rate, reading.process_total, reading.alive_threads = rate, total, alive
    reading.error = "; ".join(errors) or None
    return reading


def read_speed(p: Pipeline, bootstrap: str | None) -> SpeedReading | None:
    """``p``'s speed layer: from its services when ``$DUET_SPEED_SERVER_<NAME>`` is set, else
    from its consumer group on ``bootstrap``; ``None`` when neither is configured.

    Raises:
        confluent_kafka.KafkaException: reading the consumer group, the cluster cannot be reached.
    """
    urls = speed_servers(p)
    if urls:
        return read_service(urls)
    if bootstrap:
        return read_consumer_group(p, bootstrap)
    return None


def observation_metadata(reading: SpeedReading, last_seen: float | None = None) -> dict[str, Any]:
    """The metadata of an ``AssetObservation`` of ``[<p>, speed_layer]``: ``lag_<topic>`` and
    ``lag_total`` (records), ``state``, ``process_rate`` (records/s), ``process_total``,
    ``alive_stream_threads``, ``last_seen`` (when it last answered: ``last_seen`` when this
    reading failed), ``source`` and ``application_id`` or ``servers``, ``error``."""
    md: dict[str, Any] = {f"lag_{t}": dg.MetadataValue.int(n) for t, n in sorted(reading.lag.items())}
    md["lag_total"] = dg.MetadataValue.int(reading.lag_total)
    md["source"] = dg.MetadataValue.text(reading.source)
    if reading.source == "consumer_group":
        md["application_id"] = dg.MetadataValue.text(reading.where)
    else:
        md["servers"] = dg.MetadataValue.text(reading.where)
        md["state"] = dg.MetadataValue.text(reading.state or "UNKNOWN")
        if reading.process_rate is not None:
            md["process_rate"] = dg.MetadataValue.float(round(reading.process_rate, 3))
            md["process_total"] = dg.MetadataValue.int(int(reading.process_total or 0))
            md["alive_stream_threads"] = dg.MetadataValue.int(int(reading.alive_threads or 0))
    seen = reading.seen_at if reading.seen_at is not None else last_seen
    if seen is not None:
        md["last_seen"] = dg.MetadataValue.timestamp(seen)
    if reading.error:
        md["error"] = dg.MetadataValue.text(reading.error)
    return md


def lag_check(reading: SpeedReading, bound: int) -> tuple[bool, str, dict[str, Any]]:
    """``(passed, description, metadata)`` of the lag check: passed when the speed layer is up
    and its total lag is at most ``bound`` records."""
    md: dict[str, Any] = {
        "lag_total": dg.MetadataValue.int(reading.lag_total),
        "max_lag_records": dg.MetadataValue.int(bound),
        "source": dg.MetadataValue.text(f"{reading.source} {reading.where}"),
    }
    if reading.state is not None:
        md["state"] = dg.MetadataValue.text(reading.state)
    if not reading.up:
        why = f"the speed layer is {reading.state}" + (f": {reading.error}" if reading.error else "")
        return False, why, md
    if reading.lag_total > bound:
        return False, f"lag {reading.lag_total:,} records > {bound:,}", md
    return True, f"lag {reading.lag_total:,} records <= {bound:,}", md


def cursor_last_seen(cursor: str | None) -> float | None:
    """The ``last_seen`` (epoch s) kept in a sensor cursor (``{"last_seen": ...}``)."""
    import json

    if not cursor:
        return None
    try:
        value = json.loads(cursor).get("last_seen")
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def as_cursor(values: Mapping[str, Any]) -> str:
    """A sensor cursor holding ``values`` (JSON)."""
    import json

    return json.dumps(dict(values), sort_keys=True)
