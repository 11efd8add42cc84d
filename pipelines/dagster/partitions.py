"""Daily partitions of a pipeline's batch views (backfills from the Dagster UI or CLI).

What a partition means here, honestly: the batch layer recomputes a view from the WHOLE raw
history (windows, sessions and stream-table joins depend on everything before them), so
materializing partition ``2013-03-05`` (or a range, in a single run thanks to
``BackfillPolicy.single_run()``) runs the batch layer over all of history and rewrites the
views; the partition selects which days' windows the materialization reports on (its
metadata counts the windows starting in the selected days). Backfilling a whole year is
therefore one batch run, not 365.

The days come from the declaration (:class:`pipelines.pipeline.Partitioning`): UTC days from
``start`` to ``end`` (exclusive), or open-ended (a new partition each day, up to yesterday)
when ``end`` is ``None``.
"""

from __future__ import annotations

import dagster as dg

from pipelines.pipeline import Pipeline

__all__ = ["partitions_def", "last_partition", "partition_window_ms"]


def partitions_def(p: Pipeline) -> dg.DailyPartitionsDefinition:
    """Daily UTC partitions ``YYYY-MM-DD`` of ``p``'s batch views: ``p.partitions.start`` ..
    the day before ``p.partitions.end``, or up to now when ``end`` is ``None``.

    >>> from pipelines.examples.flights import pipeline
    >>> keys = partitions_def(pipeline).get_partition_keys()
    >>> keys[0], keys[-1], len(keys)
    ('2013-01-01', '2013-12-31', 365)
    """
    part = p.partitions
    return dg.DailyPartitionsDefinition(
        start_date=part.start.isoformat(),
        end_date=part.end.isoformat() if part.end is not None else None,
        timezone="UTC",
    )


def last_partition(p: Pipeline) -> str | None:
    """The last partition key of ``p`` (``YYYY-MM-DD``), ``None`` before the first day has
    ended (open-ended partitions)."""
    return partitions_def(p).get_last_partition_key()


def partition_window_ms(p: Pipeline, context: dg.AssetExecutionContext) -> tuple[int, int, str]:
    """``(start ms, end ms, label)`` of the days a run selects: a partition or a range
    (``[start, end)`` epoch ms UTC; label ``first..last``), or every time and ``"all"``
    for an unpartitioned run."""
    if context.has_partition_key_range:  # a range (a single-run backfill)
        rng = context.partition_key_range
        lo, hi = p.partitions.day_range_ms(rng.start, rng.end)
        return lo, hi, rng.start if rng.start == rng.end else f"{rng.start}..{rng.end}"
    if context.has_partition_key:  # one day
        lo, hi = p.partitions.day_range_ms(context.partition_key)
        return lo, hi, context.partition_key
    return 0, 2**62, "all"
