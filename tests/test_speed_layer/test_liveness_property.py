"""Liveness as a property, through the real broker: random mixes of records catch up
(issue 25, "Liveness").

The stall of issue 25: 10,000 flights in departure order, plus 10 valid flights padded to
~900 KB each, or plus 500 valid flights with a null key, inserted at random positions,
left the application RUNNING but never caught up (``wait_until_caught_up`` false after
minutes; the downstream sub-topologies' repartition offsets far behind). Two tasks of one
repartition topic waited for each other, ``UNKNOWN_LAG_WAIT_S`` per run of records
(fixed in ``speed_layer/runtime/readiness.py``; the fixed cases are
``test_readiness_no_stall.py`` and ``test_runtime_no_stall.py``). Here hypothesis draws
the mix instead: records in order, out of order by less than the grace period or by more,
with a null key (spread round-robin over the input partitions), with a null grouping key,
padded to a few hundred KB up to ~900 KB, and the buffer sizes that make the thread pause
and resume its partitions. Each example runs one ``KafkaStreams`` on fresh topics and
checks that

* it catches up (``wait_until_caught_up``) within ``BOUND_S`` and stays RUNNING, with its
  stream thread alive and no error;
* the results are those of a plain reading of the input, where that is cheap:

  - (a) re-key -> repartition -> tumbling count with grace, and a plain count on the same
    repartition topic (two sub-topologies): the count per key is exactly the records with
    that non-null grouping key (null grouping keys are dropped by the repartition, as
    Kafka's repartition filter does, without counting them in ``dropped-records``); every
    window not touched by a late drop has its exact count, the counts of the others plus
    ``dropped-records-late-total`` make up the rest, and only records more than the grace
    period older than a record produced before them are dropped as late (one thread keeps
    its tasks at one event time across the repartition round trip);
  - (b) re-key -> repartition -> left join with a co-partitioned KTable -> re-key ->
    repartition -> count (three sub-topologies): the count per joined region is exact;
    records with a null join key pass the first repartition and are joined with None
    (KIP-962), as records whose key is not in the table.

The flights topology (``pipelines/examples/flights``) is not among them: it reads fixed
topic names (``flights``, ``planes``, ...), which other tests on the session broker use too.
The input is produced idempotently, so each partition's log is in the order of production.

The late-drop check found a wrong result: with ``buffered.records.per.partition`` below a
loop's 1,000 records, a task buffer that ran dry within a loop while the thread held its
partition's next records (or had paused the partition) let the thread's other tasks run
past them, and up to half of a backlog in timestamp order was dropped as late downstream
(fixed in ``input_buffers.py`` / ``task_executor.py``; ``test_held_records_order.py``).

A failure names the mix (the seed and the counts it was generated from; hypothesis prints
it too), the lag of every input and repartition partition (committed offset against end
offset), the client's metrics and its state, so a stall can be told from a wrong result.
The examples are derandomized (the same on every run, as CI needs) and not shrunk (every
attempt runs a KafkaStreams); ``DUET_LIVENESS_EXAMPLES`` sets the number of generated
examples per topology (default 6, besides the three explicit issue-25 shapes); 1-3 s each
on an idle machine.
"""
from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from itertools import count
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis import strategies as st

from speed_layer import Consumed, Grouped, KafkaStreams, Materialized, Serdes, StreamsBuilder, TimeWindows, Topology
from speed_layer.runtime import input_buffers

pytestmark = pytest.mark.broker

MINUTE = 60_000
HOUR = 60 * MINUTE
T0 = 1_700_000_000_000
GRACE = 10 * MINUTE
WINDOWS = TimeWindows.of_size_and_grace(timedelta(hours=1), timedelta(milliseconds=GRACE))
#: an example catches up in 1-3 s; the stall took minutes (two tasks waiting for each other,
#: UNKNOWN_LAG_WAIT_S = 5 s per run of records)
BOUND_S = 30.0
PARTITIONS = 4
EXAMPLES = int(os.environ.get("DUET_LIVENESS_EXAMPLES", "6"))
#: the grouping keys (few, so the repartition partitions fill unevenly) and the table's regions
GROUPS = [f"g{i}" for i in range(7)]
#: g6 has no row in the table: joined with None like a null key
REGIONS = {g: f"r{i % 3}" for i, g in enumerate(GROUPS[:-1])}
NO_REGION = "none"

_examples = count()


