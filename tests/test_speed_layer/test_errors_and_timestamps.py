"""Timestamp extraction and error handlers through the TopologyTestDriver.

Kafka: the default extractor (FailOnInvalidTimestamp) fails on a negative timestamp;
``log_and_skip_on_invalid`` (LogAndSkipOnInvalidTimestamp) and any custom extractor that
returns a negative timestamp make the record be skipped and counted in
``dropped-records``. Deserialization and processing errors go to their handler:
``log_and_fail`` (default) stops with a StreamsException, ``log_and_continue`` skips and
counts, ``dead_letter`` also writes the raw record to the dead-letter topic with the
``__streams.errors.*`` headers of KIP-1034.
"""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Consumed, ConfigException, Serdes, StreamsBuilder, StreamsException
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()


def _topology(**consumed: Any) -> Any:
    b = StreamsBuilder()
    b.stream("in", Consumed(**consumed)).map_values(lambda v: v["n"] * 2).to("out")
    return b.build()


def _config(**extra: Any) -> dict[str, Any]:
    return {"default.key.serde": S, "default.value.serde": Serdes.JSON(), **extra}


def test_negative_timestamp_fails_by_default() -> None:
    with TopologyTestDriver(_topology(), _config()) as d:
        with pytest.raises(StreamsException, match="invalid"):
            d.create_input_topic("in").pipe_input("k", {"n": 1}, -1)


def test_log_and_skip_on_invalid_timestamp() -> None:
    with TopologyTestDriver(_topology(), _config(**{"default.timestamp.extractor": "log_and_skip_on_invalid"})) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", {"n": 1}, -1)
        inp.pipe_input("k", {"n": 2}, 5)
        assert d.create_output_topic("out").read_key_values_to_list() == [("k", 4)]
        assert d.dropped_records() == 1


def test_custom_extractor_reads_the_value_and_negative_results_are_skipped() -> None:
    topo = _topology(timestamp_extractor=lambda k, v, ts, partition_time: v.get("time", -1))
    with TopologyTestDriver(topo, _config()) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", {"n": 1, "time": 1234}, 5)
        inp.pipe_input("k", {"n": 2}, 6)  # extractor returns -1: skipped (Kafka's RecordQueue)
        records = d.create_output_topic("out").read_records_to_list()
        assert [(r.value, r.timestamp) for r in records] == [(2, 1234)]
        assert d.dropped_records() == 1


def test_wall_clock_extractor_uses_the_mocked_clock() -> None:
    with TopologyTestDriver(_topology(), _config(**{"default.timestamp.extractor": "wall_clock"}), initial_wall_clock_time_ms=777) as d:
        d.create_input_topic("in").pipe_input("k", {"n": 1}, 5)
        assert d.create_output_topic("out").read_record().timestamp == 777


def test_deserialization_error_fails_by_default() -> None:
    with TopologyTestDriver(_topology(), _config()) as d:
        with pytest.raises(StreamsException):
            d.pipe_raw("in", b"k", b"{not json", 1)


def test_deserialization_error_log_and_continue() -> None:
    with TopologyTestDriver(_topology(), _config(**{"deserialization.exception.handler": "log_and_continue"})) as d:
        d.pipe_raw("in", b"k", b"{not json", 1)
        d.create_input_topic("in").pipe_input("k", {"n": 3}, 2)
        assert d.create_output_topic("out").read_values_to_list() == [6]
        assert d.dropped_records() == 1


def test_deserialization_error_to_dead_letter_topic() -> None:
    cfg = _config(**{"deserialization.exception.handler": "dead_letter", "errors.dead.letter.queue.topic.name": "dlq"})
    with TopologyTestDriver(_topology(), cfg) as d:
        d.pipe_raw("in", b"k", b"{not json", 9, [("trace", b"1")])
        dlq = d.create_output_topic("dlq", Serdes.Bytes(), Serdes.Bytes()).read_record()
        assert (dlq.key, dlq.value, dlq.timestamp) == (b"k", b"{not json", 9)
        headers = dict(dlq.headers)
        assert headers["trace"] == b"1"  # the source record's headers come first
        for h in ("__streams.errors.exception", "__streams.errors.message", "__streams.errors.stacktrace"):
            assert headers[h]
        assert (headers["__streams.errors.topic"], headers["__streams.errors.partition"], headers["__streams.errors.offset"]) == (b"in", b"0", b"0")


def test_processing_error_handlers() -> None:
    with TopologyTestDriver(_topology(), _config()) as d:
        with pytest.raises(StreamsException):
            d.create_input_topic("in").pipe_input("k", {"m": 1}, 1)  # KeyError in the mapper
    with TopologyTestDriver(_topology(), _config(**{"processing.exception.handler": "log_and_continue"})) as d:
        inp = d.create_input_topic("in")
        inp.pipe_input("k", {"m": 1}, 1)
        inp.pipe_input("k", {"n": 1}, 2)
        assert d.create_output_topic("out").read_values_to_list() == [2]
        assert d.dropped_records() == 1


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigException, match="deserialization.exception.handler"):
        TopologyTestDriver(_topology(), _config(**{"deserialization.exception.handler": "ignore"}))
    with pytest.raises(ConfigException, match="unknown config key"):
        TopologyTestDriver(_topology(), _config(**{"no.such.key": 1}))


def _cached_counts_topology() -> Any:
    """A count with a caching store (the default), its updates forwarded on the cache
    flush at commit (the driver commits after every record) into a mapper that raises on
    a count of 2."""
    b = StreamsBuilder()
    counts = b.stream("in", Consumed(key_serde=S, value_serde=S)).group_by_key().count()
    counts.to_stream().map_values(lambda n: 10 // (n - 2)).to("out")
    return b.build()


@pytest.mark.parametrize("handler", ["log_and_fail", "log_and_continue", "dead_letter"])
def test_processing_error_in_a_cache_flush_goes_to_the_handler(handler: str) -> None:
    """As Kafka's ProcessorNode#process since 3.9 (KIP-1033), whose handler sees every
    exception of a processor, one raised by a record a cache flush forwards included: the
    flushed record is dropped (or dead-lettered) and the flush and the task go on."""
    cfg = _config(**{"processing.exception.handler": handler, "errors.dead.letter.queue.topic.name": "dlq"})
    with TopologyTestDriver(_cached_counts_topology(), cfg) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "x", 1)
        if handler == "log_and_fail":
            with pytest.raises(StreamsException, match="flushed from the cache"):
                inp.pipe_input("a", "y", 2)
            return
        inp.pipe_input("a", "y", 2)  # count 2: 10 // 0 raises in the flush's forward
        inp.pipe_input("a", "z", 3)
        inp.pipe_input("b", "x", 4)
        assert d.create_output_topic("out").read_key_values_to_list() == [("a", -10), ("a", 10), ("b", -10)]
        assert d.dropped_records() == 1
        dead = d.create_output_topic("dlq", Serdes.Bytes(), Serdes.Bytes()).read_records_to_list()
        if handler == "dead_letter":
            assert [(r.key, r.value, r.timestamp) for r in dead] == [(None, None, 2)]
            headers = dict(dead[0].headers)
            assert headers["__streams.errors.exception"] == b"ZeroDivisionError"
            assert headers["__streams.errors.node"].startswith(b"KSTREAM-AGGREGATE-") or headers["__streams.errors.node"].startswith(b"KTABLE-")
        else:
            assert dead == []
