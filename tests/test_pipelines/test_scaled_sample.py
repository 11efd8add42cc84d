"""The sample at scale (``duet load --years N``): the generic copies of any pipeline
(:func:`pipelines.declaration.sample_data.scaled_sample`, ``Pipeline.sample_copy``) and the flights'
copies (:func:`pipelines.examples.flights.data.flight_copy_records`). No broker."""

from __future__ import annotations

import itertools
import time
import tracemalloc
from collections import Counter
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.examples.flights import pipeline as flights
from pipelines.examples.flights import sample_copy
from pipelines.examples.flights.data import (
    FLIGHT_NUMBER_STEP,
    copy_tailnum,
    flight_copy_records,
    flight_count,
    plane_copy_records,
    table_records,
)
from pipelines.examples.shop import pipeline as shop
from pipelines.declaration.pipeline import Pipeline, PipelineError, Sample, SourceRecord
from pipelines.declaration.sample_data import scaled_sample

NY = ZoneInfo("America/New_York")
MIN = 60_000
GRACE_MS = 2 * 3_600_000  # the flights' windows' grace


# --------------------------------------------------------------------------- any pipeline
def test_scaled_sample_cuts_each_copy_and_reads_lazily() -> None:
    read: list[int] = []

    def copy(k: int, limit: int | None) -> Sample:
        def events():  # type: ignore[no-untyped-def]
            for i in range(5):
                read.append(k)
                yield ("t", SourceRecord(f"{k}-{i}", i, k * 100 + i))
        return Sample(tables={"dim": [SourceRecord(f"d{k}", k, 0)]} if k % 2 == 0 else {"other": []},
                      events=events(), count=5)

    sample = scaled_sample(copy, 3, limit=2)
    assert read == []  # every copy asked for, no event read yet
    assert sample.event_count() == 6
    assert {t: [r.key for r in rs] for t, rs in sample.tables.items()} == {"dim": ["d0", "d2"], "other": []}
    assert [r.key for _, r in sample.events] == ["0-0", "0-1", "1-0", "1-1", "2-0", "2-1"]
    assert read == [0, 0, 1, 1, 2, 2]  # the events past each copy's limit were never generated
    assert scaled_sample(copy, 2).event_count() == 10
    unknown = scaled_sample(lambda k, limit: Sample({}, iter(())), 2)
    assert unknown.event_count() is None
    with pytest.raises(ValueError, match="scale must be >= 1"):
        scaled_sample(copy, 0)


def test_a_pipeline_without_sample_copy_fails_in_one_line_naming_it() -> None:
    with pytest.raises(PipelineError) as info:
        shop.sample_data(scale=2)
    text = str(info.value)
    assert "\n" not in text and "pipeline 'shop'" in text and "sample_copy" in text and "--scale" in text
    assert len(shop.sample_data(limit=3, scale=1).events) == 3  # scale 1 is the sample itself


def test_sample_copy_needs_the_sample() -> None:
    with pytest.raises(PipelineError, match="sample_copy: copies of the sample data need the sample itself"):
        Pipeline(**{**_declaration(flights), "sample": None})


def _declaration(p: Pipeline) -> dict[str, object]:
    return {f: getattr(p, f) for f in Pipeline.model_fields}