@dataclass(frozen=True)
class Mix:
    """What one example's input is generated from (:func:`records`): ``ordinary`` records
    in timestamp order, and inserted at random positions ``late_within`` records out of
    order by less than the grace period, ``late_beyond`` by more (up to 6 h),
    ``null_key`` records with a null record key, ``null_group`` records with a null
    grouping key, ``oversized`` records padded to ``pad_bytes``. ``buffered`` is
    ``buffered.records.per.partition``; ``tight_held_bytes`` holds back at most 64 bytes per
    partition before pausing it (default: ``HELD_BYTES_PER_PARTITION``)."""

    seed: int
    ordinary: int
    late_within: int
    late_beyond: int
    null_key: int
    null_group: int
    oversized: int
    pad_bytes: int
    buffered: int
    tight_held_bytes: bool


@dataclass(frozen=True)
class Rec:
    """One input record and what the checks need to know about it."""

    key: str | None
    group: str | None
    ts: int
    pad: int
    #: how much older than the newest record produced before it, ms (0: in order)
    lateness: int

    def value(self) -> dict[str, Any]:
        v: dict[str, Any] = {"g": self.group}
        if self.pad:
            v["pad"] = "x" * self.pad
        return v


mixes = st.builds(
    Mix,
    seed=st.integers(0, 2**32 - 1),
    ordinary=st.integers(200, 1_500),
    late_within=st.integers(0, 60),
    late_beyond=st.integers(0, 40),
    null_key=st.integers(0, 150),
    null_group=st.integers(0, 40),
    oversized=st.integers(0, 4),
    pad_bytes=st.integers(200_000, 900_000),
    buffered=st.sampled_from([3, 10, 50, 1_000]),
    tight_held_bytes=st.booleans(),
)

#: issue 25's shapes, scaled down: ~900 KB values in a backlog in order; null keys among
#: late records; and many late records (one in six), where the stall was likeliest
ISSUE_PADDED = Mix(seed=25, ordinary=1_500, late_within=0, late_beyond=0, null_key=0, null_group=0, oversized=4,
                   pad_bytes=900_000, buffered=1_000, tight_held_bytes=False)
ISSUE_NULL_KEYS = Mix(seed=26, ordinary=1_500, late_within=60, late_beyond=60, null_key=150, null_group=10, oversized=0,
                      pad_bytes=0, buffered=10, tight_held_bytes=True)
ISSUE_LATE = Mix(seed=27, ordinary=1_500, late_within=100, late_beyond=150, null_key=150, null_group=10, oversized=2,
                 pad_bytes=600_000, buffered=50, tight_held_bytes=True)


def records(mix: Mix) -> list[Rec]:
    """The input of ``mix`` in production order (deterministic in ``mix``)."""
    rng = random.Random(mix.seed)
    weights = [2 ** (len(GROUPS) - i) for i in range(len(GROUPS))]  # skewed: g0 the most frequent
    base = [(T0 + i * 30_000 + rng.randrange(30_000)) for i in range(mix.ordinary)]
    base.sort()
    out: list[tuple[str | None, str | None, int, int]] = [
        (f"s{rng.randrange(40)}", rng.choices(GROUPS, weights)[0], ts, 0) for ts in base]

    def insert(make: Callable[[int], tuple[str | None, str | None, int, int]]) -> None:
        pos = rng.randrange(1, len(out) + 1)
        newest = max(r[2] for r in out[max(0, pos - 50):pos])  # about the newest before pos (exact lateness below)
        out.insert(pos, make(newest))

    def ordinary(key: str | None = "", group: str | None = "", pad: int = 0, ts_back: int = 0) -> Callable[[int], Any]:
        return lambda newest: (f"s{rng.randrange(40)}" if key == "" else key,
                               rng.choices(GROUPS, weights)[0] if group == "" else group, newest - ts_back, pad)

    for _ in range(mix.late_within):
        insert(ordinary(ts_back=rng.randrange(MINUTE, GRACE - MINUTE)))
    for _ in range(mix.late_beyond):
        insert(ordinary(ts_back=rng.randrange(GRACE + MINUTE, 6 * HOUR)))
    for _ in range(mix.null_key):
        insert(ordinary(key=None))
    for _ in range(mix.null_group):
        insert(ordinary(group=None))
    for _ in range(mix.oversized):
        insert(ordinary(key=rng.choice([None, "s0", "s1"]), pad=mix.pad_bytes))
    recs, newest = [], T0 - 1
    for key, group, ts, pad in out:
        recs.append(Rec(key, group, ts, pad, max(0, newest - ts)))
        newest = max(newest, ts)
    return recs


