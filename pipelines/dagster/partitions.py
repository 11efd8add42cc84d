"""Daily partitions of a pipeline's batch views, and which of them a run materializes.

The model. A partition is a UTC day of event time: the windows starting that day (a KTable
view: the rows last updated that day). The batch layer cannot compute one day alone: a view
is recomputed from the WHOLE raw history (windows, sessions and stream-table joins depend on
everything before them), so every run rewrites every day of every selected view. What a run
materializes in Dagster is therefore not "what it computed" (always everything) but the days
it was asked for and the days whose inputs it changed:

* the days the run targets: one day or a contiguous range, chosen in the UI, by a backfill
  (``BackfillPolicy.single_run()``: any range is ONE batch run, a year is not 365 runs), or
  by the sensor or the schedule (below);
* every other day on which a record this run archived falls (event time: each record
  decoded with its source's serdes and timestamp extractor, as the batch layer does; see
  :mod:`pipelines.dagster.new_data`), and the days the run's ``duet/touched_days`` tag names
  (so that re-executing a failed sensor run, whose ingest was already done, still reports
  them). These are logged as materializations of those days by the same run.

A day that is neither targeted nor touched is not materialized by the run, though the run
rewrote it too: nothing it reads changed (except through a join with a table record of an
earlier day, or a session or hopping window that began the day before a new record: those
days are rewritten and correct, but not reported). A day on which no data falls is never
materialized by the sensor or the schedule; the UI and backfills materialize what they name.

The sensor ``<p>_new_kafka_data`` and the schedule ``<p>_recompute_schedule`` look at the
records in Kafka the lake has not archived, take the days they fall on (within the
partitions: a record outside them names no day) and request ONE run, whose target is the
last contiguous block of those days (Dagster runs target one day or one contiguous range;
one run per block would recompute the whole history once per block); the run materializes
the other days as days its data touched. Nothing new: no run (``SkipReason``).

Each materialization's metadata says what was recomputed: the run's target, the days its new
records fall on, per day the windows (or updated rows) of that day, the new records of that
day and why the day is materialized.

The days come from the declaration (:class:`pipelines.declaration.pipeline.Partitioning`): UTC days from
``start`` to ``end`` (exclusive), or open-ended when ``end`` is ``None``: a partition per day
up to and including today (``end_offset=1``: live data lands on today, which is a partition
from its first record, materialized again as more of the day arrives). When N copies of the
sample data were loaded (``duet load --years N``: the flights of 2013 .. 2013 + N - 1), the
definitions stretch ``end`` over them (``Partitioning.copy_years``, :mod:`pipelines.lake.loaded`):
the partitions are the days of the data loaded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import date, timedelta

import dagster as dg

from pipelines.declaration.pipeline import Pipeline

__all__ = ["partitions_def", "partition_keys", "run_target_days", "day_of", "day_blocks", "compact_days",
           "parse_days", "days_in_partitions", "count_per_day", "DAY_MS"]

#: One day in epoch milliseconds.
DAY_MS = 86_400_000
_EPOCH = date(1970, 1, 1)


def partitions_def(p: Pipeline) -> dg.DailyPartitionsDefinition:
    """Daily UTC partitions ``YYYY-MM-DD`` of ``p``'s batch views: ``p.partitions.start`` ..
    the day before ``p.partitions.end``, or up to today (included) when ``end`` is ``None``.

    >>> from pipelines.examples.flights import pipeline
    >>> keys = partitions_def(pipeline).get_partition_keys()
    >>> keys[0], keys[-1], len(keys)
    ('2013-01-01', '2013-12-31', 365)
    """
    part = p.partitions
    if part.end is None:
        return dg.DailyPartitionsDefinition(start_date=part.start.isoformat(), timezone="UTC", end_offset=1)
    return dg.DailyPartitionsDefinition(start_date=part.start.isoformat(), end_date=part.end.isoformat(),
                                        timezone="UTC")


def partition_keys(p: Pipeline) -> list[str]:
    """Every partition key of ``p`` now, in order."""
    return partitions_def(p).get_partition_keys()


def run_target_days(context: dg.AssetExecutionContext) -> list[str]:
    """The days a run targets: its partition, or every day of its range, in order."""
    if context.has_partition_key_range or context.has_partition_key:
        return list(context.partition_keys)
    return []


# ------------------------------------------------------------------ days (pure functions)
def day_of(ms: int) -> str:
    """The UTC day ``YYYY-MM-DD`` of epoch milliseconds ``ms``.

    >>> day_of(0), day_of(86_399_999), day_of(1362873600000)
    ('1970-01-01', '1970-01-01', '2013-03-10')
    """
    return (_EPOCH + timedelta(days=ms // DAY_MS)).isoformat()


def day_blocks(days: Iterable[str]) -> list[tuple[str, str]]:
    """The contiguous blocks ``(first, last)`` of ``days`` (``YYYY-MM-DD``, any order,
    repeats allowed), in order.

    >>> day_blocks(["2013-03-12", "2013-03-10", "2013-03-11", "2013-01-05", "2013-03-10"])
    [('2013-01-05', '2013-01-05'), ('2013-03-10', '2013-03-12')]
    """
    blocks: list[tuple[str, str]] = []
    prev: date | None = None
    for d in sorted({date.fromisoformat(x) for x in days}):
        if prev is not None and d == prev + timedelta(days=1):
            blocks[-1] = (blocks[-1][0], d.isoformat())
        else:
            blocks.append((d.isoformat(), d.isoformat()))
        prev = d
    return blocks


def compact_days(days: Iterable[str]) -> str:
    """``days`` as text: blocks ``first..last`` and single days, comma-separated, in order
    (``""`` for none); :func:`parse_days` reads it back.

    >>> compact_days(["2013-03-11", "2013-01-05", "2013-03-10"])
    '2013-01-05, 2013-03-10..2013-03-11'
    """
    return ", ".join(a if a == b else f"{a}..{b}" for a, b in day_blocks(days))


def parse_days(text: str) -> list[str]:
    """The days of a :func:`compact_days` text, in order.

    Raises:
        ValueError: a part is not ``YYYY-MM-DD`` nor ``YYYY-MM-DD..YYYY-MM-DD`` (first <= last).

    >>> parse_days("2013-01-05, 2013-03-10..2013-03-11")
    ['2013-01-05', '2013-03-10', '2013-03-11']
    """
    out: set[date] = set()
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        first, _, last = part.partition("..")
        lo, hi = date.fromisoformat(first.strip()), date.fromisoformat((last or first).strip())
        if hi < lo:
            raise ValueError(f"{part!r}: the last day is before the first")
        out.update(lo + timedelta(days=i) for i in range((hi - lo).days + 1))
    return [d.isoformat() for d in sorted(out)]


def days_in_partitions(days: Iterable[str], keys: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(days that are partition keys, days that are not)``, each sorted, without repeats."""
    valid = set(keys)
    every = sorted(set(days))
    return [d for d in every if d in valid], [d for d in every if d not in valid]


def count_per_day(stamps_ms: Iterable[int | float | None]) -> Counter[str]:
    """``{day: how many of stamps_ms fall on it}`` (``None`` and NaN are left out).

    >>> dict(count_per_day([0, 86_400_000, 86_400_001, None]))
    {'1970-01-01': 1, '1970-01-02': 2}
    """
    per: Counter[int] = Counter(int(t) // DAY_MS for t in stamps_ms if t is not None and t == t)
    return Counter({day_of(d * DAY_MS): n for d, n in sorted(per.items())})
