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
