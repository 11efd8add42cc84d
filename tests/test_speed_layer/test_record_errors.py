"""One record must never stop the application (duet issue 25, items 2 and 3).

Through the TopologyTestDriver (the real StreamTask):

* a timestamp extractor's exception goes to ``deserialization.exception.handler``
  (duet's extension: Kafka's ``RecordQueue#updateHead`` wraps it in a fatal
  StreamsException, "Fatal user code error in TimestampExtractor callback"); an
  extractor's StreamsException stays fatal, as Kafka rethrows it;
* a sink or repartition topic's serializer exception goes to
  ``production.exception.handler`` (Kafka's ``RecordCollectorImpl#send`` ->
  ``ProductionExceptionHandler#handleSerializationException``, KIP-399, origin KEY or
  VALUE): FAIL by default (``DefaultProductionExceptionHandler``), CONTINUE drops the send
  (``dropped-records``), ``dead_letter`` sends the source record to the dead-letter topic
  with the KIP-1034 headers;
* Kafka's built-in extractors (``FailOnInvalidTimestamp``, ``LogAndSkipOnInvalidTimestamp``,
  ``UsePartitionTimeOnInvalidTimestamp``) per source or by ``default.timestamp.extractor``,
  and a negative extracted timestamp dropped by the task (``RecordQueue``: "Skipping record
  due to negative extracted timestamp", the dropped-records sensor).

Cases ported as data from apache/kafka ``streams/src/test/java/org/apache/kafka/streams/processor/``
``TimestampExtractorTest``, ``FailOnInvalidTimestampTest``, ``LogAndSkipOnInvalidTimestampTest``,
``UsePartitionTimeOnInvalidTimestampTest`` and ``processor/internals/RecordCollectorTest``
(``shouldThrowStreamsExceptionWhen{Key,Value}SerializationFailedAndProductionExceptionHandlerRepliesWithFail``,
``shouldDropRecordExceptionUsingAlwaysContinueExceptionHandler``,
``shouldNotFailIfRecordContextIsNotAvailableOnSerializationError``).
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import ConfigException, Consumed, Serdes, StreamsBuilder, StreamsException, Topology
from speed_layer.errors import InvalidTimestampException, SerializationException
from speed_layer.options import Produced, Repartitioned
from speed_layer.processor.api import Processor, PunctuationType, Record
from speed_layer.processor.timestamps import (
    FailOnInvalidTimestamp,
    LogAndSkipOnInvalidTimestamp,
    UsePartitionTimeOnInvalidTimestamp,
)
from speed_layer.serde import Serde
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
DLQ = {"errors.dead.letter.queue.topic.name": "dlq"}


def _config(**extra: Any) -> dict[str, Any]:
    return {"default.key.serde": S, "default.value.serde": Serdes.JSON(), **extra}


def _dead_letters(d: TopologyTestDriver) -> list[Any]:
    return d.create_output_topic("dlq", Serdes.Bytes(), Serdes.Bytes()).read_records_to_list()


# ------------------------------------------------------------------ extractor exceptions
def _extractor(key: Any, value: Any, record_ts: int, partition_time: int) -> int:
    if value.get("boom"):
        raise ValueError(f"no time in {value}")
    return value["t"]


def _extracting_topology(extractor: Any = _extractor) -> Any:
    b = StreamsBuilder()
    b.stream("in", Consumed(timestamp_extractor=extractor)).map_values(lambda v: v["n"]).to("out")
    return b.build()


def test_an_extractor_exception_is_dead_lettered_with_its_reason_and_the_next_record_processed() -> None:
    cfg = _config(**{"deserialization.exception.handler": "dead_letter", **DLQ})
    with TopologyTestDriver(_extracting_topology(), cfg) as d:
        d.pipe_raw("in", b"a", b'{"n": 1, "t": 100}', 5)
        d.pipe_raw("in", b"b", b'{"n": 2, "boom": true}', 6, [("trace", b"7")])
        d.pipe_raw("in", b"c", b'{"n": 3, "t": 300}', 7)
        out = d.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in out] == [("a", 1, 100), ("c", 3, 300)]
        [dead] = _dead_letters(d)
        assert (dead.key, dead.value, dead.timestamp) == (b"b", b'{"n": 2, "boom": true}', 6)
        h = dict(dead.headers)
        assert h["trace"] == b"7"
        assert h["__streams.errors.kind"] == b"timestamp_extraction"
        assert h["__streams.errors.exception"] == b"ValueError"
        assert b"no time in" in h["__streams.errors.message"] and h["__streams.errors.stacktrace"]
        assert (h["__streams.errors.topic"], h["__streams.errors.partition"], h["__streams.errors.offset"]) == (b"in", b"0", b"1")
        assert d.dropped_records() == 1


def test_an_extractor_exception_fails_with_the_default_handler_and_is_skipped_with_log_and_continue() -> None:
    with TopologyTestDriver(_extracting_topology(), _config()) as d:
        with pytest.raises(StreamsException, match="timestamp_extraction error") as info:
            d.pipe_raw("in", b"b", b'{"n": 2, "boom": true}', 6)
        assert isinstance(info.value.__cause__, ValueError)
    with TopologyTestDriver(_extracting_topology(), _config(**{"deserialization.exception.handler": "log_and_continue"})) as d:
        d.pipe_raw("in", b"b", b'{"n": 2, "boom": true}', 6)
        d.pipe_raw("in", b"c", b'{"n": 3, "t": 300}', 7)
        assert d.create_output_topic("out").read_values_to_list() == [3]
        assert d.dropped_records() == 1


def test_an_extractor_streams_exception_stays_fatal_as_in_kafka_record_queue() -> None:
    def fatal(key: Any, value: Any, record_ts: int, partition_time: int) -> int:
        raise StreamsException("internal fatal extractor exception")

    cfg = _config(**{"deserialization.exception.handler": "dead_letter", **DLQ})
    with TopologyTestDriver(_extracting_topology(fatal), cfg) as d:
        with pytest.raises(StreamsException, match="internal fatal"):
            d.pipe_raw("in", b"a", b'{"n": 1}', 5)


# ------------------------------------------------------------------ built-in extractors
@pytest.mark.parametrize("extractor, record_ts, partition_time, expected", [
    # TimestampExtractorTest#testExtractMetadataTimestamp (each subclass): the record's own timestamp
    (FailOnInvalidTimestamp(), 42, 0, 42),
    (LogAndSkipOnInvalidTimestamp(), 42, 0, 42),
    (UsePartitionTimeOnInvalidTimestamp(), 42, 0, 42),
    (FailOnInvalidTimestamp(), 0, -1, 0),
    # LogAndSkipOnInvalidTimestampTest#logAndSkipOnInvalidTimestamp: the negative one is returned
    (LogAndSkipOnInvalidTimestamp(), -1, 0, -1),
    # UsePartitionTimeOnInvalidTimestampTest#usePartitionTimeOnInvalidTimestamp
    (UsePartitionTimeOnInvalidTimestamp(), -1, 42, 42),
])
def test_builtin_extractors(extractor: Any, record_ts: int, partition_time: int, expected: int) -> None:
    assert extractor("k", "v", record_ts, partition_time) == expected


@pytest.mark.parametrize("extractor, partition_time, error", [
    # FailOnInvalidTimestampTest#failOnInvalidTimestamp
    (FailOnInvalidTimestamp(), 0, InvalidTimestampException),
    # UsePartitionTimeOnInvalidTimestampTest#shouldThrowStreamsExceptionIfPartitionTimeIsUnknown
    (UsePartitionTimeOnInvalidTimestamp(), -1, StreamsException),
])
def test_builtin_extractors_that_fail(extractor: Any, partition_time: int, error: type) -> None:
    with pytest.raises(error):
        extractor("k", "v", -1, partition_time)


def _plain_topology(**consumed: Any) -> Any:
    b = StreamsBuilder()
    b.stream("in", Consumed(**consumed)).map_values(lambda v: v["n"]).to("out")
    return b.build()


@pytest.mark.parametrize("name", ["fail_on_invalid", "FailOnInvalidTimestamp",
                                  "org.apache.kafka.streams.processor.FailOnInvalidTimestamp", None])
def test_fail_on_invalid_timestamp_is_the_default_and_fatal_even_with_dead_letter(name: str | None) -> None:
    extra = {} if name is None else {"default.timestamp.extractor": name}
    cfg = _config(**extra, **{"deserialization.exception.handler": "dead_letter", **DLQ})
    with TopologyTestDriver(_plain_topology(), cfg) as d:
        d.pipe_raw("in", b"a", b'{"n": 1}', 5)
        with pytest.raises(InvalidTimestampException, match="in-0@1.*invalid \\(negative\\) timestamp -1"):
            d.pipe_raw("in", b"b", b'{"n": 2}', -1)


@pytest.mark.parametrize("how", ["config", "config_kafka_name", "per_source"])
def test_log_and_skip_on_invalid_timestamp_drops_the_record(how: str) -> None:
    if how == "per_source":
        topo, cfg = _plain_topology(timestamp_extractor=LogAndSkipOnInvalidTimestamp()), _config()
    else:
        name = "log_and_skip_on_invalid" if how == "config" else "LogAndSkipOnInvalidTimestamp"
        topo, cfg = _plain_topology(), _config(**{"default.timestamp.extractor": name})
    with TopologyTestDriver(topo, cfg) as d:
        d.pipe_raw("in", b"a", b'{"n": 1}', 5)
        d.pipe_raw("in", b"b", b'{"n": 2}', -1)
        d.pipe_raw("in", b"c", b'{"n": 3}', 6)
        out = d.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.timestamp) for r in out] == [("a", 5), ("c", 6)]
        assert d.dropped_records() == 1


@pytest.mark.parametrize("how", ["config", "per_source"])
def test_use_partition_time_on_invalid_timestamp(how: str) -> None:
    if how == "per_source":
        topo, cfg = _plain_topology(timestamp_extractor=UsePartitionTimeOnInvalidTimestamp()), _config()
    else:
        topo, cfg = _plain_topology(), _config(**{"default.timestamp.extractor": "use_partition_time_on_invalid"})
    with TopologyTestDriver(topo, cfg) as d:
        with pytest.raises(StreamsException, match="partition time is unknown"):
            d.pipe_raw("in", b"a", b'{"n": 1}', -1)
    with TopologyTestDriver(topo, cfg) as d:
        d.pipe_raw("in", b"a", b'{"n": 1}', 50)
        d.pipe_raw("in", b"b", b'{"n": 2}', 20)
        d.pipe_raw("in", b"c", b'{"n": 3}', -1)  # the partition time: 50, the highest so far
        out = d.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.timestamp) for r in out] == [("a", 50), ("b", 20), ("c", 50)]
        assert d.dropped_records() == 0


def test_a_negative_timestamp_from_any_extractor_is_dropped_and_counted() -> None:
    topo = _plain_topology(timestamp_extractor=lambda k, v, ts, pt: v.get("t", -7))
    with TopologyTestDriver(topo, _config()) as d:
        d.pipe_raw("in", b"a", b'{"n": 1}', 5)
        d.pipe_raw("in", b"b", b'{"n": 2, "t": 9}', 6)
        assert [(r.key, r.timestamp) for r in d.create_output_topic("out").read_records_to_list()] == [("b", 9)]
        assert d.dropped_records() == 1


def test_unknown_extractor_names_are_config_errors() -> None:
    with pytest.raises(ConfigException, match="default.timestamp.extractor"):
        TopologyTestDriver(_plain_topology(), _config(**{"default.timestamp.extractor": "NoSuchExtractor"}))


# ------------------------------------------------------------------ serialization errors
def _picky(name: str) -> Serde[Any]:
    """A string serde whose serializer rejects ``"bad"``."""
    def ser(v: Any) -> bytes:
        if v == "bad":
            raise ValueError(f"{name} cannot serialize {v!r}")
        return str(v).encode()
    return Serde(name, ser, lambda b: b.decode())


def _sink_topology(origin: str) -> Any:
    b = StreamsBuilder()
    s = b.stream("in", Consumed(key_serde=S, value_serde=S))
    produced = Produced(key_serde=_picky("KeySerde"), value_serde=S) if origin == "KEY" else Produced(key_serde=S, value_serde=_picky("ValueSerde"))
    s.to("out", produced)
    s.map_values(str.upper).to("copy", Produced(key_serde=S, value_serde=S))  # a second sink of each record
    return b.build()


@pytest.mark.parametrize("origin", ["KEY", "VALUE"])
def test_a_sink_serialization_error_fails_with_the_default_production_handler(origin: str) -> None:
    with TopologyTestDriver(_sink_topology(origin), _config()) as d:
        with pytest.raises(StreamsException, match="Unable to serialize record.*topic=\\[out\\]") as info:
            d.pipe_raw("in", b"bad", b"bad", 5)
        cause = info.value.__cause__
        assert isinstance(cause, SerializationException) and isinstance(cause.__cause__, ValueError)


@pytest.mark.parametrize("origin", ["KEY", "VALUE"])
def test_a_sink_serialization_error_is_dead_lettered_and_the_other_records_and_sinks_go_on(origin: str) -> None:
    cfg = _config(**{"production.exception.handler": "dead_letter", **DLQ})
    with TopologyTestDriver(_sink_topology(origin), cfg) as d:
        d.pipe_raw("in", b"k1", b"v1", 5)
        d.pipe_raw("in", b"bad", b"bad", 6, [("trace", b"x")])
        d.pipe_raw("in", b"k3", b"v3", 7)
        assert d.create_output_topic("out", S, S).read_key_values_to_list() == [("k1", "v1"), ("k3", "v3")]
        # Kafka's CONTINUE drops this send only: the record's other sink still gets it
        assert d.create_output_topic("copy", S, S).read_key_values_to_list() == [("k1", "V1"), ("bad", "BAD"), ("k3", "V3")]
        [dead] = _dead_letters(d)
        assert (dead.key, dead.value, dead.timestamp) == (b"bad", b"bad", 6)  # the source record's raw bytes
        h = dict(dead.headers)
        assert h["trace"] == b"x"
        assert (h["__streams.errors.kind"], h["__streams.errors.origin"], h["__streams.errors.sink.topic"]) == (
            b"serialization", origin.encode(), b"out")
        assert h["__streams.errors.exception"] == b"SerializationException" and h["__streams.errors.node"]
        assert f"{origin[0]}{origin[1:].lower()}Serde cannot serialize 'bad'".encode() in h["__streams.errors.message"]
        assert (h["__streams.errors.topic"], h["__streams.errors.offset"]) == (b"in", b"1")
        assert d.dropped_records() == 1


def test_a_sink_serialization_error_with_log_and_continue_drops_the_send() -> None:
    with TopologyTestDriver(_sink_topology("VALUE"), _config(**{"production.exception.handler": "log_and_continue"})) as d:
        d.pipe_raw("in", b"k1", b"bad", 5)
        d.pipe_raw("in", b"k2", b"v2", 6)
        assert d.create_output_topic("out", S, S).read_key_values_to_list() == [("k2", "v2")]
        assert d.dropped_records() == 1


def _repartition_topology() -> Any:
    b = StreamsBuilder()
    (b.stream("in", Consumed(key_serde=S, value_serde=Serdes.JSON()))
     .select_key(lambda k, v: v["id"])
     .repartition(Repartitioned(name="by-id", key_serde=S))
     .map_values(lambda v: v["n"])
     .to("out", Produced(key_serde=S, value_serde=Serdes.JSON())))
    return b.build()


def test_a_repartition_key_serialization_error_fails_by_default_and_is_dead_lettered_with_dead_letter() -> None:
    with TopologyTestDriver(_repartition_topology(), _config()) as d:
        with pytest.raises(StreamsException, match="Unable to serialize record.*by-id-repartition"):
            d.pipe_raw("in", b"a", b'{"id": 5, "n": 1}', 5)  # an int key: the String serde rejects it
    cfg = _config(**{"production.exception.handler": "dead_letter", **DLQ})
    with TopologyTestDriver(_repartition_topology(), cfg) as d:
        d.pipe_raw("in", b"a", b'{"id": "x", "n": 1}', 5)
        d.pipe_raw("in", b"b", b'{"id": 5, "n": 2}', 6)
        d.pipe_raw("in", b"c", b'{"id": "y", "n": 3}', 7)
        assert d.create_output_topic("out").read_key_values_to_list() == [("x", 1), ("y", 3)]
        [dead] = _dead_letters(d)
        assert (dead.key, dead.value) == (b"b", b'{"id": 5, "n": 2}')
        h = dict(dead.headers)
        assert (h["__streams.errors.kind"], h["__streams.errors.origin"]) == (b"serialization", b"KEY")
        assert h["__streams.errors.sink.topic"].endswith(b"by-id-repartition")
        assert h["__streams.errors.exception"] == b"SerializationException"
        assert d.dropped_records() == 1


def test_dead_letter_production_handler_requires_the_topic() -> None:
    cfg = _config(**{"production.exception.handler": "dead_letter"})
    with TopologyTestDriver(_sink_topology("VALUE"), cfg) as d:
        with pytest.raises(StreamsException, match="errors.dead.letter.queue.topic.name"):
            d.pipe_raw("in", b"k", b"bad", 5)


class _BadTicker(Processor[Any, Any]):
    """Forwards ``("tick", "bad")`` at every wall-clock punctuation (no source record)."""

    def init(self, context: Any) -> None:
        context.schedule(100, PunctuationType.WALL_CLOCK_TIME, lambda ts: context.forward(Record("tick", "bad", ts)))

    def process(self, record: Record[Any, Any]) -> None:
        return None


def test_a_serialization_error_without_a_source_record_is_dead_lettered_with_null_key_and_value() -> None:
    # RecordCollectorTest#shouldNotFailIfRecordContextIsNotAvailableOnSerializationError
    topology = (Topology().add_source("src", "in", key_deserializer=S, value_deserializer=S)
                .add_processor("tick", _BadTicker, "src")
                .add_sink("sink", "out", "tick", key_serializer=S, value_serializer=_picky("ValueSerde")))
    cfg = _config(**{"production.exception.handler": "dead_letter", **DLQ})
    with TopologyTestDriver(topology, cfg) as d:
        d.advance_wall_clock_time(100)
        [dead] = _dead_letters(d)
        assert (dead.key, dead.value, dead.timestamp) == (None, None, 100)
        h = dict(dead.headers)
        assert (h["__streams.errors.kind"], h["__streams.errors.node"], h["__streams.errors.origin"]) == (
            b"serialization", b"sink", b"VALUE")
        assert "__streams.errors.topic" not in h
        assert d.dropped_records() == 1
