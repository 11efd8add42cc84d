"""Errors raised by the serving layer.

Every error derives from :class:`ServingError`, so callers can catch the whole family.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "ServingError",
    "UnknownViewError",
    "UnknownKeyError",
    "InvalidTimeError",
    "InvalidCursorError",
    "CatalogueError",
    "BatchViewNotFoundError",
    "SpeedSourceError",
    "QualityError",
]


class ServingError(Exception):
    """Base class of every serving-layer error."""


class UnknownViewError(ServingError, LookupError):
    """A view name that the catalogue / index does not know.

    Attributes:
        view: the requested view name.
        known: the sorted names of the views that do exist.
    """

    def __init__(self, view: str, known: Iterable[str] = ()) -> None:
        self.view = view
        self.known = sorted(known)
        listed = ", ".join(self.known) if self.known else "(none)"
        super().__init__(f"unknown view {view!r}; known views: {listed}")

    def __str__(self) -> str:  # LookupError/KeyError would repr() the message
        return self.args[0]


class UnknownKeyError(ServingError, LookupError):
    """A key that has no row in the given view.

    Attributes:
        view: the view name.
        key: the requested key.
    """

    def __init__(self, view: str, key: str) -> None:
        self.view = view
        self.key = key
        super().__init__(f"unknown key {key!r} in view {view!r}")

    def __str__(self) -> str:
        return self.args[0]


class InvalidTimeError(ServingError, ValueError):
    """A time bound that is neither ISO-8601 nor integer epoch milliseconds, or an empty range."""


class InvalidCursorError(ServingError, ValueError):
    """A paging ``cursor`` that is not one the API handed out (malformed or tampered with)."""


class CatalogueError(ServingError, ValueError):
    """``<lake>/serving/_views.json`` is malformed or describes an inconsistent view."""


class BatchViewNotFoundError(ServingError, FileNotFoundError):
    """``<lake>/views/<store>`` is not a Delta table."""


class SpeedSourceError(ServingError):
    """A view output topic could not be read (missing topic, broker error, timeout)."""


class QualityError(ServingError, ValueError):
    """An expectation could not be built (unknown expectation type, bad kwargs)."""
