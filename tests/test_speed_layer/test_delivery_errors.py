"""A record the broker will not take goes through ``production.exception.handler`` (issue 25,
item 2), as Kafka's ``RecordCollectorImpl#recordSendError`` treats a failed send:

* fatal errors (authentication, authorization, invalid topic...) raise a StreamsException
  at the next send/flush/commit whatever the handler says;
* a fenced producer (``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``...) raises
  ``TaskMigratedException`` (the stream thread replaces its producer);
* retriable errors (a delivery that timed out, an unknown partition) raise
  ``TaskCorruptedException`` (the tasks restart from their committed offsets): Kafka's
  default handler answers RETRY, and duet's three handlers do too;
* the records of an aborted transaction are swallowed (KAFKA-18476);
* any other error (``MSG_SIZE_TOO_LARGE``, an invalid record) asks the handler:
  ``log_and_fail`` raises at the next send/flush/commit, ``log_and_continue`` drops the
  record (``dropped-records``), ``dead_letter`` sends it to the dead-letter topic with the
  KIP-1034 headers; a dead letter that cannot be written raises (KIP-1034: to the uncaught
  exception handler). Under ``exactly_once_v2`` a failed send leaves the transaction
  unable to commit (Kafka's producer moves it to an abortable error and
  ``StreamsProducer#commitTransaction`` raises): the thread fails whatever the handler.

Cases ported as data from apache/kafka
``streams/src/test/java/org/apache/kafka/streams/processor/internals/RecordCollectorTest.java``:
``shouldThrowTaskMigratedExceptionOnSubsequent{Send,Flush}When{ProducerFenced,InvalidPidMapping,InvalidEpoch}InCallback``,
``shouldThrowStreamsExceptionOnSubsequent{Send,Flush}IfASendFailsWithDefaultExceptionHandler``,
``shouldThrowStreamsExceptionOnSubsequent{Send,Flush}IfFatalEvenWithContinueExceptionHandler``,
``shouldNotThrowStreamsExceptionOnSubsequentCallIfASendFailsWithContinueExceptionHandler``,
``shouldThrowStreamsExceptionOnUnknownTopicOrPartitionExceptionWithDefaultExceptionHandler``
(duet's ``log_and_continue`` retries it too, unlike the test's always-CONTINUE handler in
``shouldNotThrowTaskCorruptedExceptionOnUnknownTopicOrPartitionExceptionUsingAlwaysContinueExceptionHandler``).

Through the real broker: a sink topic with ``max.message.bytes`` 1000 and a record of
2000 bytes, under each handler.
"""
from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from speed_layer import StreamsBuilder
from speed_layer.errors import StreamsException, TaskCorruptedException, TaskMigratedException
from speed_layer.runtime.delivery_errors import record_batch_size, send_error_kind
from speed_layer.runtime.record_collector import METRICS_ID, KafkaRecordCollector, PartitionCounts
from speed_layer.runtime.task import Metrics

TOPIC = "topic"
DLQ = "dlq"


# ------------------------------------------------------------------ a scripted producer
class _Msg:
    def __init__(self, topic: str, partition: int, key: bytes | None, value: bytes | None, ts: int, headers: Any) -> None:
        self._t, self._p, self._k, self._v, self._ts, self._h = topic, partition, key, value, ts, headers

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)

    def headers(self) -> Any:
        return self._h

    def offset(self) -> int:
        return 0


class _Producer:
    """Queues produced records; ``poll``/``flush`` report them failed with ``fail[topic]``."""

    def __init__(self, **fail: KafkaError) -> None:
        self.fail = fail
        self.queued: list[tuple[_Msg, Any]] = []
        self.delivered: list[_Msg] = []

    def produce(self, topic: str, value: Any, key: Any, partition: int, cb: Any, _alias: Any, ts: int, headers: Any = None) -> None:
        self.queued.append((_Msg(topic, partition, key, value, ts, headers), cb))

    def poll(self, timeout: float = 0) -> int:
        queued, self.queued = self.queued, []
        for msg, cb in queued:
            err = self.fail.get(msg.topic())
            if err is None:
                self.delivered.append(msg)
            cb(err, msg)
        return len(queued)

    def flush(self, timeout: float = 0) -> int:
        while self.queued:
            self.poll()
        return 0


def _collector(producer: _Producer, handler: str = "log_and_fail", *, transactional: bool = False,
               limits: dict[str, int] | None = None) -> KafkaRecordCollector:
    counts = PartitionCounts("unused", {TOPIC: 2, DLQ: 1})
    counts.set_max_message_bytes(limits or {})
    return KafkaRecordCollector(producer, counts, transactional=transactional, handler=handler,  # type: ignore[arg-type]
                                dead_letter_topic=DLQ, metrics=Metrics())


