"""Daily partitions over 2013 for the batch views (backfills from the Dagster UI or CLI).

What a partition means here, honestly: the batch layer recomputes a view from the WHOLE raw
history (windows, sessions and stream-table joins depend on everything before them), so
materializing partition ``2013-03-05`` (or a range, in a single run thanks to
``BackfillPolicy.single_run()``) runs the batch layer over all of history and rewrites the
views; the partition selects which day's windows the materialization reports on (its
metadata counts the windows starting in the selected days). Backfilling the full range is
therefore one batch run, not 365.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

__all__ = ["DAILY_2013", "FIRST_DAY", "END_DAY", "partition_range_ms"]

FIRST_DAY = "2013-01-01"
#: exclusive end: the last partition is 2013-12-31
END_DAY = "2014-01-01"

#: One partition per day of 2013 (UTC), ``2013-01-01`` .. ``2013-12-31``.
DAILY_2013 = dg.DailyPartitionsDefinition(start_date=FIRST_DAY, end_date=END_DAY, timezone="UTC")


def _day_ms(key: str) -> int:
    return int(datetime.strptime(key, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp() * 1000)


def partition_range_ms(first_key: str, last_key: str | None = None) -> tuple[int, int]:
    """``[start, end)`` in epoch ms of the days ``first_key`` .. ``last_key`` (inclusive).

    >>> partition_range_ms("2013-01-01")
    (1356998400000, 1357084800000)
    """
    last = last_key or first_key
    return _day_ms(first_key), _day_ms(last) + 86_400_000
