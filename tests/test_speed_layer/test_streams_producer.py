"""``StreamsProducer`` (the stream thread's producer and its transaction) without a broker:
the confluent-kafka ``Producer`` is a stand-in that records the calls; the broker-backed
behaviour is in ``test_runtime_eos.py``, ``test_broker_outage.py`` and
``test_client_close.py``."""
from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from speed_layer import StreamsConfig
from speed_layer.errors import StreamsException
from speed_layer.runtime import streams_producer
from speed_layer.runtime.streams_producer import StreamsProducer, fatal_producer_error, is_hung
from speed_layer.runtime.task import Metrics


class FakeProducer:
    """Records the transactional calls; ``fail[name]`` is a list of errors raised by the
    next calls of ``name`` (one each)."""

    made: list["FakeProducer"] = []
    #: ``fail`` of the next producer made
    fail_next: dict[str, list[KafkaError]] = {}

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.calls: list[str] = []
        self.fail, FakeProducer.fail_next = FakeProducer.fail_next, {}
        FakeProducer.made.append(self)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        errors = self.fail.get(name)
        if errors:
            raise KafkaException(errors.pop(0))

    def init_transactions(self, timeout: float) -> None:
        self._call("init_transactions")

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], metadata: Any, timeout: float) -> None:
        self._call("send_offsets_to_transaction")

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit_transaction")

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort_transaction")

    def produce(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing is sent here")

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0

    def close(self) -> None:
        self.calls.append("close")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[FakeProducer]:
    FakeProducer.made, FakeProducer.fail_next = [], {}
    monkeypatch.setattr(streams_producer, "Producer", FakeProducer)
    return FakeProducer.made


def _producer(eos: bool = True, only_errors: bool = False) -> StreamsProducer:
    cfg = StreamsConfig.of({"processing.guarantee": "exactly_once_v2" if eos else "at_least_once", "task.timeout.ms": 60_000})
    return StreamsProducer("app-StreamThread-1", cfg, lambda client_id: {"client.id": client_id}, "app-p-StreamThread-1-producer",
                           "app-p-1", None, Metrics(), only_errors=only_errors)  # type: ignore[arg-type]


def test_exactly_once_makes_a_transactional_producer_and_retries_init_transactions(fake: list[FakeProducer]) -> None:
    FakeProducer.fail_next = {"init_transactions": [KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, retriable=True)]}
    sp = _producer(only_errors=True)
    sp.create()
    (p,) = fake
    assert p.conf == {"client.id": "app-p-StreamThread-1-producer", "transactional.id": "app-p-1", "delivery.report.only.error": True}
    assert p.calls == ["init_transactions", "init_transactions"]
    assert sp.producer is p and sp.collector is not None and sp.collector.transactional


def test_at_least_once_opens_no_transaction(fake: list[FakeProducer]) -> None:
    sp = _producer(eos=False)
    sp.create()
    sp.maybe_begin()
    (p,) = fake
    assert "transactional.id" not in p.conf and p.calls == [] and not sp.in_transaction


def test_one_transaction_at_a_time_and_offsets_only_when_some_moved(fake: list[FakeProducer]) -> None:
    sp = _producer()
    sp.create()
    sp.maybe_begin()
    sp.maybe_begin()
    assert sp.in_transaction
    sp.commit_transaction([], None)
    assert not sp.in_transaction
    sp.maybe_begin()
    sp.commit_transaction([TopicPartition("in", 0, 5)], None)
    assert fake[0].calls == ["init_transactions", "begin_transaction", "commit_transaction",
                             "begin_transaction", "send_offsets_to_transaction", "commit_transaction"]


def test_a_hung_commit_is_reported_as_a_fatal_timeout(fake: list[FakeProducer], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams_producer, "run_bounded", lambda what, call, timeout_s: (False, None))
    sp = _producer()
    sp.create()
    sp.maybe_begin()
    with pytest.raises(KafkaException) as raised:
        sp.commit_transaction([], None)
    assert is_hung(raised.value.args[0]) and sp.in_transaction
    assert fatal_producer_error(StreamsException("not a producer error")) is None
    wrapped = StreamsException("commit failed")
    wrapped.__cause__ = raised.value
    assert fatal_producer_error(wrapped) is raised.value.args[0]
    assert not is_hung(KafkaError(KafkaError._TIMED_OUT, "librdkafka's own timeout"))


def test_abort_retries_a_retriable_error_and_raises_a_fatal_one(fake: list[FakeProducer], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams_producer.time, "sleep", lambda s: None)
    sp = _producer()
    sp.create()
    sp.maybe_begin()
    fake[0].fail["abort_transaction"] = [KafkaError(KafkaError._TIMED_OUT, retriable=True)]
    sp.abort_transaction()
    assert fake[0].calls[-2:] == ["abort_transaction", "abort_transaction"] and not sp.in_transaction
    sp.maybe_begin()
    fake[0].fail["abort_transaction"] = [KafkaError(KafkaError._FENCED, fatal=True)]
    with pytest.raises(KafkaException):
        sp.abort_transaction()


def test_reset_retires_the_failed_producer_and_makes_a_new_one(fake: list[FakeProducer], monkeypatch: pytest.MonkeyPatch) -> None:
    retired: list[tuple[Any, bool]] = []
    monkeypatch.setattr(streams_producer, "retire_producer", lambda p, purge=True: retired.append((p, purge)))
    sp = _producer()
    sp.create()
    sp.maybe_begin()
    fenced = KafkaException(KafkaError(KafkaError._FENCED, fatal=True))
    sp.reset(fenced)
    assert retired == [(fake[0], True)] and sp.producer is fake[1] and not sp.in_transaction
    hung = KafkaException(KafkaError(KafkaError._TIMED_OUT, "hung", fatal=True))
    sp.reset(hung)
    assert retired[-1] == (fake[1], False)  # a hung producer is left alone
    FakeProducer.fail_next = {"init_transactions": [KafkaError(KafkaError._FENCED, fatal=True)]}
    with pytest.raises(StreamsException, match="cannot replace the failed producer"):
        sp.reset(fenced)


def test_close_aborts_the_open_transaction_and_retires_a_producer_that_cannot_abort(
        fake: list[FakeProducer], monkeypatch: pytest.MonkeyPatch) -> None:
    retired: list[Any] = []
    monkeypatch.setattr(streams_producer, "retire_producer", lambda p, purge=True: retired.append(p))
    sp = _producer()
    sp.create()
    sp.maybe_begin()
    sp.close()
    assert fake[0].calls[-2:] == ["abort_transaction", "close"] and sp.producer is None and sp.collector is None
    sp.create()
    sp.maybe_begin()
    fake[1].fail["abort_transaction"] = [KafkaError(KafkaError._FENCED, fatal=True)]
    sp.close()
    assert retired == [fake[1]] and "close" not in fake[1].calls