def _send(c: KafkaRecordCollector, value: bytes = b"v") -> None:
    c.send(TOPIC, b"3", value, 1_000, [("h", b"1")], None)


def _dropped(c: KafkaRecordCollector) -> int:
    return c.metrics.counters.get((METRICS_ID, "dropped-records"), 0)


# ------------------------------------------------------------------ kinds (RecordCollectorImpl#recordSendError)
@pytest.mark.parametrize("code,kind", [
    (KafkaError.PRODUCER_FENCED, "fenced"), (KafkaError.INVALID_PRODUCER_ID_MAPPING, "fenced"),
    (KafkaError.INVALID_PRODUCER_EPOCH, "fenced"), (KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "fenced"),
    (KafkaError.SASL_AUTHENTICATION_FAILED, "fatal"), (KafkaError.TOPIC_AUTHORIZATION_FAILED, "fatal"),
    (KafkaError.TOPIC_EXCEPTION, "fatal"), (KafkaError.UNKNOWN, "fatal"),
    (KafkaError._MSG_TIMED_OUT, "retriable"), (KafkaError.UNKNOWN_TOPIC_OR_PART, "retriable"),
    (KafkaError.NOT_ENOUGH_REPLICAS, "retriable"), (KafkaError._PURGE_QUEUE, "aborted"),
    (KafkaError.MSG_SIZE_TOO_LARGE, "record"), (KafkaError.INVALID_RECORD, "record"),
])
def test_send_errors_are_sorted_as_kafka_does(code: int, kind: str) -> None:
    assert send_error_kind(KafkaError(code)) == kind


@pytest.mark.parametrize("code", [KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_ID_MAPPING, KafkaError.INVALID_PRODUCER_EPOCH])
@pytest.mark.parametrize("then", ["send", "flush"])
@pytest.mark.parametrize("handler", ["log_and_fail", "log_and_continue"])
def test_a_fenced_producer_raises_task_migrated_on_the_next_call(code: int, then: str, handler: str) -> None:
    c = _collector(_Producer(topic=KafkaError(code)), handler)
    _send(c)
    c.poll()
    with pytest.raises(TaskMigratedException, match="producer is fenced") as info:
        _send(c) if then == "send" else c.flush()
    cause = info.value.__cause__
    assert isinstance(cause, KafkaException) and cause.args[0].code() == code and cause.args[0].fatal()


@pytest.mark.parametrize("then", ["send", "flush"])
def test_a_record_error_under_log_and_fail_raises_on_the_next_call(then: str) -> None:
    c = _collector(_Producer(topic=KafkaError(KafkaError.INVALID_RECORD)))
    _send(c)
    c.poll()
    with pytest.raises(StreamsException, match=r"Error encountered sending record to topic topic: .*\(INVALID_RECORD\)\. "
                                                r"Exception handler chose to FAIL") as info:
        _send(c) if then == "send" else c.flush()
    assert isinstance(info.value.__cause__, KafkaException)
    c.flush()  # raised once


@pytest.mark.parametrize("code", [KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED])
@pytest.mark.parametrize("handler", ["log_and_continue", "dead_letter"])
def test_a_fatal_error_raises_even_with_a_continuing_handler(code: int, handler: str) -> None:
    producer = _Producer(topic=KafkaError(code))
    c = _collector(producer, handler)
    _send(c)
    with pytest.raises(StreamsException, match="this is a fatal error"):
        c.flush()
    assert _dropped(c) == 0 and not [m for m in producer.delivered if m.topic() == DLQ]


