"""Whether a pipeline's speed layer is still running, from its consumer groups.

Kafka's ``kafka-streams-application-reset`` refuses to reset an application whose consumer
group still has active members ("Consumer group ... is still active"): deleting the topics
under a running application breaks it. :func:`check_not_running` does the same for
:func:`pipelines.job.steps.reset_pipeline`, over every application of the pipeline: ``duet
speed``'s (``duet-<name>-service``) and each ``duet run``'s (``duet-<name>-run-*``, a
``duet speed --fresh`` or ``--server`` too). An application started under another
``--application-id`` is not seen.
"""

from __future__ import annotations

from pipelines.declaration.pipeline import Pipeline
from pipelines.preflight import UserError

__all__ = ["PipelineRunning", "pipeline_groups", "check_not_running", "GROUP_TIMEOUT_S"]

#: seconds the listing and the description of the groups may take, retries included
GROUP_TIMEOUT_S = 30.0


class PipelineRunning(UserError):
    """An application of the pipeline still has active members: stop it first."""


def pipeline_groups(pipeline: Pipeline, bootstrap: str, timeout_s: float = GROUP_TIMEOUT_S) -> list[str]:
    """The consumer groups of ``pipeline``'s applications on the cluster: ``duet speed``'s
    and every ``duet run``'s (sorted).

    Raises:
        StreamsException: the groups cannot be listed (a ``TaskTimeoutException`` after
            ``timeout_s``).
    """
    from speed_layer.admin import consumer_groups

    runs = f"{pipeline.run_app_id_prefix}-"
    return [g for g in consumer_groups(bootstrap, timeout_s) if g == pipeline.service_app_id or g.startswith(runs)]


def check_not_running(pipeline: Pipeline, bootstrap: str, timeout_s: float = GROUP_TIMEOUT_S) -> list[str]:
    """Refuse, as Kafka's application reset tool, while a consumer group of ``pipeline``'s
    applications (:func:`pipeline_groups`) has active members; else return those groups
    (none active).

    Raises:
        PipelineRunning: a group has members; the message names each such group and its
            members' client ids and hosts.
        StreamsException: the groups cannot be listed or described within ``timeout_s`` (the
            check cannot tell, so nothing may be deleted either).
    """
    from speed_layer.admin import group_members

    listed = pipeline_groups(pipeline, bootstrap, timeout_s)
    members = group_members(bootstrap, listed, timeout_s)
    if not members:
        return listed
    groups: dict[str, list[str]] = {}
    for m in members:
        groups.setdefault(m.group_id, []).append(f"{m.client_id} on {m.host.lstrip('/')}")
    active = "; ".join(f"consumer group {g} is still active ({len(ms)} member(s): {', '.join(ms)})"
                       for g, ms in groups.items())
    raise PipelineRunning(f"cannot reset pipeline {pipeline.name!r} on {bootstrap}: {active}. Stop its speed layer "
                          "(Ctrl-C or SIGTERM to `duet speed`, or the `duet run` using it) and try again (the member "
                          "of a killed process stays until its session.timeout.ms passes); nothing was deleted")
