"""Operation options as small immutable values (Kafka's Consumed, Produced, Materialized...).

Each is a frozen dataclass built with keyword arguments or Kafka-style factories
(``Materialized.as_("store").with_retention(ms)``). ``None`` fields mean "use the default":
the serdes of ``default.key.serde``/``default.value.serde``, a generated name, etc.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Literal

from .serde import Serde
from .windows import Duration, to_ms

#: ``timestamp_extractor(record_key, record_value, record_timestamp_ms, partition_time_ms) -> ms``
TimestampExtractor = Callable[[Any, Any, int, int], int]
#: ``partitioner(topic, key, value, num_partitions) -> partition | None`` (None: default murmur2)
StreamPartitioner = Callable[[str, Any, Any, int], int | None]


@dataclass(frozen=True)
class Named:
    """A user-given processor name (Kafka's ``Named.as``)."""

    name: str

    @staticmethod
    def as_(name: str) -> "Named":
        return Named(name)


@dataclass(frozen=True)
class Consumed:
    """How a source topic is read: serdes, timestamp extractor, offset reset, processor name."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    timestamp_extractor: TimestampExtractor | None = None
    offset_reset: Literal["earliest", "latest"] | None = None
    name: str | None = None

    @staticmethod
    def with_(key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None) -> "Consumed":
        return Consumed(key_serde=key_serde, value_serde=value_serde)

    def with_timestamp_extractor(self, extractor: TimestampExtractor) -> "Consumed":
        return replace(self, timestamp_extractor=extractor)

    def with_offset_reset_policy(self, policy: Literal["earliest", "latest"]) -> "Consumed":
        return replace(self, offset_reset=policy)

    def with_name(self, name: str) -> "Consumed":
        return replace(self, name=name)


@dataclass(frozen=True)
class Produced:
    """How records are written to a topic: serdes, partitioner, processor name."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None
    name: str | None = None

    @staticmethod
    def with_(key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None) -> "Produced":
        return Produced(key_serde=key_serde, value_serde=value_serde)

    def with_stream_partitioner(self, partitioner: StreamPartitioner) -> "Produced":
        return replace(self, partitioner=partitioner)

    def with_name(self, name: str) -> "Produced":
        return replace(self, name=name)


@dataclass(frozen=True)
class Grouped:
    """Serdes and name of a grouping (names the repartition topic when one is needed)."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    name: str | None = None

    @staticmethod
    def as_(name: str) -> "Grouped":
        return Grouped(name=name)

    @staticmethod
    def with_(key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None) -> "Grouped":
        return Grouped(key_serde=key_serde, value_serde=value_serde)


@dataclass(frozen=True)
class Repartitioned:
    """Options of ``KStream.repartition``: topic name part, partition count, partitioner, serdes."""

    name: str | None = None
    number_of_partitions: int | None = None
    partitioner: StreamPartitioner | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None

    @staticmethod
    def as_(name: str) -> "Repartitioned":
        return Repartitioned(name=name)

    def with_number_of_partitions(self, n: int) -> "Repartitioned":
        if n <= 0:
            raise ValueError(f"number_of_partitions must be > 0, got {n}")
        return replace(self, number_of_partitions=n)

    def with_stream_partitioner(self, partitioner: StreamPartitioner) -> "Repartitioned":
        return replace(self, partitioner=partitioner)


@dataclass(frozen=True)
class Joined:
    """Serdes and name of a stream-table join."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    other_value_serde: Serde[Any] | None = None
    name: str | None = None
    grace_ms: int | None = None

    @staticmethod
    def as_(name: str) -> "Joined":
        return Joined(name=name)


@dataclass(frozen=True)
class StreamJoined:
    """Store names and serdes of a stream-stream join's two window stores."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    other_value_serde: Serde[Any] | None = None
    name: str | None = None
    store_name: str | None = None
    in_memory: bool = False
    logging_enabled: bool = True

    @staticmethod
    def as_(store_name: str) -> "StreamJoined":
        return StreamJoined(store_name=store_name)


StoreType = Literal["rocksdb", "in_memory"]


@dataclass(frozen=True)
class Materialized:
    """How a stateful operation's store is built (Kafka's ``Materialized``).

    Fields: ``store_name`` (queryable name; generated when None), serdes, ``store_type``
    (``"rocksdb"`` default or ``"in_memory"``), ``retention_ms`` (window/session stores),
    ``caching_enabled`` (default True: updates of a key are folded until commit),
    ``logging_enabled`` (changelog topic, default True), ``versioned_history_ms`` (a
    versioned key-value store, KIP-889, when not None).
    """

    store_name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    store_type: StoreType = "rocksdb"
    retention_ms: int | None = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    versioned_history_ms: int | None = None

    @staticmethod
    def as_(store_name: str) -> "Materialized":
        """Materialize into a store named ``store_name`` (queryable; its changelog is ``<application.id>-<store_name>-changelog``)."""
        return Materialized(store_name=store_name)

    @staticmethod
    def with_(key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None) -> "Materialized":
        return Materialized(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Serde[Any]) -> "Materialized":
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> "Materialized":
        return replace(self, value_serde=serde)

    def with_retention(self, retention: Duration) -> "Materialized":
        """Keep windows or sessions for ``retention`` (ms or timedelta) of stream time; must be at least window size + grace.

        Raises:
            ValueError: if negative."""
        return replace(self, retention_ms=to_ms(retention, "retention"))

    def with_caching_enabled(self) -> "Materialized":
        """Fold consecutive updates of a key in the record cache until commit or eviction (the default)."""
        return replace(self, caching_enabled=True)

    def with_caching_disabled(self) -> "Materialized":
        """Forward every update downstream at once (no record cache)."""
        return replace(self, caching_enabled=False)

    def with_logging_disabled(self) -> "Materialized":
        return replace(self, logging_enabled=False)

    def with_store_type(self, store_type: StoreType) -> "Materialized":
        """Choose ``"rocksdb"`` (persistent, the default) or ``"in_memory"``.

        Raises:
            ValueError: for any other value."""
        if store_type not in ("rocksdb", "in_memory"):
            raise ValueError(f"store_type must be 'rocksdb' or 'in_memory', got {store_type!r}")
        return replace(self, store_type=store_type)

    def as_versioned(self, history_retention: Duration) -> "Materialized":
        """Use a versioned key-value store keeping ``history_retention`` (ms or timedelta) of history (KIP-889); stream-table joins then look up as of the stream record's timestamp (KIP-914)."""
        return replace(self, versioned_history_ms=to_ms(history_retention, "history_retention"))


