"""The parts of a pipeline declaration (:class:`~pipelines.declaration.pipeline.Pipeline`):
its :class:`Source` topics, served :class:`View` s, batch :class:`Partitioning` and summary
:class:`Highlights`, and :class:`PipelineError`, the one-line error of a wrong declaration.

Each part is a frozen pydantic model (:class:`Declared`); what ties them to the topology is
checked by the ``Pipeline`` that holds them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = ["Declared", "Source", "View", "Partitioning", "Highlights", "PipelineError", "KEEP_FOREVER", "Limit"]

_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
#: the record timestamps of sample data are as old as the data set: keep topics forever
KEEP_FOREVER: dict[str, str] = {"retention.ms": "-1"}
#: a value limit: ``(min, max)``, ``None`` for an open bound
Limit = tuple[float | None, float | None]


class PipelineError(ValueError):
    """A wrong pipeline declaration. The message is one line: the pipeline, the field and
    what is allowed, e.g. ``pipeline 'clicks': views[0].store: no store 'x' in the
    topology; stores: a, b``."""


def _one_line(prefix: str, exc: ValidationError) -> PipelineError:
    parts = []
    for err in exc.errors():
        loc = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in err["loc"]).replace(".[", "[")
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return PipelineError(f"{prefix}{'; '.join(parts)}")


class Declared(BaseModel):
    """A frozen pydantic model whose validation errors are one-line :class:`PipelineError` s (the base of every part and of
    :class:`~pipelines.declaration.pipeline.Pipeline`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            name = data.get("name") if isinstance(data.get("name"), str) else None
            prefix = f"pipeline {name!r}: " if name else f"{type(self).__name__}: "
            raise _one_line(prefix, exc) from None


class Source(Declared):
    """A source topic of the pipeline.

    Attributes:
        topic: the Kafka topic (a source of the topology).
        partitions: partitions duet creates it with when it is missing (joined inputs must be
            co-partitioned, as in Kafka Streams).
        kind: ``"stream"`` (a KStream), ``"table"`` (a KTable: the latest value per key) or
            ``"global_table"`` (a GlobalKTable); what the Dagster graph and the docs show.
        config: topic configs duet creates it with (default ``retention.ms=-1``: sample data
            is as old as its data set and time retention would delete it).
        description: shown on the topic's asset in Dagster.
    """

    topic: str
    partitions: int = Field(default=1, ge=1)
    kind: Literal["stream", "table", "global_table"] = "stream"
    config: dict[str, str] = Field(default_factory=lambda: dict(KEEP_FOREVER))
    description: str = ""

    @field_validator("topic")
    @classmethod
    def _topic_name(cls, v: str) -> str:
        if not _TOPIC.match(v) or len(v) > 249:
            raise ValueError(f"{v!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)")
        return v


class View(Declared):
    """A served view: a state store of the topology, materialized by an aggregation (a
    windowed or a plain KTable) and written to the topic of the same name.

    Attributes:
        store: the store (= view = speed-layer output topic) name.
        description: one line: what a row holds (shown in Dagster and the views page).
        fields: the value's fields and their physical limits, ``{field: (min, max)}`` with
            ``None`` for an open bound; ``"$"`` names a scalar value (a count or a sum). Each
            becomes a ``expect_column_values_to_be_between`` on ``value.<field>``.
        expectations: more Great Expectations (:class:`serving.quality.suite.ExpectationSpec`,
            or ``(type, kwargs)`` pairs), after the standard ones.
        standard_checks: add the serving layer's standard suite, derived from the windows
            (non-null keys, unique ``(key, window)``, window bounds aligned to the size).
    """

    store: str
    description: str = ""
    fields: dict[str, Limit] = Field(default_factory=dict)
    expectations: tuple[Any, ...] = ()
    standard_checks: bool = True

    @field_validator("store")
    @classmethod
    def _store_name(cls, v: str) -> str:
        if not _TOPIC.match(v):
            raise ValueError(f"{v!r} is not a usable view name (letters, digits, '.', '_', '-')")
        return v

    @field_validator("expectations", mode="before")
    @classmethod
    def _expectations(cls, v: Any) -> tuple[Any, ...]:
        from serving.quality.suite import ExpectationSpec

        out = []
        for e in v or ():
            if isinstance(e, ExpectationSpec):
                out.append(e)
            elif isinstance(e, Mapping):
                out.append(ExpectationSpec(**e))
            elif isinstance(e, tuple) and len(e) == 2:
                out.append(ExpectationSpec(type=e[0], kwargs=dict(e[1])))
            else:
                raise ValueError(f"an expectation is an ExpectationSpec, a dict or a (type, kwargs) pair, got {e!r}")
        return tuple(out)


class Partitioning(Declared):
    """The batch views' Dagster partitions and the recompute schedule.

    Daily partitions (UTC days of event time) from ``start`` to ``end`` (exclusive), or up
    to today when ``end`` is ``None`` (live data). The batch layer always recomputes from the
    whole archived history (windows, sessions and joins depend on everything before them); a
    run materializes the days it targets and the days its newly archived records fall on
    (``docs/dagster-partitions.md``, :mod:`pipelines.dagster.partitions`).

    Attributes:
        start: the first day.
        end: the day after the last one, or ``None`` for "up to now".
        schedule: the recompute schedule's cron expression (UTC), default hourly.
        copy_years: calendar years between one copy of the sample data and the next
            (``sample_copy``, ``duet load --years N``); the partitions of N copies end
            ``(N - 1) * copy_years`` years after ``end`` (:meth:`for_copies`). 0: every copy
            falls on the sample's days.
    """

    start: date
    end: date | None = None
    schedule: str = "0 * * * *"
    copy_years: int = Field(0, ge=0)

    def for_copies(self, copies: int) -> Partitioning:
        """These partitions stretched over ``copies`` copies of the sample data (itself for
        one copy, ``copy_years`` 0 or no ``end``).

        >>> Partitioning(start=date(2013, 1, 1), end=date(2014, 1, 1), copy_years=1).for_copies(3).end
        datetime.date(2016, 1, 1)
        """
        if copies <= 1 or not self.copy_years or self.end is None:
            return self
        year = self.end.year + (copies - 1) * self.copy_years
        try:
            end = self.end.replace(year=year)
        except ValueError:  # 29 February in a year without one
            end = date(year, 3, 1)
        return self.model_copy(update={"end": end})

    @model_validator(mode="after")
    def _order(self) -> Partitioning:
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be after start ({self.start})")
        if len(self.schedule.split()) != 5:
            raise ValueError(f"schedule {self.schedule!r} is not a 5-field cron expression, e.g. '0 * * * *'")
        return self

    def day_range_ms(self, first: str, last: str | None = None) -> tuple[int, int]:
        """``[start, end)`` in epoch ms of the days ``first`` .. ``last`` (``YYYY-MM-DD``,
        inclusive)."""
        def day_ms(key: str) -> int:
            return int(datetime.strptime(key, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp() * 1000)

        return day_ms(first), day_ms(last or first) + 86_400_000


@dataclass(frozen=True)
class Highlights:
    """A table the summary of ``duet run`` prints after the views (e.g. the busiest hours):
    a title, column names and rows of text."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
