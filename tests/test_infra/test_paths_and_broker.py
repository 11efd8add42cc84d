"""The embedded broker: start, answer, stop; clear errors; paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from speed_layer.runtime import paths
from speed_layer.admin import TopicSpec, delete_topics, ensure_topics
from speed_layer.admin import (
    BrokerStartError,
    EmbeddedKafka,
    KafkaJarsMissingError,
    kafka_cluster,
)

from .kafka_util import read_topic


def test_paths_follow_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = paths.repo_root()
    assert (root / "pyproject.toml").is_file()
    monkeypatch.delenv("DUET_HOME", raising=False)
    monkeypatch.delenv("DUET_LAKE", raising=False)
    assert paths.duet_home() == root / ".duet"
    assert paths.default_lake() == root / "lake"
    monkeypatch.setenv("DUET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DUET_LAKE", str(tmp_path / "lake"))
    assert paths.kafka_jars_dir() == tmp_path / "home" / "jars" / "kafka"
    assert paths.delta_jars_dir() == tmp_path / "home" / "jars" / "delta"
    assert paths.default_lake() == tmp_path / "lake"


def test_state_root_follows_duet_state_dir_else_duet_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from serving.views.live_dir import default_base

    monkeypatch.delenv("DUET_STATE_DIR", raising=False)
    monkeypatch.delenv("DUET_SERVING_LIVE_DIR", raising=False)
    monkeypatch.setenv("DUET_HOME", str(tmp_path / "home"))
    assert paths.state_root() == tmp_path / "home" / "state"
    monkeypatch.setenv("DUET_STATE_DIR", str(tmp_path / "mine"))
    assert paths.state_root() == tmp_path / "mine"
    assert default_base() == tmp_path / "mine" / "serving-live"  # serving's live stores follow it
    # (the live stores' own tests: tests/test_serving/test_serving_live_store.py)


def test_missing_jars_say_make_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    broker = EmbeddedKafka(tmp_path / "work")
    with pytest.raises(KafkaJarsMissingError, match="make setup"):
        broker.start()
    assert broker.pid is None


def test_kafka_cluster_uses_external_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    with kafka_cluster() as bootstrap:
        assert bootstrap == "127.0.0.1:1"


def test_start_failure_reports_log_tail(tmp_path: Path) -> None:
    broker = EmbeddedKafka(tmp_path, extra_properties={"listeners": "NOT A LISTENER"})
    with pytest.raises(BrokerStartError) as info:
        broker.start(timeout_s=60)
    assert "listeners" in str(info.value)
    assert not broker.is_running()


def test_session_broker_answers(kafka_bootstrap: str, unique_name: str) -> None:
    md = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert md.brokers
    topic = f"{unique_name}-roundtrip"
    ensure_topics(kafka_bootstrap, [TopicSpec(topic, 2, {"retention.ms": "-1"})])
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    # A 2013 timestamp must be kept (log.retention.ms=-1, topic retention -1).
    for i in range(10):
        producer.produce(topic, key=f"k{i}", value=f"v{i}", timestamp=1356998400000 + i)
    assert producer.flush(30) == 0
    msgs = read_topic(kafka_bootstrap, topic)
    assert sorted(m.value().decode() for m in msgs) == sorted(f"v{i}" for i in range(10))
    assert {m.timestamp()[1] for m in msgs} == {1356998400000 + i for i in range(10)}
    delete_topics(kafka_bootstrap, [topic])


@pytest.mark.skipif(
    bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")), reason="uses an external cluster"
)
def test_embedded_broker_lifecycle(tmp_path: Path) -> None:
    """A broker of its own (small heap): started, answering, stopped by SIGTERM."""
    broker = EmbeddedKafka(tmp_path, heap="256m")
    with broker:
        bootstrap = broker.bootstrap_servers
        assert bootstrap.startswith("127.0.0.1:")
        pid = broker.pid
        assert pid is not None and broker.is_running()
        props = (tmp_path / "server.properties").read_text()
        assert "log.retention.ms=-1" in props
        assert "auto.create.topics.enable=false" in props
        assert AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
        assert broker.start() == bootstrap  # already started: same broker
    assert not broker.is_running()
    assert broker.last_exit_code != -9, "the broker ignored SIGTERM"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(RuntimeError):
        _ = broker.bootstrap_servers
    assert (tmp_path / "broker.log").exists()  # a given work dir is kept
    broker.stop()  # idempotent


def test_temporary_work_dir_removed_on_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = EmbeddedKafka(extra_properties={"listeners": "NOT A LISTENER"})
    with pytest.raises(BrokerStartError):
        broker.start()
    assert broker.work_dir is None
