"""Speed source: decoding view keys, and reading view output topics from a real broker."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from serving.errors import SpeedSourceError
from serving.views import ViewSpec, decode_view_key, merge_view, read_view_topic
from serving_testkit import HOUR, T0


def test_decode_view_key() -> None:
    raw = json.dumps({"key": "EWR", "window_start": T0, "window_end": T0 + HOUR}).encode()
    assert decode_view_key(raw, windowed=True) == ("EWR", T0, T0 + HOUR)
    assert decode_view_key(b"N14228", windowed=False) == ("N14228", None, None)
    assert decode_view_key('{"key": 7, "window_start": 0, "window_end": 1}', True) == ("7", 0, 1)
    with pytest.raises(SpeedSourceError, match="bad windowed view key"):
        decode_view_key(b"EWR", windowed=True)
    with pytest.raises(SpeedSourceError):
        decode_view_key(None, windowed=False)


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                        config={"retention.ms": "-1"})])[topic]
    fut.result(timeout=30)


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None, int]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         "enable.idempotence": True, "linger.ms": 5})
    for key, value, ts in records:
        producer.produce(topic, key=key, value=value, timestamp=ts)
    assert producer.flush(30) == 0


def _wkey(key: str, start: int, end: int) -> bytes:
    return json.dumps({"key": key, "window_start": start, "window_end": end}).encode()


@pytest.mark.broker
def test_read_windowed_view_topic(kafka_bootstrap: str, unique_name: str) -> None:
    topic = f"{unique_name}-counts"
    _create_topic(kafka_bootstrap, topic, partitions=3)
    keys = [f"K{i}" for i in range(12)]
    records: list[tuple[bytes, bytes | None, int]] = []
    for i, k in enumerate(keys):  # two updates per window: the last one wins
        records.append((_wkey(k, T0, T0 + HOUR), json.dumps({"count": 1}).encode(), T0 + i))
        records.append((_wkey(k, T0, T0 + HOUR), json.dumps({"count": 2}).encode(), T0 + 100 + i))
        records.append((_wkey(k, T0 + HOUR, T0 + 2 * HOUR), json.dumps({"count": i}).encode(), T0 + HOUR + i))
    # a tombstone removes a window (e.g. a session replaced by a merge)
    records.append((_wkey("K0", T0 + HOUR, T0 + 2 * HOUR), None, T0 + HOUR + 500))
    _produce(kafka_bootstrap, topic, records)

    df = read_view_topic(kafka_bootstrap, topic, windowed=True, timeout_s=60)
    assert list(df.columns) == ["key", "window_start", "window_end", "value", "timestamp"]
    assert len(df) == 2 * len(keys) - 1
    first = df[df["window_start"] == T0]
    assert first["value"].map(json.loads).tolist() == [{"count": 2}] * len(keys)
    assert sorted(first["timestamp"].tolist()) == [T0 + 100 + i for i in range(12)]
    assert not ((df["key"] == "K0") & (df["window_start"] == T0 + HOUR)).any()
    assert df.iloc[0]["key"] == "K0" and df["key"].is_monotonic_increasing

    # the frame feeds merge_view directly
    merged = merge_view(ViewSpec.tumbling(topic, HOUR), None, df, None)
    assert (merged["source"] == "speed").all() and len(merged) == len(df)


@pytest.mark.broker
def test_read_table_view_topic_and_errors(kafka_bootstrap: str, unique_name: str) -> None:
    topic = f"{unique_name}-latest"
    _create_topic(kafka_bootstrap, topic, partitions=2)
    _produce(kafka_bootstrap, topic, [
        (b"UA", b'{"name": "United"}', T0),
        (b"AA", b'{"name": "American"}', T0 + 1),
        (b"UA", b'{"name": "United Air Lines"}', T0 + 2),
        (b"DL", b'{"name": "Delta"}', T0 + 3),
        (b"DL", None, T0 + 4),
    ])
    df = read_view_topic(kafka_bootstrap, topic, windowed=False, timeout_s=60)
    assert df["key"].tolist() == ["AA", "UA"]
    assert df["value"].map(json.loads).tolist() == [{"name": "American"}, {"name": "United Air Lines"}]
    assert df["timestamp"].tolist() == [T0 + 1, T0 + 2] and df["window_start"].isna().all()

    empty = f"{unique_name}-empty"
    _create_topic(kafka_bootstrap, empty, partitions=2)
    assert read_view_topic(kafka_bootstrap, empty, windowed=True, timeout_s=30).empty

    with pytest.raises(SpeedSourceError, match="not available"):
        read_view_topic(kafka_bootstrap, f"{unique_name}-missing", windowed=False, timeout_s=10)


@pytest.mark.broker
def test_read_transactional_view_topic(kafka_bootstrap: str, unique_name: str) -> None:
    """EOS output: commit markers occupy the last offsets; aborted records are not read."""
    from confluent_kafka import Producer

    topic = f"{unique_name}-eos"
    _create_topic(kafka_bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random",
                         "transactional.id": f"{unique_name}-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=_wkey("a", T0, T0 + HOUR), value=b"1", timestamp=T0)
    producer.produce(topic, key=_wkey("b", T0, T0 + HOUR), value=b"1", timestamp=T0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=_wkey("a", T0, T0 + HOUR), value=b"99", timestamp=T0 + 1)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=_wkey("b", T0, T0 + HOUR), value=b"2", timestamp=T0 + 2)
    producer.commit_transaction(30)

    df = read_view_topic(kafka_bootstrap, topic, windowed=True, timeout_s=60)
    assert list(zip(df["key"], df["value"], df["timestamp"])) == [("a", "1", T0), ("b", "2", T0 + 2)]


def _contract_records(spec: ViewSpec, rng: random.Random, days: int) -> list[tuple[bytes, bytes | None, int]]:
    """View-topic records as the speed layer writes them, in stream-time order with up to 6 h
    of disorder (late records, cache flushes): a time window's updates stamped in
    ``[start, end + grace)``, a session's puts and tombstones stamped with its end, a table's
    updates anywhere; about one in eight a tombstone."""
    out: list[tuple[bytes, bytes | None, int]] = []
    for i in range(600):
        key = f"K{rng.randrange(8 if spec.windowed else 400)}"  # a table: keys that stop changing
        value = None if rng.random() < 0.125 else json.dumps({"n": i}).encode()
        t = T0 + rng.randrange(days * 24 * HOUR)
        if spec.window_kind == "session":
            start = t - rng.randrange(3 * HOUR)
            out.append((_wkey(key, start, t), value, t))
        elif spec.windowed:
            assert spec.size_ms is not None
            start = t - t % spec.size_ms
            out.append((_wkey(key, start, start + spec.size_ms),
                        value, start + rng.randrange(spec.size_ms + spec.grace_ms)))
        else:
            out.append((key.encode(), value, t))
    jitter = {id(r): rng.randrange(6 * HOUR) for r in out}
    return sorted(out, key=lambda r: r[2] + jitter[id(r)])


@pytest.mark.broker
@pytest.mark.parametrize("spec", [ViewSpec.tumbling("tumbling", HOUR, grace_ms=10 * 60_000),
                                  ViewSpec.hopping("hopping", 24 * HOUR, HOUR),
                                  ViewSpec.session("sessions", 30 * 60_000, grace_ms=5 * 60_000),
                                  ViewSpec.table("table")], ids=lambda s: s.name)
def test_a_read_from_the_merge_start_merges_as_the_full_read(kafka_bootstrap: str, unique_name: str,
                                                             spec: ViewSpec) -> None:
    """A publish reads a view topic from ``speed_read_start(spec, W)`` (the fresh edge, not the
    history): merged at ``W`` with the same batch view, it gives the full read's answer."""
    from serving.views.merge import SPEED_READ_MARGIN_MS, speed_read_start

    days = 12
    topic = f"{unique_name}-view"
    _create_topic(kafka_bootstrap, topic, partitions=3)
    _produce(kafka_bootstrap, topic, _contract_records(spec, random.Random(spec.name), days))
    full = read_view_topic(kafka_bootstrap, topic, windowed=spec.windowed, timeout_s=60)
    batch = full.assign(value='{"batch": true}')  # every identity, so that batch and speed both matter
    assert speed_read_start(spec, None) is None
    for day in (0, 3, 6, 9, days + 1):
        w = T0 + day * 24 * HOUR + 7 * HOUR
        start = speed_read_start(spec, w)
        assert start is not None and start <= w - SPEED_READ_MARGIN_MS
        edge = read_view_topic(kafka_bootstrap, topic, windowed=spec.windowed, timeout_s=60, from_timestamp_ms=start)
        assert merge_view(spec, batch, edge, w).equals(merge_view(spec, batch, full, w)), (spec.name, day)
        if day == 9:  # most of the history is not read
            assert len(edge) < 0.75 * len(full), (day, len(edge), len(full))
    # past every record: nothing to read, every partition skipped
    assert read_view_topic(kafka_bootstrap, topic, windowed=spec.windowed, timeout_s=60,
                           from_timestamp_ms=T0 + (days + 2) * 24 * HOUR).empty
