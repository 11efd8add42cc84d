"""Topic helpers against the session broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from speed_layer.admin import (
    TopicError,
    TopicMismatchError,
    TopicSpec,
    delete_topics,
    end_offsets,
    ensure_topics,
    topic_partitions,
)

pytestmark = pytest.mark.broker


def test_ensure_topics_is_idempotent(kafka_bootstrap: str, unique_name: str) -> None:
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    specs = [TopicSpec(a, 3, {"retention.ms": "-1"}), TopicSpec(b, 1, {"cleanup.policy": "compact"})]
    ensure_topics(kafka_bootstrap, specs)
    ensure_topics(kafka_bootstrap, specs)  # again: nothing to do
    assert topic_partitions(kafka_bootstrap, a) == 3
    assert topic_partitions(kafka_bootstrap, b) == 1

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, a)
    configs = admin.describe_configs([res])[res].result(timeout=10)
    assert configs["retention.ms"].value == "-1"
    res_b = ConfigResource(ConfigResource.Type.TOPIC, b)
    assert admin.describe_configs([res_b])[res_b].result(timeout=10)["cleanup.policy"].value == "compact"

    with pytest.raises(TopicMismatchError, match="3 partitions, expected 4"):
        ensure_topics(kafka_bootstrap, [TopicSpec(a, 4)])

    delete_topics(kafka_bootstrap, [a, b, f"{unique_name}-never-existed"])
    assert topic_partitions(kafka_bootstrap, a) is None
    assert topic_partitions(kafka_bootstrap, b) is None


def test_end_offsets(kafka_bootstrap: str, unique_name: str) -> None:
    topic = f"{unique_name}-t"
    ensure_topics(kafka_bootstrap, [TopicSpec(topic, 2)])
    assert end_offsets(kafka_bootstrap, topic) == {0: 0, 1: 0}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    assert end_offsets(kafka_bootstrap, topic) == {0: 3, 1: 2}
    assert end_offsets(kafka_bootstrap, topic, committed_only=True) == {0: 3, 1: 2}
    with pytest.raises(TopicError):
        end_offsets(kafka_bootstrap, f"{unique_name}-missing")
    delete_topics(kafka_bootstrap, [topic])


_SILENT_CLIENT = """
import sys
import time
from confluent_kafka.admin import AdminClient
from speed_layer.runtime.admin import admin_client
client = AdminClient({"bootstrap.servers": "127.0.0.1:1"}) if sys.argv[1] == "plain" else admin_client("127.0.0.1:1")
time.sleep(1.5)  # librdkafka logs the refused connections meanwhile
del client
"""


@pytest.mark.parametrize("client", ["plain", "duet"])
def test_admin_clients_never_print_librdkafka_lines_to_stderr(client: str) -> None:
    """A command's error is one line on stderr: librdkafka's own messages of the admin
    helpers' clients go to the ``speed_layer.kafka`` logger, never straight to stderr, as a
    plain ``AdminClient``'s do (the control case, which shows the check can fail)."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", _SILENT_CLIENT, client], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    printed = [ln for ln in res.stderr.splitlines() if ln.startswith("%")]
    if client == "plain":
        assert printed, "a plain AdminClient printed nothing: the check cannot tell"
    else:
        assert printed == []


_PRODUCT_CLIENTS = """
import tempfile
import time
from confluent_kafka import KafkaException
from batch_layer.ingest.kafka_to_delta import ingest_topic
from pipelines.dagster.new_data import read_kafka_range
from pipelines.produce.load import source_producer
from serving.errors import SpeedSourceError
from speed_layer.runtime.internal_topics import reset_application

DEAD = "127.0.0.1:1"
calls = {
    "ingest_topic": lambda: ingest_topic(None, DEAD, "t", tempfile.mkdtemp(), idle_timeout_s=1.0),
    "read_kafka_range": lambda: list(read_kafka_range(DEAD, "t", {0: (0, 1)}, idle_timeout_s=1.0)),
    "reset_application": lambda: reset_application(DEAD, "app", ["t"], timeout_s=1.0),
}
for name, call in calls.items():
    try:
        call()
    except Exception as exc:  # each fails: no broker; only what it prints matters here
        print(name, type(exc).__name__)
with source_producer(DEAD) as producer:
    producer.produce("t", b"x")
    producer.poll(1.5)
    producer.purge()
from serving.views.speed import read_view_topic
try:
    read_view_topic(DEAD, "t", windowed=False, timeout_s=1.0)
except SpeedSourceError as exc:
    print("read_view_topic", type(exc).__name__)
"""


def test_product_clients_never_print_librdkafka_lines_to_stderr() -> None:
    """The clients duet builds outside the streams runtime (the archive's, the Dagster
    sensor's, the source producer, the application reset's, the serving layer's view
    reader) log through ``speed_layer.kafka`` (:func:`speed_layer.admin.client_config`): on
    an unreachable cluster each fails with its own error and prints no librdkafka line."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", _PRODUCT_CLIENTS], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("%")] == []
    assert len(res.stdout.splitlines()) == 4, res.stdout


def test_readers_do_not_hold_their_fetches_back() -> None:
    """The consumers that read topics to their end (the view reader, the ingest, the
    new-data sensor) use ``reader_config``: librdkafka's 1 s ``fetch.queue.backoff.ms``
    becomes 10 ms (``bench/bench_view_read.py``: a 2,000,000-record view topic read 2.7x
    faster); a caller's own value wins, and librdkafka accepts the property."""
    from confluent_kafka import Consumer

    from speed_layer.admin import reader_config
    from speed_layer.runtime.admin import FETCH_QUEUE_BACKOFF_MS

    conf = reader_config("127.0.0.1:1", {"group.id": "reader"})
    assert conf["fetch.queue.backoff.ms"] == FETCH_QUEUE_BACKOFF_MS == 10
    assert conf["bootstrap.servers"] == "127.0.0.1:1" and conf["group.id"] == "reader"
    assert reader_config("127.0.0.1:1", {"fetch.queue.backoff.ms": 500})["fetch.queue.backoff.ms"] == 500
    Consumer(conf).close()