def test_log_and_continue_drops_the_record_and_goes_on() -> None:
    producer = _Producer(topic=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    c = _collector(producer, "log_and_continue")
    _send(c)
    c.flush()
    assert _dropped(c) == 1
    producer.fail.clear()
    _send(c, b"next")
    c.flush()
    assert [m.value() for m in producer.delivered] == [b"next"]


@pytest.mark.parametrize("code", [KafkaError._MSG_TIMED_OUT, KafkaError.UNKNOWN_TOPIC_OR_PART])
@pytest.mark.parametrize("handler", ["log_and_fail", "log_and_continue", "dead_letter"])
def test_a_retriable_error_corrupts_the_tasks_whatever_the_handler(code: int, handler: str) -> None:
    c = _collector(_Producer(topic=KafkaError(code)), handler)
    _send(c)
    with pytest.raises(TaskCorruptedException, match="last committed offsets"):
        c.flush()
    assert _dropped(c) == 0


def test_the_records_of_an_aborted_transaction_are_swallowed() -> None:
    c = _collector(_Producer(topic=KafkaError(KafkaError._PURGE_QUEUE)), transactional=True)
    _send(c)
    c.flush()


def test_dead_letter_sends_the_failed_record_with_the_error_headers() -> None:
    producer = _Producer(topic=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    c = _collector(producer, "dead_letter")
    _send(c, b"too big")
    c.flush()
    [letter] = producer.delivered
    h = dict(letter.headers())
    assert (letter.topic(), letter.key(), letter.value()) == (DLQ, b"3", b"too big")
    assert h["h"] == b"1" and h["__streams.errors.sink.topic"] == TOPIC.encode()
    assert h["__streams.errors.kind"] == b"production" and h["__streams.errors.exception"] == b"KafkaException"
    assert b"MSG_SIZE_TOO_LARGE" in h["__streams.errors.message"]
    assert c.metrics.counters[(METRICS_ID, "dead-lettered")] == 1 and _dropped(c) == 1


def test_a_dead_letter_that_cannot_be_written_raises() -> None:
    producer = _Producer(topic=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), dlq=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    c = _collector(producer, "dead_letter")
    _send(c)
    with pytest.raises(StreamsException, match=r"topic dlq: .*dead letter could not be written to dlq"):
        c.flush()


@pytest.mark.parametrize("handler", ["log_and_continue", "dead_letter"])
def test_under_exactly_once_a_record_error_fails_whatever_the_handler(handler: str) -> None:
    producer = _Producer(topic=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    c = _collector(producer, handler, transactional=True)
    _send(c)
    with pytest.raises(StreamsException, match=rf"production\.exception\.handler={handler} chose to continue, but under "
                                               r"exactly_once_v2 .* unable to commit"):
        c.flush()
    assert _dropped(c) == 1 and not producer.delivered  # no dead letter in a transaction that aborts


# ------------------------------------------------------------------ size check before producing
def test_a_record_larger_than_max_message_bytes_fails_before_it_is_produced() -> None:
    producer = _Producer()
    c = _collector(producer, "log_and_continue", limits={TOPIC: 1000})
    fits = max(n for n in range(1000) if record_batch_size(b"3", b"x" * n, [("h", b"1")]) <= 1000)
    _send(c, b"x" * fits)
    _send(c, b"x" * (fits + 1))  # one byte too many: never produced (it would fail its batch)
    c.flush()
    assert [len(m.value()) for m in producer.delivered] == [fits] and _dropped(c) == 1


def test_record_batch_size_is_what_the_broker_checks() -> None:
    # measured on the embedded broker (max.message.bytes 1000): the largest value accepted
    # alone was 929 bytes with key b"k", 930 with a null key, 907 with key b"key-123" and
    # headers [("h1", b"abc"), ("hdr-two", None)]
    assert record_batch_size(b"k", b"x" * 929, None) == 1000
    assert record_batch_size(None, b"x" * 930, None) == 1000
    assert record_batch_size(b"key-123", b"x" * 907, [("h1", b"abc"), ("hdr-two", None)]) == 1000


# ------------------------------------------------------------------ through the real broker
BIG = "x" * 2000


def _small_sink(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1, config={"max.message.bytes": "1000"}) for t in topics]).values():
        f.result(30)


def _pass_through(src: str, out: Any) -> Any:
    b = StreamsBuilder()
    b.stream(src).map_values(lambda v: v).to(out)
    return b.build()


def _records(n_before: int, n_after: int) -> list[tuple[str, Any, int]]:
    return ([(f"k{i}", {"n": i}, 1000 + i) for i in range(n_before)] + [("big", {"n": -1, "pad": BIG}, 1500)]
            + [(f"k{i}", {"n": i}, 2000 + i) for i in range(n_before, n_before + n_after)])


def _values(kit: Any, topic: str) -> list[int]:
    return [json.loads(m.value())["n"] for m in kit.read(topic)]


def _wait_failed(streams: Any, timeout_s: float = 30) -> BaseException:
    deadline = time.monotonic() + timeout_s
    while not streams.errors:
        assert time.monotonic() < deadline, f"no error; state {streams.state}"
        time.sleep(0.05)
    return streams.errors[0]


@pytest.mark.broker
def test_log_and_fail_fails_the_thread_naming_the_topic(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(src=1)
    out = kit.name("small-out")
    _small_sink(kit.bootstrap, out)
    kit.produce(t["src"], _records(3, 3))
    streams = kit.streams(_pass_through(t["src"], out), kit.config("fail"))
    streams.start()
    error = _wait_failed(streams)
    assert isinstance(error, StreamsException) and f"topic {out}" in str(error) and "MSG_SIZE_TOO_LARGE" in str(error)
    assert "Exception handler chose to FAIL" in str(error)
    kit.wait_state(streams, "ERROR")


@pytest.mark.broker
def test_log_and_continue_skips_the_record_counts_it_and_goes_on(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(src=1)
    out = kit.name("small-out")
    _small_sink(kit.bootstrap, out)
    kit.produce(t["src"], _records(5, 5))
    streams = kit.run(_pass_through(t["src"], out), kit.config("continue", **{"production.exception.handler": "log_and_continue"}))
    assert _values(kit, out) == list(range(10))  # the records batched with it were not lost
    assert streams.metrics()["dropped-records-total"] == 1 and not streams.errors
    kit.produce(t["src"], [("later", {"n": 10}, 3000)])
    assert streams.wait_until_caught_up(30)
    assert _values(kit, out) == list(range(11)) and streams.state == "RUNNING"


@pytest.mark.broker
def test_a_record_rejected_by_the_broker_goes_through_the_handler(runtime_kit: Any) -> None:
    """A topic named by a topic extractor: its max.message.bytes is not looked up, the
    broker rejects the record and the delivery report carries MSG_SIZE_TOO_LARGE."""
    kit = runtime_kit
    t = kit.topics(src=1)
    out = kit.name("small-out")
    _small_sink(kit.bootstrap, out)
    kit.produce(t["src"], _records(0, 0))  # alone: librdkafka fails a whole batch with it
    streams = kit.run(_pass_through(t["src"], lambda k, v, ctx: out),
                      kit.config("routed", **{"production.exception.handler": "log_and_continue"}))
    assert streams.partition_counts.max_message_bytes(out) is None
    assert streams.metrics()["dropped-records-total"] == 1 and not streams.errors
    kit.produce(t["src"], [("later", {"n": 1}, 3000)])
    assert streams.wait_until_caught_up(30)
    assert _values(kit, out) == [1]


@pytest.mark.broker
def test_dead_letter_sends_the_record_to_the_dead_letter_topic(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(src=1, dlq=1)  # the broker's max.message.bytes (8 MB in the embedded broker)
    out = kit.name("small-out")
    _small_sink(kit.bootstrap, out)
    kit.produce(t["src"], _records(2, 2))
    streams = kit.run(_pass_through(t["src"], out), kit.config("dlq", **{
        "production.exception.handler": "dead_letter", "errors.dead.letter.queue.topic.name": t["dlq"]}))
    assert _values(kit, out) == [0, 1, 2, 3]
    [letter] = kit.read(t["dlq"])
    h = dict(letter.headers())
    assert letter.key() == b"big" and json.loads(letter.value())["pad"] == BIG
    assert h["__streams.errors.sink.topic"].decode() == out and h["__streams.errors.kind"] == b"production"
    assert b"max.message.bytes 1000" in h["__streams.errors.message"]
    m = streams.metrics()
    assert (m["dropped-records-total"], m["dead-lettered-total"]) == (1, 1)


@pytest.mark.broker
def test_a_dead_letter_too_large_for_the_dead_letter_topic_fails_the_thread(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(src=1)
    out, dlq = kit.name("small-out"), kit.name("small-dlq")
    _small_sink(kit.bootstrap, out, dlq)
    kit.produce(t["src"], _records(1, 1))
    streams = kit.streams(_pass_through(t["src"], out), kit.config("dlq", **{
        "production.exception.handler": "dead_letter", "errors.dead.letter.queue.topic.name": dlq}))
    streams.start()
    error = _wait_failed(streams)
    assert f"topic {dlq}" in str(error) and "dead letter could not be written" in str(error)


@pytest.mark.broker
def test_under_exactly_once_a_record_error_fails_the_thread(runtime_kit: Any) -> None:
    kit = runtime_kit
    t = kit.topics(src=1)
    out = kit.name("small-out")
    _small_sink(kit.bootstrap, out)
    kit.produce(t["src"], _records(2, 2))
    streams = kit.streams(_pass_through(t["src"], out), kit.config("eos", **{
        "processing.guarantee": "exactly_once_v2", "production.exception.handler": "log_and_continue"}))
    streams.start()
    error = _wait_failed(streams)
    assert f"topic {out}" in str(error) and "exactly_once_v2" in str(error)
    committed = [json.loads(m.value())["n"] for m in kit.read(out, read_committed=True)]
    assert set(committed) <= {0, 1}  # nothing after the failed record was committed
