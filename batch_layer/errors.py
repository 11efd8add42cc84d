"""Errors raised by the batch layer."""

from __future__ import annotations


class BatchLayerError(RuntimeError):
    """A batch-layer failure with a message meant for the user (what went wrong, what to do)."""
