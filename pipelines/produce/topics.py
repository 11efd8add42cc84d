"""The Kafka topics a pipeline declares, and creating them: its source topics, its
dead-letter topic and its view output topics (the speed layer's internal topics are the
runtime's, :mod:`speed_layer.runtime.internal_topics`).

A topic that exists is left as it is (:func:`speed_layer.admin.ensure_topics`).
"""

from __future__ import annotations

from typing import Any

from pipelines.declaration.pipeline import Pipeline

__all__ = ["VIEW_TOPIC_PARTITIONS", "DLQ_PARTITIONS", "source_topic_specs", "view_topic_specs",
           "ensure_pipeline_topics"]

#: Partitions of each view output topic.
VIEW_TOPIC_PARTITIONS = 4
_KEEP_FOREVER = {"retention.ms": "-1"}
#: partitions of a dead-letter topic duet creates
DLQ_PARTITIONS = 1


def source_topic_specs(pipeline: Pipeline, prefix: str = "") -> list[Any]:
    """A :class:`TopicSpec` per source topic and the dead-letter topic, as declared (names
    prefixed by ``prefix``)."""
    from speed_layer.admin import TopicSpec

    specs = [TopicSpec(prefix + s.topic, s.partitions, dict(s.config)) for s in pipeline.sources]
    if pipeline.dlq_topic:
        specs.append(TopicSpec(prefix + pipeline.dlq_topic, DLQ_PARTITIONS, dict(_KEEP_FOREVER)))
    return specs


def view_topic_specs(pipeline: Pipeline) -> list[Any]:
    """A :class:`TopicSpec` per view output topic (``retention.ms=-1``: windows as old as
    their data)."""
    from speed_layer.admin import TopicSpec

    return [TopicSpec(name, VIEW_TOPIC_PARTITIONS, dict(_KEEP_FOREVER)) for name in pipeline.view_names]


def ensure_pipeline_topics(pipeline: Pipeline, bootstrap: str) -> None:
    """Create the source topics, the dead-letter topic and the view output topics if missing."""
    from speed_layer.admin import ensure_topics

    ensure_topics(bootstrap, [*source_topic_specs(pipeline), *view_topic_specs(pipeline)])
