"""Kafka -> Delta ingestion against a real broker; the table is checked with Spark and delta-rs."""

from __future__ import annotations

from pathlib import Path

import pytest

from batch_layer.delta import read_arrow, read_table, table_exists, table_version
from batch_layer.errors import BatchLayerError
from batch_layer.ingest import IngestResult, ingest_topic, ingest_topics, raw_table_path

pytestmark = [pytest.mark.broker, pytest.mark.spark]

T0 = 1356998400000  # 2013-01-01T00:00Z in ms


def _records(n: int, start: int = 0) -> list[tuple]:
    """``n`` records over partitions 0..2, with null keys, null values, headers (incl. null values)."""
    out = []
    for i in range(start, start + n):
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = None if i % 11 == 0 else f'{{"i": {i}}}'.encode()
        headers = [("trace", f"t{i}".encode()), ("empty", None)] if i % 5 == 0 else []
        out.append((i % 3, key, value, T0 + i * 1000, headers))
    return out


def _rows(produced) -> list[dict]:
    return sorted(
        (
            {
                "key": p.key, "value": p.value, "timestamp": p.timestamp, "partition": p.partition,
                "offset": p.offset, "headers": [{"key": k, "value": v} for k, v in p.headers],
            }
            for p in produced
        ),
        key=lambda r: (r["partition"], r["offset"]),
    )


def _table_rows(path: Path) -> list[dict]:
    return sorted(read_arrow(path).to_pylist(), key=lambda r: (r["partition"], r["offset"]))


def test_ingest_is_idempotent_and_incremental(spark, kafka_bootstrap, new_topic, produce, tmp_path) -> None:
    topic = new_topic(partitions=3)
    first = produce(topic, _records(60))
    path = raw_table_path(tmp_path, topic)

    r1 = ingest_topic(spark, kafka_bootstrap, topic, tmp_path)
    assert r1 == IngestResult(topic, 60, {0: (0, 19), 1: (0, 19), 2: (0, 19)})
    assert _table_rows(path) == _rows(first)
    v1 = table_version(path)

    r2 = ingest_topic(spark, kafka_bootstrap, topic, tmp_path)
    assert r2 == IngestResult(topic, 0, {})
    assert table_version(path) == v1  # nothing committed

    more = produce(topic, _records(9, start=60))
    r3 = ingest_topic(spark, kafka_bootstrap, topic, tmp_path)
    assert r3 == IngestResult(topic, 9, {0: (20, 22), 1: (20, 22), 2: (20, 22)})
    assert _table_rows(path) == _rows(first + more)

    # Spark's Delta reader sees the same table with the contract's types.
    df = read_table(spark, path)
    assert df.dtypes == [
        ("key", "binary"), ("value", "binary"), ("timestamp", "bigint"), ("partition", "int"),
        ("offset", "bigint"), ("headers", "array<struct<key:string,value:binary>>"),
    ]
    assert df.count() == 69
    assert df.selectExpr("partition", "offset").distinct().count() == 69
    nulls = df.where("key is null").count(), df.where("value is null").count()
    assert nulls == (sum(1 for i in range(69) if i % 7 == 0), sum(1 for i in range(69) if i % 11 == 0))
    h = df.where("partition = 0 and offset = 0").select("headers").first()[0]
    assert [(x["key"], bytes(x["value"]) if x["value"] is not None else None) for x in h] == [
        ("trace", b"t0"), ("empty", None)
    ]
    assert df.where("size(headers) = 0").count() == sum(1 for i in range(69) if i % 5 != 0)


def test_max_records_resumes_contiguously(kafka_bootstrap, new_topic, produce, tmp_path) -> None:
    topic = new_topic(partitions=3)
    produced = produce(topic, _records(90))
    path = raw_table_path(tmp_path, topic)
    total, runs = 0, 0
    while True:
        r = ingest_topic(None, kafka_bootstrap, topic, tmp_path, max_records=25)
        runs += 1
        assert r.records_added <= 25
        total += r.records_added
        if r.records_added == 0:
            break
    assert total == 90 and runs == 5
    assert _table_rows(path) == _rows(produced)


def test_spark_writer_and_empty_topic(spark, kafka_bootstrap, new_topic, produce, tmp_path) -> None:
    empty = new_topic(partitions=2)
    topic = new_topic(partitions=3)
    produced = produce(topic, _records(12))
    res = ingest_topics(spark, kafka_bootstrap, [empty, topic], tmp_path, writer="spark")
    assert [(r.topic, r.records_added) for r in res] == [(empty, 0), (topic, 12)]

    assert table_exists(raw_table_path(tmp_path, empty))  # an empty table, so readers find it
    assert read_table(spark, raw_table_path(tmp_path, empty)).count() == 0
    assert read_arrow(raw_table_path(tmp_path, empty)).num_rows == 0
    assert _table_rows(raw_table_path(tmp_path, topic)) == _rows(produced)
    assert read_table(spark, raw_table_path(tmp_path, topic)).count() == 12

    more = produce(topic, _records(3, start=12))  # delta-rs appends to the table Spark created
    assert ingest_topic(None, kafka_bootstrap, topic, tmp_path).records_added == 3
    assert read_table(spark, raw_table_path(tmp_path, topic)).count() == 15
    assert _table_rows(raw_table_path(tmp_path, topic)) == _rows(produced + more)


def test_transactional_topic_skips_aborted_and_control_records(kafka_bootstrap, new_topic, tmp_path) -> None:
    from confluent_kafka import Producer

    topic = new_topic(partitions=1)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{topic}",
                  "partitioner": "murmur2_random"})
    p.init_transactions(30)
    for committed, n in ((True, 3), (False, 2), (True, 1)):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, key=b"k", value=f"{committed}-{i}".encode(), timestamp=T0)
        if committed:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    # The partition ends with a commit marker: the run must still finish promptly.
    r = ingest_topic(None, kafka_bootstrap, topic, tmp_path, idle_timeout_s=10)
    assert r.records_added == 4
    values = [row["value"] for row in _table_rows(raw_table_path(tmp_path, topic))]
    assert values == [b"True-0", b"True-1", b"True-2", b"True-0"]
    assert ingest_topic(None, kafka_bootstrap, topic, tmp_path).records_added == 0


def test_unknown_topic_is_a_clear_error(kafka_bootstrap, tmp_path) -> None:
    with pytest.raises(BatchLayerError, match="no-such-topic"):
        ingest_topic(None, kafka_bootstrap, "no-such-topic", tmp_path)
