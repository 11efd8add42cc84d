"""Errors in KafkaStreams: dead-letter queue, uncaught exception handler, config validation."""
from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from speed_layer import ConfigException, Consumed, Produced, Serdes, StreamsBuilder, StreamsException, Topology, TopologyException
from speed_layer.runtime.kafka_streams import KafkaStreams


def pass_through(t: dict[str, str], fail_on: Any = None) -> Topology:
    """``input`` -> map_values(check) -> ``output``; ``fail_on(value)`` may raise."""
    b = StreamsBuilder()
    text, js = Serdes.String(), Serdes.JSON()

    def check(v: Any) -> Any:
        if fail_on is not None:
            fail_on(v)
        return {"seen": v["n"]}

    b.stream(t["input"], Consumed(key_serde=text, value_serde=js)).map_values(check).to(t["output"], Produced(key_serde=text, value_serde=js))
    return b.build()


@pytest.mark.broker
def test_malformed_and_failing_records_go_to_the_dead_letter_topic(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(input=2, output=2, dlq=1)

    def fail_on(v: Any) -> None:
        if v["n"] == 7:
            raise ValueError("seven is not allowed")

    good = [(f"k{i}", json.dumps({"n": i}).encode(), 1000 + i) for i in range(20)]
    records = [(k.encode(), v, ts) for k, v, ts in good[:10]] + [(b"bad", b"{not json", 2000)] + [(k.encode(), v, ts) for k, v, ts in good[10:]]
    kit.produce(t["input"], records, raw=True)
    cfg = kit.config("app", **{
        "deserialization.exception.handler": "dead_letter",
        "processing.exception.handler": "dead_letter",
        "errors.dead.letter.queue.topic.name": t["dlq"],
    })
    streams = kit.run(pass_through(t, fail_on), cfg)

    out = sorted(json.loads(m.value())["seen"] for m in kit.read(t["output"]))
    assert out == [i for i in range(20) if i != 7]
    dlq = kit.read(t["dlq"])
    assert len(dlq) == 2
    by_kind = {dict(m.headers())["__streams.errors.kind"].decode(): m for m in dlq}
    bad = by_kind["deserialization"]
    h = dict(bad.headers())
    assert bad.key() == b"bad" and bad.value() == b"{not json"  # the original bytes
    assert h["__streams.errors.exception"] == b"SerializationException"
    assert h["__streams.errors.topic"].decode() == t["input"]
    assert int(h["__streams.errors.offset"]) >= 0 and h["__streams.errors.partition"] in (b"0", b"1")
    failed = dict(by_kind["processing"].headers())
    assert failed["__streams.errors.exception"] == b"ValueError"
    assert b"seven is not allowed" in failed["__streams.errors.message"]
    assert b"Traceback" in failed["__streams.errors.stacktrace"]
    m = streams.metrics()
    assert m["dead-lettered-total"] == 2 and m["dropped-records-total"] == 2
    assert streams.state == "RUNNING"


@pytest.mark.broker
def test_uncaught_exception_shuts_down_the_client_by_default(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(input=1, output=1)
    kit.produce(t["input"], [("k", {"n": i}, 1000 + i) for i in range(5)])

    def fail_on(v: Any) -> None:
        if v["n"] == 3:
            raise RuntimeError("boom")

    streams = kit.streams(pass_through(t, fail_on), kit.config("app"))
    streams.start()
    kit.wait_state(streams, "ERROR")
    assert len(streams.errors) == 1 and "boom" in str(streams.errors[0].__cause__ or streams.errors[0])
    assert isinstance(streams.errors[0], StreamsException)
    assert streams.close(5)  # nothing left to stop
    assert streams.metrics()["alive-stream-threads"] == 0


@pytest.mark.broker
def test_replace_thread_reprocesses_from_the_last_commit(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(input=1, output=1)
    kit.produce(t["input"], [("k", {"n": i}, 1000 + i) for i in range(50)])
    failed = threading.Event()

    def fail_once(v: Any) -> None:
        if v["n"] == 30 and not failed.is_set():
            failed.set()
            raise RuntimeError("transient")

    answers: list[str] = []

    def handler(exc: BaseException) -> str:
        answers.append(type(exc).__name__)
        return "REPLACE_THREAD"

    streams = kit.streams(pass_through(t, fail_once), kit.config("app"))
    streams.set_uncaught_exception_handler(handler)
    streams.start()
    assert streams.wait_until_caught_up(60)
    kit.wait_state(streams, "RUNNING")
    assert answers == ["StreamsException"]
    seen = [json.loads(m.value())["seen"] for m in kit.read(t["output"])]
    assert sorted(set(seen)) == list(range(50))  # at-least-once: nothing lost (maybe repeated)
    assert streams.metrics()["alive-stream-threads"] == 1


@pytest.mark.broker
def test_start_fails_fast_on_topology_problems(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(a=2, b=3, output=1)
    b = StreamsBuilder()
    table = b.table(t["b"])
    b.stream(t["a"]).join(table, lambda x, y: x).to(t["output"])
    streams = kit.streams(b.build(), kit.config("copart"))
    with pytest.raises(TopologyException, match="not co-partitioned"):
        streams.start()
    assert streams.state == "ERROR"

    b2 = StreamsBuilder()
    b2.stream(kit.name("missing")).to(t["output"])
    with pytest.raises(TopologyException, match="Missing source topic"):
        kit.streams(b2.build(), kit.config("missing")).start()

    b3 = StreamsBuilder()
    b3.stream(t["a"]).to(kit.name("no-such-output"))
    with pytest.raises(StreamsException, match="do not exist"):
        kit.streams(b3.build(), kit.config("nosink")).start()


def _topology() -> Topology:
    b = StreamsBuilder()
    b.stream("in").to("out")
    return b.build()


@pytest.mark.parametrize(
    "config, match",
    [
        ({"processing.guarantee": "exactly_once"}, r"processing\.guarantee.*'at_least_once'.*'exactly_once_v2'"),
        ({"auto.offset.reset": "none"}, r"auto\.offset\.reset.*'earliest'.*'latest'"),
        ({"num.stream.threads": 0}, r"num\.stream\.threads.*greater than or equal to 1"),
        ({"deserialization.exception.handler": "ignore"}, r"deserialization\.exception\.handler.*'log_and_fail'.*'dead_letter'"),
        ({"commit.interval.millis": 100}, r"unknown config key.*commit\.interval\.millis.*known keys.*commit\.interval\.ms"),
        ({"processing.exception.handler": "dead_letter"}, r"processing\.exception\.handler=dead_letter requires errors\.dead\.letter\.queue\.topic\.name"),
        ({"bootstrap.servers": ""}, r"bootstrap\.servers must be set"),
        ({"replication.factor": 0}, r"replication\.factor=0.*-1 \(the broker's default\.replication\.factor\) or at least 1"),
    ],
)
def test_config_errors_fail_at_construction(config: dict[str, Any], match: str) -> None:
    base = {"application.id": "cfg-test", "bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(ConfigException, match=match):
        KafkaStreams(_topology(), {**base, **config})


def test_client_only_starts_once_and_cleanup_needs_a_stopped_client(tmp_path: Any) -> None:
    streams = KafkaStreams(_topology(), {"application.id": "cfg-test", "bootstrap.servers": "127.0.0.1:1", "state.dir": str(tmp_path)})
    assert streams.state == "CREATED"
    (tmp_path / "cfg-test" / "0_0").mkdir(parents=True)
    streams.cleanup()
    assert not (tmp_path / "cfg-test" / "0_0").exists()
    with pytest.raises(StreamsException):
        streams.store("nope")
    assert streams.close()
    assert streams.state == "NOT_RUNNING"
    with pytest.raises(StreamsException, match="only be started once"):
        streams.start()