@dataclass(frozen=True)
class BufferConfig:
    """Suppression buffer bounds; ``unbounded()`` never emits early."""

    max_records: int | None = None
    max_bytes: int | None = None
    shut_down_when_full: bool = False

    @staticmethod
    def unbounded() -> "BufferConfig":
        """A buffer without a size bound (Kafka's BufferConfig#unbounded): never emits early."""
        return BufferConfig()

    @staticmethod
    def max_records_(n: int) -> "BufferConfig":
        """At most ``n`` buffered keys; emits the oldest early when exceeded (Kafka's
        ``BufferConfig.maxRecords``)."""
        return BufferConfig(max_records=n)

    @staticmethod
    def max_bytes_(n: int) -> "BufferConfig":
        """At most ``n`` bytes (an estimate of Kafka's buffer size); emits the oldest early
        when exceeded (Kafka's ``BufferConfig.maxBytes``)."""
        return BufferConfig(max_bytes=n)

    def emit_early_when_full(self) -> "BufferConfig":
        return replace(self, shut_down_when_full=False)

    def shut_down_when_full_(self) -> "BufferConfig":
        return replace(self, shut_down_when_full=True)


@dataclass(frozen=True)
class Suppressed:
    """``KTable.suppress`` strategy: ``until_window_closes`` (final results, one per window)
    or ``until_time_limit`` (rate limit per key)."""

    kind: Literal["window_close", "time_limit"]
    buffer: BufferConfig
    time_limit_ms: int = 0
    name: str | None = None

    @staticmethod
    def until_window_closes(buffer: BufferConfig) -> "Suppressed":
        """Emit exactly one final result per window, once stream time passes window end + grace (Kafka's Suppressed#untilWindowCloses, KIP-328).

        Raises:
            ValueError: if the buffer is bounded but not "shut down when full"."""
        if buffer.max_records is not None or buffer.max_bytes is not None:
            if not buffer.shut_down_when_full:
                raise ValueError("until_window_closes needs an unbounded or shut-down-when-full buffer")
        return Suppressed("window_close", buffer)

    @staticmethod
    def until_time_limit(time_to_wait_for_more_events: Duration, buffer: BufferConfig) -> "Suppressed":
        """Emit the latest value of a key once ``time_to_wait_for_more_events`` (ms or timedelta, stream time) has passed since its first buffered update (Kafka's Suppressed#untilTimeLimit)."""
        return Suppressed("time_limit", buffer, to_ms(time_to_wait_for_more_events, "time limit"))

    def with_name(self, name: str) -> "Suppressed":
        return replace(self, name=name)
