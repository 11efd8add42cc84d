"""Graph nodes, store specs, internal topics and sub-topologies."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..serde import Serde
from .ops import Op

StoreKind = Literal["key_value", "timestamped_key_value", "window", "session", "versioned"]


@dataclass(frozen=True)
class GraphNode:
    """One processor node: a unique ``name``, its ``op`` (what it does), its ``parents`` by
    name, and the ``stores`` it accesses by name."""

    name: str
    op: Op
    parents: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoreSpec:
    """A state store: its name, kind, serdes, backend, retention and changelog settings.

    ``retention_ms`` and ``window_size_ms`` apply to window and session stores;
    ``retain_duplicates`` to the window stores of stream-stream joins; ``history_ms`` to
    versioned stores. ``global_topic`` is set for a GlobalKTable's store (no changelog: the
    source topic is its changelog). ``source_topic_changelog`` is set when a KTable source
    topic serves as the changelog (Kafka's source-topic optimization).
    """

    name: str
    kind: StoreKind
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    in_memory: bool = False
    caching: bool = False
    logging: bool = True
    retention_ms: int | None = None
    window_size_ms: int | None = None
    retain_duplicates: bool = False
    history_ms: int | None = None
    global_topic: str | None = None
    source_topic_changelog: str | None = None
    log_config: dict[str, str] = field(default_factory=dict)

    def changelog_topic(self, application_id: str) -> str:
        """``<application.id>-<store>-changelog`` (Kafka's naming)."""
        if self.source_topic_changelog:
            return self.source_topic_changelog
        return f"{application_id}-{self.name}-changelog"


@dataclass(frozen=True)
class InternalTopic:
    """A repartition topic (``<application.id>-<name>``): ``name`` is without the prefix;
    ``partitions`` None means "decided when the application starts" (co-partitioning)."""

    name: str
    partitions: int | None = None

    def full_name(self, application_id: str) -> str:
        return f"{application_id}-{self.name}"


@dataclass(frozen=True)
class SubTopology:
    """A connected part of the topology between topics; runs as one task per partition."""

    id: int
    nodes: tuple[str, ...]
    source_topics: tuple[str, ...]
    sink_topics: tuple[str, ...]
    stores: tuple[str, ...]
