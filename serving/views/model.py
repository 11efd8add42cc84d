"""The description of a served view and its catalogue ``<lake>/serving/_views.json``.

A view is a materialized KTable of the shared topology: either a plain table (one row per
key) or a windowed table (one row per key and window). All times are epoch milliseconds.

Window semantics follow Kafka Streams:

* ``tumbling``: windows ``[start, start + size_ms)``, ``start % size_ms == 0``
  (``advance_ms == size_ms``).
* ``hopping``: windows ``[start, start + size_ms)``, ``start % advance_ms == 0``.
* ``session``: ``[start, end]`` both inclusive, ``start`` / ``end`` the first / last record
  timestamps; records closer than ``gap_ms`` are merged into one session.

Catalogue format (see docs/contracts.md)::

    {"<view>": {"windowed": bool,
                "window": null | {"kind": "tumbling|hopping|session", "size_ms": int,
                                  "advance_ms": int, "grace_ms": int, "gap_ms": int}}}

The contract types every window field as ``int``: fields that do not apply to a kind are
written as ``0`` (``gap_ms`` of a tumbling window, ``size_ms`` / ``advance_ms`` of a session)
and read back as ``None`` in :class:`ViewSpec`. ``null`` is accepted on read as well.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from batch_layer.delta.layout import LakeLayout
from serving._jsonio import atomic_write_json, read_json_object
from serving.errors import CatalogueError

__all__ = [
    "WindowKind",
    "ViewSpec",
    "catalogue_path",
    "load_catalogue",
    "save_catalogue",
]

WindowKind = Literal["tumbling", "hopping", "session"]


class ViewSpec(BaseModel):
    """Immutable description of one view.

    Attributes:
        name: the view (= state store = view output topic) name.
        windowed: whether rows are per (key, window).
        window_kind: ``"tumbling" | "hopping" | "session"``, ``None`` iff not windowed.
        size_ms: window size in ms (tumbling/hopping), else ``None``.
        advance_ms: hop in ms (hopping; equals ``size_ms`` for tumbling), else ``None``.
        grace_ms: grace period in ms after a window's end during which late records are still
            accepted (windowed views; 0 for tables).
        gap_ms: session inactivity gap in ms (session), else ``None``.

    Raises:
        pydantic.ValidationError: on an inconsistent combination (e.g. hopping without advance).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    windowed: bool = False
    window_kind: WindowKind | None = None
    size_ms: int | None = None
    advance_ms: int | None = None
    grace_ms: int = 0
    gap_ms: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        kind = data.get("window_kind")
        if kind is None:
            return data
        # Fields that do not apply to the kind: 0 (contract) or None -> None.
        if kind == "session":
            data["size_ms"] = None
            data["advance_ms"] = None
        else:
            data["gap_ms"] = None
            if kind == "tumbling" and not data.get("advance_ms"):
                data["advance_ms"] = data.get("size_ms")
        if data.get("grace_ms") is None:
            data["grace_ms"] = 0
        return data

    @model_validator(mode="after")
    def _check(self) -> ViewSpec:
        if not self.name:
            raise ValueError("view name must not be empty")
        if self.windowed != (self.window_kind is not None):
            raise ValueError("windowed must be true iff window_kind is set")
        if self.grace_ms < 0:
            raise ValueError("grace_ms must be >= 0")
        if self.window_kind is None:
            if any(v is not None for v in (self.size_ms, self.advance_ms, self.gap_ms)):
                raise ValueError("a non-windowed view has no size/advance/gap")
            if self.grace_ms:
                raise ValueError("a non-windowed view has no grace")
        elif self.window_kind == "session":
            if self.gap_ms is None or self.gap_ms <= 0:
                raise ValueError("a session view needs gap_ms > 0")
        else:
            if self.size_ms is None or self.size_ms <= 0:
                raise ValueError(f"a {self.window_kind} view needs size_ms > 0")
            if self.advance_ms is None or not 0 < self.advance_ms <= self.size_ms:
                raise ValueError("advance_ms must be in (0, size_ms]")
            if self.window_kind == "tumbling" and self.advance_ms != self.size_ms:
                raise ValueError("a tumbling view has advance_ms == size_ms")
        return self

    # -- constructors ----------------------------------------------------------------------
    @classmethod
    def table(cls, name: str) -> ViewSpec:
        """A non-windowed view (one row per key)."""
        return cls(name=name)

    @classmethod
    def tumbling(cls, name: str, size_ms: int, grace_ms: int = 0) -> ViewSpec:
        """A tumbling-window view; sizes in ms."""
        return cls(name=name, windowed=True, window_kind="tumbling", size_ms=size_ms,
                   advance_ms=size_ms, grace_ms=grace_ms)

    @classmethod
    def hopping(cls, name: str, size_ms: int, advance_ms: int, grace_ms: int = 0) -> ViewSpec:
        """A hopping-window view; sizes in ms."""
        return cls(name=name, windowed=True, window_kind="hopping", size_ms=size_ms,
                   advance_ms=advance_ms, grace_ms=grace_ms)

    @classmethod
    def session(cls, name: str, gap_ms: int, grace_ms: int = 0) -> ViewSpec:
        """A session-window view; gap and grace in ms."""
        return cls(name=name, windowed=True, window_kind="session", gap_ms=gap_ms,
                   grace_ms=grace_ms)

    # -- semantics -------------------------------------------------------------------------
    def close_time_ms(self, window_end_ms: int) -> int | None:
        """Stream time (ms) at which a window ending at ``window_end_ms`` is closed.

        * tumbling/hopping: closed when ``stream_time >= window_end + grace_ms`` (the end is
          exclusive; Kafka drops a record when ``window_end <= stream_time - grace``).
        * session: closed when ``stream_time > window_end + gap_ms + grace_ms`` (the end is
          inclusive and a record at ``end + gap`` still merges into the session; Kafka drops a
          record when ``session_end < stream_time - gap - grace``). The returned value is
          therefore ``window_end + gap_ms + grace_ms + 1``.
        * not windowed: ``None`` (a table never closes).
        """
        if self.window_kind is None:
            return None
        if self.window_kind == "session":
            assert self.gap_ms is not None
            return window_end_ms + self.gap_ms + self.grace_ms + 1
        return window_end_ms + self.grace_ms

    def is_closed(self, window_end_ms: int, watermark_ms: int | None) -> bool:
        """Whether a window ending at ``window_end_ms`` is closed at stream time
        ``watermark_ms`` (see :meth:`close_time_ms`). ``None`` watermark: nothing is closed."""
        close = self.close_time_ms(window_end_ms)
        return close is not None and watermark_ms is not None and watermark_ms >= close

    # -- catalogue -------------------------------------------------------------------------
    def to_catalogue(self) -> dict[str, Any]:
        """The catalogue entry of this view (contract format, absent fields as 0)."""
        if self.window_kind is None:
            return {"windowed": False, "window": None}
        return {
            "windowed": True,
            "window": {
                "kind": self.window_kind,
                "size_ms": self.size_ms or 0,
                "advance_ms": self.advance_ms or 0,
                "grace_ms": self.grace_ms,
                "gap_ms": self.gap_ms or 0,
            },
        }

    @classmethod
    def from_catalogue(cls, name: str, entry: dict[str, Any]) -> ViewSpec:
        """Build a spec from a catalogue entry.

        Raises:
            CatalogueError: if the entry is malformed.
        """
        try:
            window = entry.get("window")
            if not entry.get("windowed") or not window:
                return cls(name=name, windowed=bool(entry.get("windowed")))
            return cls(
                name=name,
                windowed=True,
                window_kind=window.get("kind"),
                size_ms=window.get("size_ms"),
                advance_ms=window.get("advance_ms"),
                grace_ms=window.get("grace_ms") or 0,
                gap_ms=window.get("gap_ms"),
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise CatalogueError(f"bad catalogue entry for view {name!r}: {exc}") from exc


def catalogue_path(lake: Path | str) -> Path | str:
    """``<lake>/serving/_views.json`` (a ``Path``, or ``s3://...`` on an object store)."""
    return LakeLayout(lake).catalogue


def load_catalogue(lake: Path | str) -> dict[str, ViewSpec]:
    """Read the view catalogue; ``{}`` when it does not exist yet.

    Raises:
        CatalogueError: if the file is not valid JSON or an entry is malformed.
    """
    raw = read_json_object(catalogue_path(lake), CatalogueError) or {}
    return {name: ViewSpec.from_catalogue(name, entry) for name, entry in sorted(raw.items())}


def save_catalogue(lake: Path | str, specs: dict[str, ViewSpec] | list[ViewSpec]) -> Path | str:
    """Write the catalogue atomically (temp file + rename), replacing its content.

    Returns:
        The catalogue path.
    """
    items = specs.values() if isinstance(specs, dict) else specs
    doc = {spec.name: spec.to_catalogue() for spec in sorted(items, key=lambda s: s.name)}
    path = catalogue_path(lake)
    atomic_write_json(path, doc)
    return path