@pytest.mark.parametrize("command", ["load", "run"])
@pytest.mark.parametrize("option", ["--years", "--scale"])
def test_cli_scale_without_sample_copy_fails_before_any_broker(command: str, option: str, tmp_path: object) -> None:
    """One line naming the pipeline and the option, exit 2, before the (unreachable) broker
    is even tried."""
    res = CliRunner().invoke(app, [command, "--pipeline", "pipelines.examples.shop:pipeline", option, "2",
                                   "--bootstrap", "127.0.0.1:1", "--lake", str(tmp_path)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "pipeline 'shop' declares no sample_copy" in lines[0], res.output
    assert "--scale/--years" in lines[0] and "Kafka" not in res.output


def test_cli_scale_must_be_positive() -> None:
    res = CliRunner().invoke(app, ["load", "--years", "0"])
    assert res.exit_code == 2 and "--years" in res.output


# --------------------------------------------------------------------------- the flights
def test_copy_zero_is_the_sample() -> None:
    plain = flights.sample_data(3000)
    copy0 = sample_copy(0, 3000)
    assert copy0.event_count() == 3000 and copy0.tables == plain.tables
    assert list(copy0.events) == list(plain.events)
    assert sample_copy(0).event_count() == flight_count() == 336_776


def test_every_copy_has_keys_of_its_own() -> None:
    keys, tails, numbers = [], [], []
    for k in range(3):
        recs = list(flight_copy_records(k))  # ~1 s a year
        assert len(recs) == 336_776
        keys.append({r.key for r in recs})
        tails.append({r.value["tailnum"] for r in recs} - {None})
        numbers.append({(r.value["carrier"], r.value["flight"]) for r in recs})
        assert all(r.value["flight"] // FLIGHT_NUMBER_STEP == k for r in recs)
        assert all(r.key == (r.value["tailnum"] or f"{r.value['carrier']}{r.value['flight']}") for r in recs)
    assert len(keys[0]) == len(keys[1]) == len(keys[2]) > 4_000  # as many keys in each copy
    for a, b in itertools.combinations(range(3), 2):
        assert not keys[a] & keys[b] and not tails[a] & tails[b] and not numbers[a] & numbers[b]
    assert tails[2] == {copy_tailnum(t, 2) for t in tails[0]} and "N14228-2" in tails[2]


def test_copies_are_shifted_by_whole_years_in_local_time() -> None:
    """Copy 3 is 2016 (a leap year): the same local dates and clock times, the UTC time
    through New York's DST dates of 2016, no flight on 29 February."""
    def local(r: SourceRecord) -> tuple[object, ...]:
        v = r.value
        return (v["month"], v["day"], v["hour"], v["minute"], v["dep_time"], v["sched_dep_time"], v["arr_time"],
                v["carrier"], v["flight"] % FLIGHT_NUMBER_STEP, v["origin"], v["dest"], v["dep_delay"],
                v["arr_delay"], v["air_time"], v["distance"])

    base = list(flight_copy_records(0))
    copy = list(flight_copy_records(3))
    assert Counter(map(local, base)) == Counter(map(local, copy))
    assert {r.value["year"] for r in copy} == {2016}
    assert not any((r.value["month"], r.value["day"]) == (2, 29) for r in copy)
    for r in copy[::89]:  # both sides of both DST changes of 2016 (13 March, 6 November)
        v = r.value
        at = datetime(v["year"], v["month"], v["day"], v["hour"], v["minute"], tzinfo=NY)
        assert r.timestamp == int(at.timestamp() * 1000), v
        hour = datetime.fromisoformat(v["time_hour"].replace("Z", "+00:00"))
        assert r.timestamp == int(hour.timestamp() * 1000) + v["minute"] * MIN
    # 2013-03-10 (DST) 08:00 local is 12:00Z; 2016-03-10 is past 2016's change (13 March): 13:00Z
    march = [r for r in copy if (r.value["month"], r.value["day"], r.value["hour"]) == (3, 10, 8)]
    assert march and {r.value["time_hour"] for r in march} == {"2016-03-10T13:00:00Z"}


def test_copies_keep_the_lateness_pattern() -> None:
    """Each copy is in the order its flights actually left, and the same flights are as late
    behind the stream time as in 2013: the speed layer drops the same share as late."""
    def behind(k: int) -> tuple[int, list[int]]:
        top, late, delays = -1, 0, []
        for r in flight_copy_records(k):
            late += r.timestamp < top - GRACE_MS
            top = max(top, r.timestamp)
            delays.append(r.value["dep_delay"] or 0)
        return late, delays

    late0, delays0 = behind(0)
    assert late0 > 8_000  # flights left more than the grace behind a later one
    for k in (1, 2):
        late, delays = behind(k)
        assert late == late0
        assert Counter(delays) == Counter(delays0)
        recs = list(itertools.islice(flight_copy_records(k), 50_000))
        actual = [(r.timestamp + (r.value["dep_delay"] or 0) * MIN, r.timestamp) for r in recs]
        assert actual == sorted(actual)


def test_the_tables_match_the_copies() -> None:
    planes = table_records("planes")
    for k in (1, 4):
        copied = plane_copy_records(k)
        assert [(r.key, r.value["tailnum"]) for r in copied] == [(copy_tailnum(r.key, k),) * 2 for r in planes]
        assert [{**r.value, "tailnum": None} for r in copied] == [{**r.value, "tailnum": None} for r in planes]
    known = {r.key for r in planes}
    base = sum(1 for r in flight_copy_records(0) if r.value["tailnum"] in known)
    copy_known = {r.key for r in plane_copy_records(2)}
    assert sum(1 for r in flight_copy_records(2) if r.value["tailnum"] in copy_known) == base  # the same joins
    scaled = flights.sample_data(limit=10, scale=3)
    assert {t: len(rs) for t, rs in scaled.tables.items()} == {"planes": 3 * 3322, "airports": 1458, "airlines": 16}
    assert [r.value["year"] for _, r in scaled.events] == [2013] * 10 + [2014] * 10 + [2015] * 10


def test_scaled_flights_are_generated_lazily() -> None:
    """Ten years are declared at once without generating a flight; reading 150,000 flights
    of three copies holds a chunk at a time (a list of them takes ~140 MB)."""
    list(flights.sample_data(limit=10, scale=2).events)  # the package's frame, cached once
    t0 = time.monotonic()
    tracemalloc.start()
    try:
        ten = flights.sample_data(scale=10)
        declared = tracemalloc.get_traced_memory()[1]
        assert ten.event_count() == 10 * 336_776
        tracemalloc.reset_peak()
        n = sum(1 for _ in flights.sample_data(limit=50_000, scale=3).events)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == 150_000
    assert declared < 30e6, declared  # the ten copies' planes (33,220 records)
    assert peak < 70e6, peak  # a copy's arrays of the year (order, times) and a chunk of records
    assert time.monotonic() - t0 < 60
