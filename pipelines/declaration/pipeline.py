"""Declare a pipeline once: :class:`Pipeline` and its parts.

A :class:`Pipeline` is the one value every surface of duet reads: the ``duet`` commands
(``--pipeline module:attribute``), the Dagster definitions (:func:`pipelines.dagster.definitions`),
the merged serving views, the Great Expectations checks and the speed == batch agreement. It
holds no behaviour of its own beyond deriving what the topology already says (which store is
windowed how), so that a declaration stays a few lines, as Dagster's ``Definitions`` or
Kafka Streams' ``StreamsBuilder`` + config::

    from datetime import date
    from pipelines import Partitioning, Pipeline, Source, View
    from speed_layer import StreamsBuilder, ...

    def build() -> Topology: ...           # the topology, written once (speed_layer DSL)

    pipeline = Pipeline(
        name="clicks",
        topology=build,
        sources=[Source(topic="clicks", partitions=4), Source(topic="users", partitions=4, kind="table")],
        dead_letter_topic="clicks-dlq",
        views=[View(store="clicks_per_minute", description="clicks per user, tumbling 1 min",
                    fields={"$": (0, None)})],
        partitions=Partitioning(start=date(2026, 1, 1)),
    )

What is derived, not declared: a view's window kind, size, advance, gap and grace come from
the aggregation that writes its store (so the served view and its checks never drift from the
topology); a view's speed-layer output topic must be a sink of the topology with the same name
as the store (``.to_stream().to(store, ...)``).

A wrong declaration fails when the module is imported, with one line naming the field and
what is allowed (:class:`PipelineError`, a ``ValueError``).

Durable names a pipeline owns (one place: the properties below): the application ids
``duet-<name>-run-<time>-<random>`` (each ``duet run``) and ``duet-<name>-service``
(``duet speed``), and the lake folder ``<lake root>/<name>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from pipelines.declaration.parts import Declared, Highlights, Partitioning, PipelineError, Source, View
from pipelines.declaration.sample_data import Sample, SourceRecord, scaled_sample
from pipelines.declaration.topology_reading import servable_stores, sink_topics, source_topics
from speed_layer.topology import Topology

if TYPE_CHECKING:
    from serving.quality.suite import ExpectationSpec
    from serving.views.model import ViewSpec

__all__ = [
    "Pipeline",
    "Source",
    "View",
    "Partitioning",
    "Sample",
    "SourceRecord",
    "Highlights",
    "PipelineError",
]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Pipeline(Declared):
    """One pipeline, declared once; every duet command, the Dagster definitions, the serving
    layer and the checks take it.

    Attributes:
        name: lower-case identifier (``[a-z][a-z0-9_]*``): the Dagster asset prefix, the
            lake folder and part of the application ids.
        topology: the :class:`speed_layer.Topology`, or a function building it (called once).
        config: the Streams config of the pipeline (``StreamsConfig`` keys, Kafka's names);
            duet adds ``application.id``, ``bootstrap.servers`` and ``state.dir``.
        sources: every source topic of the topology (repartition topics excluded).
        dead_letter_topic: where records that fail go (Kafka's KIP-1034
            ``errors.dead.letter.queue.topic.name``, set in ``config`` when absent); archived
            beside the sources.
        views: the served views.
        partitions: the batch partitions and schedule.
        sample: ``sample(limit) -> Sample``: data ``duet run`` loads (``None``: ``duet run``
            uses what the source topics hold).
        sample_copy: ``sample_copy(k, limit) -> Sample``: copy ``k`` of the sample, for a
            sample N times as large (``duet load --scale N``, alias ``--years N``: copies 0 ..
            N-1, see :meth:`sample_data`). Copy 0 is the sample itself (the same records as
            ``sample(limit)``); copy ``k`` holds the same events shifted ``k`` periods of the
            sample later (the flights: ``k`` calendar years), with keys made unique to the
            copy (so the keys grow with N too) and the same arrival order and lateness, the
            first ``limit`` of them; its tables hold the records its events need that no
            earlier copy has (the flights: planes under the copy's tail numbers). Keep its
            events lazy (a generator, with ``Sample.count``): every copy is asked for before
            the first event is read, and N copies are produced one after the other. ``None``:
            the pipeline cannot be scaled (``--scale`` fails at once, naming it).
        highlights: ``highlights(lake) -> Highlights | None``: an extra table for the summary
            of ``duet run``, read from the pipeline's lake (``lake`` is its folder).
        description: one paragraph, shown in Dagster.

    Raises:
        PipelineError: on a wrong declaration (one line naming the field and what is allowed).
    """

    name: str
    topology: Any
    config: dict[str, Any] = Field(default_factory=dict)
    sources: tuple[Source, ...]
    dead_letter_topic: str | None = None
    views: tuple[View, ...]
    partitions: Partitioning
    sample: Callable[[int | None], Sample] | None = None
    sample_copy: Callable[[int, int | None], Sample] | None = None
    highlights: Callable[[Path], Highlights | None] | None = None
    description: str = ""

    _topology: Topology | None = PrivateAttr(default=None)
    _specs: dict[str, ViewSpec] = PrivateAttr(default_factory=dict)
    _windows: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r}: use lower-case letters, digits and '_', starting with a letter")
        return v

    @field_validator("topology")
    @classmethod
    def _topology_kind(cls, v: Any) -> Any:
        if isinstance(v, Topology) or callable(v):
            return v
        raise ValueError(f"expected a speed_layer.Topology or a function returning one, got {type(v).__name__}")

    @model_validator(mode="after")
    def _against_topology(self) -> Pipeline:
        try:
            topo = self.topology() if not isinstance(self.topology, Topology) else self.topology
        except Exception as exc:  # the user's builder: report it on the field's line
            raise ValueError(f"topology: building it raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(topo, Topology):
            raise ValueError(f"topology: the function returned {type(topo).__name__}, not a speed_layer.Topology")
        object.__setattr__(self, "_topology", topo)
        if self.sample_copy is not None and self.sample is None:
            raise ValueError("sample_copy: copies of the sample data need the sample itself: declare sample too")
        self._check_sources(topo)
        self._check_views(topo)
        dlq_key = "errors.dead.letter.queue.topic.name"
        configured = self.config.get(dlq_key)
        if self.dead_letter_topic and configured and configured != self.dead_letter_topic:
            raise ValueError(f"dead_letter_topic {self.dead_letter_topic!r} differs from config[{dlq_key!r}] "
                             f"{configured!r}; declare it once")
        return self

    def _check_sources(self, topo: Topology) -> None:
        declared = [s.topic for s in self.sources]
        dupes = sorted({t for t in declared if declared.count(t) > 1})
        if dupes:
            raise ValueError(f"sources: topic {dupes[0]!r} is declared twice")
        used = set(source_topics(topo))
        missing = sorted(used - set(declared))
        if missing:
            raise ValueError(f"sources: the topology reads {missing} but they are not declared; declared: {declared}")
        extra = sorted(set(declared) - used)
        if extra:
            raise ValueError(f"sources: {extra} are not read by the topology; its sources: {sorted(used)}")

    def _check_views(self, topo: Topology) -> None:
        from serving.views.model import ViewSpec

        names = [v.store for v in self.views]
        if not names:
            raise ValueError("views: declare at least one view (a store written by an aggregation)")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"views: store {dupes[0]!r} is declared twice")
        servable = servable_stores(topo)
        sinks = sink_topics(topo)
        specs: dict[str, ViewSpec] = {}
        windows: dict[str, Any] = {}
        for i, view in enumerate(self.views):
            if view.store not in servable:
                raise ValueError(f"views[{i}].store: {view.store!r} is not a store written by an aggregation; "
                                 f"stores: {', '.join(sorted(servable)) or 'none'}")
            w = servable[view.store]
            kind = None if w is None else w.kind
            if kind == "sliding":
                raise ValueError(f"views[{i}].store: {view.store!r} has sliding windows; served window kinds: "
                                 "tumbling, hopping, session, or none (a KTable)")
            if view.store not in sinks:
                raise ValueError(f"views[{i}].store: the topology writes no topic {view.store!r}: add "
                                 f".to_stream().to({view.store!r}, ...) after the aggregation")
            windows[view.store] = w
            if w is None:
                specs[view.store] = ViewSpec.table(view.store)
            elif kind == "session":
                specs[view.store] = ViewSpec.session(view.store, gap_ms=w.gap_ms, grace_ms=w.grace_ms)
            elif kind == "hopping":
                specs[view.store] = ViewSpec.hopping(view.store, size_ms=w.size_ms, advance_ms=w.advance_ms,
                                                     grace_ms=w.grace_ms)
            else:
                specs[view.store] = ViewSpec.tumbling(view.store, size_ms=w.size_ms, grace_ms=w.grace_ms)
        object.__setattr__(self, "_specs", specs)
        object.__setattr__(self, "_windows", windows)

    # ------------------------------------------------------------------ what duet reads
    def build_topology(self) -> Topology:
        """The topology (built once, when the declaration was validated)."""
        assert self._topology is not None
        return self._topology

    @property
    def view_names(self) -> tuple[str, ...]:
        """The views (= stores = speed output topics), in declaration order."""
        return tuple(v.store for v in self.views)

    @property
    def view_specs(self) -> Mapping[str, ViewSpec]:
        """``{view: serving.ViewSpec}`` derived from the topology's windows (read-only)."""
        return MappingProxyType(self._specs)

    def view(self, name: str) -> View:
        """The declared :class:`View` ``name``.

        Raises:
            KeyError: no such view (the message lists the views).
        """
        for v in self.views:
            if v.store == name:
                return v
        raise KeyError(f"pipeline {self.name!r} has no view {name!r}; views: {', '.join(self.view_names)}")

    def windows_of(self, name: str) -> Any:
        """The windows (``TimeWindows`` / ``SessionWindows``) of view ``name``, ``None`` for a
        plain KTable."""
        return self._windows[name]

    @property
    def input_topics(self) -> dict[str, int]:
        """``{source topic: partitions}`` in declaration order."""
        return {s.topic: s.partitions for s in self.sources}

    @property
    def dlq_topic(self) -> str | None:
        """The dead-letter topic: declared, or named in ``config``."""
        return self.dead_letter_topic or self.config.get("errors.dead.letter.queue.topic.name")

    @property
    def archived_topics(self) -> tuple[str, ...]:
        """Topics the batch layer archives: the sources, then the dead-letter topic."""
        return (*self.input_topics, *((self.dlq_topic,) if self.dlq_topic else ()))

    @property
    def streams_config(self) -> dict[str, Any]:
        """``config`` with the dead-letter topic and the deserialization, processing and
        production exception handlers set to ``dead_letter`` when a DLQ is declared (Kafka's
        KIP-1034 key and duet's ``dead_letter`` handlers), unless set already."""
        conf = dict(self.config)
        if self.dead_letter_topic:
            conf.setdefault("errors.dead.letter.queue.topic.name", self.dead_letter_topic)
            conf.setdefault("deserialization.exception.handler", "dead_letter")
            conf.setdefault("processing.exception.handler", "dead_letter")
            conf.setdefault("production.exception.handler", "dead_letter")
        return conf

    @property
    def run_app_id_prefix(self) -> str:
        """``duet-<name>-run``: every ``duet run`` uses ``<prefix>-<utc time>-<random>``."""
        return f"duet-{self.name.replace('_', '-')}-run"

    @property
    def service_app_id(self) -> str:
        """``duet-<name>-service``: the stable application id of ``duet speed``."""
        return f"duet-{self.name.replace('_', '-')}-service"

    def lake(self, root: str | Path) -> Path | str:
        """The pipeline's folder of the lake: ``<root>/<name>`` (``raw/``, ``views/``,
        ``serving/``, ``quality/``): a ``Path`` for a local root, ``"s3://bucket/prefix/<name>"``
        for an object-store root (``s3://`` or ``s3a://``, :mod:`batch_layer.delta.storage`)."""
        from batch_layer.delta.storage import delta_uri, is_object_store

        if is_object_store(root):
            return f"{delta_uri(root).rstrip('/')}/{self.name}"
        return Path(root) / self.name

    def expectations(self, name: str) -> list[ExpectationSpec]:
        """The GX suite of view ``name``: the standard suite of its windows with the declared
        field limits, then the declared expectations.

        Raises:
            KeyError: no such view.
        """
        from serving.quality.suite import standard_expectations

        view = self.view(name)
        spec = self._specs[name]
        exps = standard_expectations(spec, view.fields)
        if not view.standard_checks:  # the field limits only
            exps = [e for e in exps if str(e.kwargs.get("column", "")).startswith("value")]
        exps.extend(view.expectations)
        return exps

    def require_sample(self) -> Callable[[int | None], Sample]:
        """The declared sample function (without calling it).

        Raises:
            PipelineError: the pipeline declares no sample data.
        """
        if self.sample is None:
            raise PipelineError(f"pipeline {self.name!r} declares no sample data: produce into its topics "
                                f"({', '.join(self.input_topics)}) and run without loading")
        return self.sample

    def require_sample_copy(self) -> Callable[[int, int | None], Sample]:
        """The declared ``sample_copy`` function (without calling it).

        Raises:
            PipelineError: the pipeline declares no sample data, or no ``sample_copy`` (one
                line naming the pipeline, ``sample_copy`` and ``--scale``).
        """
        self.require_sample()
        if self.sample_copy is None:
            raise PipelineError(f"pipeline {self.name!r} declares no sample_copy, so its sample data cannot be "
                                "scaled: run without --scale/--years, or declare Pipeline(sample_copy=...)")
        return self.sample_copy

    def sample_data(self, limit: int | None = None, scale: int = 1) -> Sample:
        """The declared sample (the first ``limit`` events), or ``scale`` copies of it.

        With ``scale`` > 1: copies ``0 .. scale-1`` of ``sample_copy``, each cut to its first
        ``limit`` events (``scale * limit`` events in all), read lazily
        (:func:`pipelines.declaration.sample_data.scaled_sample`).

        Raises:
            PipelineError: the pipeline declares no sample data (or no ``sample_copy`` and
                ``scale`` > 1).
            ValueError: ``scale`` < 1.
        """
        if scale < 1:
            raise ValueError(f"scale must be >= 1, got {scale}")
        if scale == 1:
            data = self.require_sample()(limit)
            events = list(data.events)
            if limit is not None:
                events = events[:limit]
            return Sample(tables=data.tables, events=events)
        return scaled_sample(self.require_sample_copy(), scale, limit)