def describe(mix: Mix, recs: list[Rec]) -> str:
    late = [r.lateness for r in recs if r.lateness]
    return (f"{mix}\n{len(recs)} records, {sum(1 for r in recs if r.key is None)} with a null key, "
            f"{sum(1 for r in recs if r.group is None)} with a null grouping key, {sum(1 for r in recs if r.pad)} padded; "
            f"{len(late)} out of order (max {max(late, default=0) / MINUTE:.1f} min, "
            f"{sum(1 for x in late if x > GRACE)} beyond the grace of {GRACE / MINUTE:.0f} min)")


# ---------------------------------------------------------------------------- topologies
def windowed_counts(events: str) -> Topology:
    """(a): re-keyed by the grouping key, one repartition topic, a tumbling count with grace
    and a plain count."""
    b = StreamsBuilder()
    grouped = (b.stream(events, Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON()))
               .group_by(lambda k, v: v["g"], Grouped.as_("by-group")))
    grouped.windowed_by(WINDOWS).count(Materialized.as_("windowed").with_retention(timedelta(days=30)))
    grouped.count(Materialized.as_("totals"))
    return b.build()


def joined_regions(events: str, regions: str) -> Topology:
    """(b): re-keyed by the grouping key, left join with the regions table (co-partitioned
    through the repartition topic), re-keyed by region, counted (three sub-topologies; the
    padding travels through both repartition topics)."""
    b = StreamsBuilder()
    text, js = Serdes.String(), Serdes.JSON()
    table = b.table(regions, Consumed(key_serde=text, value_serde=js), Materialized.as_("regions-store"))
    (b.stream(events, Consumed(key_serde=text, value_serde=js))
     .select_key(lambda k, v: v["g"])
     .left_join(table, lambda v, row: {**v, "region": NO_REGION if row is None else row["region"]})
     .group_by(lambda k, v: v["region"], Grouped.as_("by-region"))
     .count(Materialized.as_("per-region")))
    return b.build()


