"""The layout of one pipeline's lake folder: where each durable table and file lives.

A pipeline owns the folder ``<lake root>/<pipeline name>`` (``Pipeline.lake(root)``);
:class:`LakeLayout` names everything in it, so moving a part of the lake is one edit here
(docs/contracts.md describes the shapes)::

    <lake>/raw/<topic>           Delta: the archived Kafka records of a topic (batch_layer.ingest)
    <lake>/views/<store>         Delta: the batch view of a store (batch_layer.run)
    <lake>/views/_batch.json     the last batch run: watermark, finish time, rows per view
    <lake>/serving/<view>        Delta: the merged (batch + speed) view (serving.views.publish)
    <lake>/serving/_views.json   the serving catalogue: each published view's description
    <lake>/quality/<view>.json   a view's stored Great Expectations result (serving.quality)

Locations are those of :func:`batch_layer.delta.io.join_location`: a ``Path`` for a local
lake, a ``str`` joined with ``/`` for a lake URI (``s3a://bucket/lake/flights``). The batch
layer takes either; serving and pipelines, which read local lakes, take ``Path(...)`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from batch_layer.delta.io import join_location

__all__ = ["LakeLayout"]


@dataclass(frozen=True)
class LakeLayout:
    """The locations in one pipeline's lake folder ``root`` (``<lake root>/<pipeline name>``).

    ``root`` is a local path (``str`` or ``Path``) or a URI (``file:///data/lake/flights``,
    ``s3a://bucket/lake/flights``), kept as given. Every location is
    ``join_location(root, ...)``: a ``Path`` for a local ``root``, a ``str`` for a URI.
    """

    root: str | Path

    #: the top-level parts of the folder: raw tables, batch views, served views, check results
    RAW: ClassVar[str] = "raw"
    VIEWS: ClassVar[str] = "views"
    SERVING: ClassVar[str] = "serving"
    QUALITY: ClassVar[str] = "quality"
    PARTS: ClassVar[tuple[str, ...]] = (RAW, VIEWS, SERVING, QUALITY)

    #: the batch info file's name in ``views/``
    BATCH_INFO_FILE: ClassVar[str] = "_batch.json"
    #: the serving catalogue's name in ``serving/``
    CATALOGUE_FILE: ClassVar[str] = "_views.json"

    def raw_table(self, topic: str) -> Path | str:
        """``<root>/raw/<topic>``: Delta, one row per archived Kafka record of ``topic``
        (``key, value, timestamp, partition, offset, headers``)."""
        return join_location(self.root, self.RAW, topic)

    def batch_view(self, store: str) -> Path | str:
        """``<root>/views/<store>``: Delta, the batch view of ``store``, one row per table key
        (and window): ``key, window_start, window_end, value, timestamp``."""
        return join_location(self.root, self.VIEWS, store)

    @property
    def batch_info(self) -> Path | str:
        """``<root>/views/_batch.json``: the last batch run, ``{"watermark_ms": int,
        "finished_at": iso8601, "views": {store: {"rows": int}}, "dropped": int}``."""
        return join_location(self.root, self.VIEWS, self.BATCH_INFO_FILE)

    def serving_view(self, view: str) -> Path | str:
        """``<root>/serving/<view>``: Delta, the merged view ``view``: the view columns and
        ``source`` (``"batch"`` or ``"speed"``)."""
        return join_location(self.root, self.SERVING, view)

    @property
    def serving_folder(self) -> Path | str:
        """``<root>/serving``: the merged views and their catalogue."""
        return join_location(self.root, self.SERVING)

    @property
    def catalogue(self) -> Path | str:
        """``<root>/serving/_views.json``: the serving catalogue, ``{view: {"windowed": bool,
        "window": {...}}}`` for each published view."""
        return join_location(self.root, self.SERVING, self.CATALOGUE_FILE)

    @property
    def quality_folder(self) -> Path | str:
        """``<root>/quality``: the stored check results, one ``<view>.json`` each."""
        return join_location(self.root, self.QUALITY)

    def quality_result(self, view: str) -> Path | str:
        """``<root>/quality/<view>.json``: the Great Expectations result of ``view``'s checks
        (``success``, ``statistics``, ``results``)."""
        return join_location(self.root, self.QUALITY, f"{view}.json")
