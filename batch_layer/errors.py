"""Errors raised by the batch layer."""

from __future__ import annotations

from typing import Iterable


class BatchLayerError(RuntimeError):
    """A batch-layer failure with a message meant for the user (what went wrong, what to do)."""


class SparkConfigError(BatchLayerError):
    """A Spark setting of duet (master URL, Connect URL, jars folder, jars on the workers) is
    malformed; the message names the setting, where it came from and the accepted forms."""


class BatchCompileError(BatchLayerError):
    """A topology (or part of it) that the batch layer cannot translate.

    Attributes:
        node: the node that cannot be translated (None when the request itself is wrong,
            e.g. an unknown view).
        op: the node's op type name (or None).
        reason: why.
        views: the requested views that depend on ``node``.
    """

    def __init__(self, reason: str, *, node: str | None = None, op: str | None = None, views: Iterable[str] = ()) -> None:
        self.node, self.op, self.reason, self.views = node, op, reason, tuple(views)
        if node is None:
            msg = reason
        else:
            msg = f"cannot compile node {node!r} ({op}) needed by view(s) {list(self.views)}: {reason}"
        super().__init__(msg)