# ---------------------------------------------------------------------------- running
def produce(bootstrap: str, topic: str, records: list[tuple[Any, Any, int]]) -> None:
    """Produce ``(key, value as JSON, timestamp ms)`` in this order (Java's murmur2
    partitioner, null keys spread at random) and wait for the acks. Idempotent, so each
    partition's log keeps the order of production, which the lateness of a record is
    measured in: a plain producer's retry of a first batch refused by a topic's new leader
    put it behind the next one (a ~900 KB record sent alone)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5, "enable.idempotence": True})
    for k, v, ts in records:
        p.produce(topic, key=None if k is None else str(k).encode(), value=json.dumps(v).encode(), timestamp=ts)
    assert p.flush(60) == 0


def lag_report(streams: KafkaStreams, bootstrap: str) -> str:
    """Per input and repartition partition: the group's committed offset, the end offset
    and the lag (what a stall leaves behind)."""
    from confluent_kafka import Consumer, TopicPartition

    plan = streams.plan
    if plan is None:
        return "no plan (not started)"
    topics = plan.user_source_topics() + sorted(plan.repartition)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": plan.application_id, "enable.auto.commit": False})
    lines = []
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(plan.partitions.get(t) or plan.repartition[t])]
        for tp in probe.committed(tps, timeout=10):
            end = probe.get_watermark_offsets(tp, timeout=10)[1]
            done = max(tp.offset, 0)
            lines.append(f"  {tp.topic}-{tp.partition}: committed {tp.offset}, end {end}, lag {end - done}")
    except Exception as exc:  # noqa: BLE001 - a report, not a check
        lines.append(f"  (lag not available: {exc!r})")
    finally:
        probe.close()
    return "\n".join(lines)


def run_example(kit: Any, mix: Mix, topology_of: Callable[[dict[str, str]], Topology], tables: dict[str, list[tuple[Any, Any, int]]],
                check: Callable[[KafkaStreams, list[Rec], Callable[[], str]], None]) -> None:
    """Produce the mix into fresh topics (``tables``: ``{name: [(key, value, ts)]}`` besides
    the events), run one KafkaStreams, check liveness, then ``check(streams, records,
    report)``; the client is closed in any case."""
    n = next(_examples)
    recs = records(mix)
    mixed = describe(mix, recs)
    note(mixed)
    t = kit.topics(**{f"x{n}_events": PARTITIONS, **{f"x{n}_{name}": PARTITIONS for name in tables}})
    names = {"events": t[f"x{n}-events"], **{name: t[f"x{n}-{name}"] for name in tables}}
    for name, rows in tables.items():
        produce(kit.bootstrap, names[name], rows)
    produce(kit.bootstrap, names["events"], [(r.key, r.value(), r.ts) for r in recs])
    with pytest.MonkeyPatch.context() as mp:
        if mix.tight_held_bytes:
            mp.setattr(input_buffers, "HELD_BYTES_PER_PARTITION", 64)
            mp.setattr(input_buffers, "HELD_BYTES_PER_THREAD", 0)
        streams = kit.streams(topology_of(names), kit.config(f"x{n}-app", state=f"state-{n}",
                                                             **{"buffered.records.per.partition": mix.buffered}))
        try:
            t0 = time.monotonic()
            streams.start()
            caught_up = streams.wait_until_caught_up(BOUND_S)
            took = time.monotonic() - t0
            note(f"caught up: {caught_up} after {took:.1f} s")

            def report() -> str:
                return (f"{mixed}\nstate {streams.state}, errors {streams.errors}, {took:.1f} s\n"
                        f"lag per partition:\n{lag_report(streams, kit.bootstrap)}\nmetrics {streams.metrics()}")

            assert caught_up and took < BOUND_S, f"not caught up within {BOUND_S:.0f} s\n{report()}"
            assert streams.state == "RUNNING" and not streams.errors, report()
            assert streams.metrics()["alive-stream-threads"] == 1, report()
            check(streams, recs, report)
            assert streams.state == "RUNNING", report()
        finally:
            streams.close(30)


# ---------------------------------------------------------------------------- the checks
def check_windowed_counts(streams: KafkaStreams, recs: list[Rec], report: Callable[[], str]) -> None:
    counted = [r for r in recs if r.group is not None]
    totals = dict(streams.store("totals").all())
    assert totals == dict(Counter(r.group for r in counted)), f"counts per key\n{report()}"

    m = streams.metrics()
    # null grouping keys are dropped by the repartition filter, silently as in Kafka: the
    # only drops are the windowed count's late records
    assert m["dropped-records-total"] == m["dropped-records-late-total"], report()
    expected = Counter((r.group, r.ts - r.ts % HOUR) for r in counted)
    windows = {(w.key, w.window.start): c for w, c in streams.store("windowed").all()}
    assert set(windows) <= set(expected), f"windows of no record: {sorted(set(windows) - set(expected))[:5]}\n{report()}"
    touched = streams.late_windows().get("windowed", set())
    wrong = {}
    for w, n in expected.items():
        got = windows.get(w, 0)
        if (got >= n) if w in touched else (got != n):  # a late drop leaves its window short
            wrong[w] = (got, n)
    assert not wrong, f"(count, expected) per (key, window start): {dict(list(wrong.items())[:10])}\n{report()}"
    assert sum(windows.values()) + m["dropped-records-late-total"] == len(counted), report()
    # dropped as late: only records more than the grace period behind a record produced
    # before them (the downstream task's event time never runs ahead of the input's)
    beyond = {(r.group, r.ts) for r in counted if r.lateness > GRACE}
    dropped = {(key, ts) for store, key, ts in streams.late_records() if store == "windowed"}
    within = [(k, ts, [r.lateness for r in counted if (r.group, r.ts) == (k, ts)]) for k, ts in sorted(dropped - beyond)]
    assert not within, f"{len(within)} dropped within grace (key, ts, lateness ms): {within[:10]}\n{report()}"


def check_joined_regions(streams: KafkaStreams, recs: list[Rec], report: Callable[[], str]) -> None:
    expected = Counter(NO_REGION if r.group is None else REGIONS.get(r.group, NO_REGION) for r in recs)
    assert dict(streams.store("per-region").all()) == dict(expected), f"counts per region\n{report()}"
    assert streams.metrics()["dropped-records-total"] == 0, report()


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, print_blob=True,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@SETTINGS
@given(mix=mixes)
@example(mix=ISSUE_PADDED)
@example(mix=ISSUE_NULL_KEYS)
@example(mix=ISSUE_LATE)
def test_a_repartitioned_windowed_count_catches_up_with_any_mix(runtime_kit: Any, mix: Mix) -> None:
    """(a): two sub-topologies through one repartition topic, a windowed count with grace."""
    run_example(runtime_kit, mix, lambda t: windowed_counts(t["events"]), {}, check_windowed_counts)


@SETTINGS
@given(mix=mixes)
@example(mix=ISSUE_PADDED)
@example(mix=ISSUE_NULL_KEYS)
@example(mix=ISSUE_LATE)
def test_a_left_join_after_a_repartition_catches_up_with_any_mix(runtime_kit: Any, mix: Mix) -> None:
    """(b): a stream-table left join after a repartition, then a second repartition. The
    table rows are older than every event, so the join sees them all (event-time order)."""
    rows = [(g, {"region": r}, T0 - 30 * 24 * HOUR) for g, r in REGIONS.items()]
    run_example(runtime_kit, mix, lambda t: joined_regions(t["events"], t["regions"]), {"regions": rows},
                check_joined_regions)
