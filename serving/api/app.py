"""HTTP API over the merged views (FastAPI).

Endpoints (times in epoch ms plus ISO-8601 UTC):

* ``GET /health``: status, number of served views, batch watermark; serving live, what was
  read of each view topic (stream time, caught up).
* ``GET /views``: every view with its spec, row count, key count and Delta version.
* ``GET /views/{view}``: one view.
* ``GET /views/{view}/keys?limit=&offset=&q=``: the sorted keys of a view; ``q`` searches
  them (the keys containing it, ignoring case, those starting with it first).
* ``GET /views/{view}/keys/{key}?from=&to=&limit=&cursor=``: the rows of a key whose window
  overlaps ``[from, to]``, ordered by window start then end; bounds are ISO-8601 (naive =
  UTC) or integer epoch ms. Paged: ``limit`` rows (default 1,000, at most 10,000); the body's
  ``next_cursor`` (``null`` on the last page) and the ``Link: <...>; rel="next"`` header
  (RFC 8288) give the next page (see :mod:`serving.api.paging`).
* ``GET /quality``: the stored Great Expectations results by view.
* ``GET /ui``, ``GET /ui/views/{view}``: HTML pages charting each view (see
  :mod:`serving.api.pages`); ``GET /`` redirects (307) to ``/ui``.
* ``GET /docs`` (Swagger UI), ``GET /redoc`` (ReDoc): the OpenAPI document at
  ``/openapi.json``, with their JavaScript and CSS served by this app (works offline, see
  :mod:`serving.api.docs`).

Errors: unknown view / key -> 404 (the view message lists the known views); a malformed time
-> 422 naming the accepted formats, another invalid parameter (``limit=0``) -> 422; ``from >
to`` or a malformed ``cursor`` -> 400. Bodies are ``{"detail": str}`` (``ErrorResponse``), declared in the OpenAPI
document for every code each route returns.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from serving.api.docs import add_offline_docs
from serving.api.keysearch import MAX_QUERY_LENGTH, search_keys
from serving.api.paging import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor, next_link
from serving.api.times import ACCEPTED_TIME_FORMATS, TIME_PATTERN, ms_to_iso, parse_time_ms
from serving.errors import InvalidCursorError, InvalidTimeError, ServingError, UnknownKeyError, UnknownViewError
from serving.quality.suite import QualityResult, load_results
from serving.views.batch import read_batch_watermark
from serving.views.index import ViewIndex
from serving.views.live import LiveViews
from serving.views.model import ViewSpec
from serving.views.served import ServedViews

if TYPE_CHECKING:
    from serving.api.pages import About

__all__ = ["create_app", "serve"]

log = logging.getLogger(__name__)


# -- response models ----------------------------------------------------------------------------
class ErrorResponse(BaseModel):
    """An error body."""

    detail: str


class WindowModel(BaseModel):
    """Window definition of a windowed view (ms; fields that do not apply are null)."""

    kind: Literal["tumbling", "hopping", "session"]
    size_ms: int | None = Field(None, description="window size (tumbling/hopping)")
    advance_ms: int | None = Field(None, description="hop (hopping; = size for tumbling)")
    grace_ms: int = Field(0, description="grace period after the window end")
    gap_ms: int | None = Field(None, description="inactivity gap (session)")


class ViewInfo(BaseModel):
    """A served view."""

    name: str
    windowed: bool
    window: WindowModel | None
    rows: int = Field(description="number of rows")
    keys: int = Field(description="number of distinct keys")
    version: int = Field(description="Delta version of <lake>/serving/<view> being served")


class ViewsResponse(BaseModel):
    views: list[ViewInfo]


class SpeedViewState(BaseModel):
    """What serving has read of a view's output topic (docs/live-serving.md)."""

    stream_time_ms: int | None = Field(description="the largest record timestamp read, epoch ms")
    stream_time: str | None
    caught_up: bool = Field(description="whether the topic was read to its end offsets once")
    rows: int = Field(description="rows held (RocksDB's estimate): the windows open at the batch watermark")


class HealthResponse(BaseModel):
    status: Literal["ok"]
    views: int = Field(description="number of served views")
    batch_watermark_ms: int | None = Field(description="batch watermark, epoch ms (null: no batch yet)")
    batch_watermark: str | None = Field(description="batch watermark, ISO-8601 UTC")
    speed: dict[str, SpeedViewState] | None = Field(
        None, description="serving live (with a broker): per view, what was read from its output topic; null: "
        "the published views alone")
    speed_error: str | None = Field(None, description="the last error reading the view topics (null: none)")
    speed_skipped: int | None = Field(
        None, description="view topic records skipped since the start as breaking the contract (docs/contracts.md)")


class Row(BaseModel):
    """One row of a view: a key (and window) with its aggregate."""

    key: str
    window_start: int | None = Field(description="epoch ms, null when not windowed")
    window_end: int | None = Field(description="epoch ms, null when not windowed")
    window_start_iso: str | None
    window_end_iso: str | None
    value: Any = Field(description="the aggregate (parsed JSON)")
    timestamp: int = Field(description="row timestamp, epoch ms")
    timestamp_iso: str
    source: Literal["batch", "speed"] | None = Field(description="which layer produced the row")


class KeyRowsResponse(BaseModel):
    """A page of a key's rows, ordered by ``window_start`` then ``window_end``: the batch
    snapshot up to its watermark merged with the speed layer's current rows after it."""

    view: str
    key: str
    from_ms: int | None = Field(None, description="the 'from' bound, epoch ms (null: none)")
    to_ms: int | None = Field(None, description="the 'to' bound, epoch ms (null: none)")
    limit: int = Field(description="the most rows a page holds (the request's limit)")
    rows: list[Row]
    next_cursor: str | None = Field(
        description="pass as 'cursor' (same view, key, from, to) for the next page; null on the last page")
    version: int = Field(description="Delta version of <lake>/serving/<view> answered from")
    batch_watermark_ms: int | None = Field(
        description="the batch watermark that version was merged at, epoch ms: windows closed at it come "
        "from the batch layer (null: no batch)")
    batch_watermark: str | None = Field(description="the batch watermark, ISO-8601 UTC")
    speed_stream_time_ms: int | None = Field(
        description="the largest record timestamp read from the view's output topic, epoch ms (null: none "
        "read, or serving without a broker)")
    speed_stream_time: str | None = Field(description="the speed stream time, ISO-8601 UTC")
    live: bool = Field(description="whether the speed layer's current rows are merged in (serving with a "
                       "broker and the view topic read to its end once)")


class KeysResponse(BaseModel):
    view: str
    total: int = Field(description="total number of keys (with q: of the keys matching it)")
    offset: int
    limit: int
    keys: list[str]


# Every error body is ``{"detail": str}`` (the exception handlers of ``create_app``), so every
# error code a route can return is declared with :class:`ErrorResponse` -- a 422 included:
# FastAPI's default 422 schema (``HTTPValidationError``, ``detail`` a list) is not what the
# validation handler returns, so each route with parameters overrides it
_NOT_FOUND = {404: {"model": ErrorResponse, "description": "unknown view or key"}}
_INVALID = {422: {"model": ErrorResponse, "description": "invalid parameter"}}
_BAD_TIME = {
    400: {"model": ErrorResponse, "description": "from > to, or a malformed cursor"},
    422: {"model": ErrorResponse, "description": "malformed time bound or invalid parameter (limit out of range)"},
}
_NEXT_LINK = {200: {"headers": {"Link": {
    "description": 'the next page, RFC 8288: `<url>; rel="next"` (absent on the last page)',
    "schema": {"type": "string"}}}}}


def _view_info(index: ViewIndex, name: str) -> ViewInfo:
    snap = index.snapshot(name)
    spec: ViewSpec = snap.spec
    window = None
    if spec.window_kind is not None:
        window = WindowModel(kind=spec.window_kind, size_ms=spec.size_ms, advance_ms=spec.advance_ms,
                             grace_ms=spec.grace_ms, gap_ms=spec.gap_ms)
    return ViewInfo(name=name, windowed=spec.windowed, window=window, rows=snap.rows,
                    keys=len(snap.ranges), version=snap.version)


_LONG_DIGITS = re.compile(r"[0-9]{19}")


def _parse_value(text: str | None) -> Any:
    """A stored value (JSON text) parsed as ``json.loads`` does; by orjson (8x faster) unless
    the text has 19 digits in a row (orjson reads an integer beyond 64 bits as a float) or
    orjson rejects it (NaN, Infinity); text that is not JSON as it is."""
    if text is None:
        return None
    if _LONG_DIGITS.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _json_response(doc: dict[str, Any]) -> Response:
    """``doc`` as an ``application/json`` response, encoded by orjson (by ``json`` when it
    holds what orjson rejects: an integer beyond 64 bits)."""
    try:
        body = orjson.dumps(doc)
    except TypeError:
        body = json.dumps(doc, separators=(",", ":")).encode()
    return Response(content=body, media_type="application/json")


def _validation_message(exc: RequestValidationError) -> str:
    """One readable line for FastAPI's validation errors (``{"detail": str}`` like every other
    error of this API)."""
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x not in ("query", "path", "body")]
        name = loc[-1] if loc else "request"
        if name in ("from", "to"):
            parts.append(f"invalid {name!r} value {err.get('input')!r}: expected {ACCEPTED_TIME_FORMATS}")
        else:
            parts.append(f"invalid {name!r}: {err.get('msg', 'invalid value')}")
    return "; ".join(parts) or "invalid request"


def _bound(text: str | None, name: str) -> int | None:
    return None if text is None or text == "" else parse_time_ms(text, name)


def create_app(lake: Path | str, refresh_interval_s: float = 5.0, about: About | None = None,
               bootstrap: str | None = None, live_dir: Path | str | None = None) -> FastAPI:
    """Build the API over ``<lake>`` (reads ``serving/``, ``views/_batch.json``, ``quality/``).

    Args:
        lake: the lake root.
        refresh_interval_s: how often (s, at most) the index checks for new Delta versions.
        about: the pipeline's name and description and its views' descriptions, shown by the
            index page ``/ui`` (:class:`serving.api.pages.About`); none: the views' names only.
        bootstrap: Kafka bootstrap servers: each answer merges the speed layer's current rows,
            read from the view output topics (:class:`~serving.views.live.LiveViews`, started
            at the app's startup, stopped at its shutdown); ``None``: the published snapshots
            alone.
        live_dir: the base folder of the live table's RocksDB stores (default
            ``$DUET_SERVING_LIVE_DIR``, else ``<duet_home>/state/serving-live``;
            :mod:`serving.views.live_dir`): this process's folder below it is removed at the
            app's shutdown, and a folder a crashed process left at the next start.
    """
    from batch_layer.delta.storage import is_object_store

    lake = lake if is_object_store(lake) else Path(lake)  # s3://bucket/prefix: read with delta-rs and pyarrow
    index = ViewIndex(lake, refresh_interval_s=refresh_interval_s)
    served = ServedViews(index)
    if bootstrap is not None:
        served.live = LiveViews(bootstrap, served.served, state_dir=live_dir)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if served.live is not None:
            served.live.start()
        try:
            yield
        finally:
            if served.live is not None:
                served.live.close()

    app = FastAPI(
        lifespan=lifespan,
        title="duet serving",
        version="0.1.0",
        description="Merged lambda-architecture views: batch results for closed windows, "
        "speed results for the fresh edge.",
        docs_url=None,  # served from local assets by add_offline_docs, not from a CDN
        redoc_url=None,
    )
    add_offline_docs(app)
    app.state.index = index
    app.state.served = served
    app.state.lake = lake

    @app.exception_handler(UnknownViewError)
    async def _unknown_view(_: Request, exc: UnknownViewError) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(UnknownKeyError)
    async def _unknown_key(_: Request, exc: UnknownKeyError) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": _validation_message(exc)})

    @app.exception_handler(InvalidCursorError)
    async def _bad_cursor(_: Request, exc: InvalidCursorError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.exception_handler(InvalidTimeError)
    async def _bad_time(_: Request, exc: InvalidTimeError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.get("/health", response_model=HealthResponse, tags=["meta"])
    def health() -> HealthResponse:
        """Liveness plus the number of served views and the batch watermark."""
        try:
            wm = read_batch_watermark(lake)
        except ServingError:  # a malformed _batch.json must not make the service look down
            log.exception("cannot read the batch watermark of %s", lake)
            wm = None
        speed, skipped = None, None
        errors = set()
        if served.live is not None:
            speed = {}
            for name in index.views():
                state = served.live.state(name)
                speed[name] = SpeedViewState(stream_time_ms=state.stream_time_ms,
                                             stream_time=ms_to_iso(state.stream_time_ms),
                                             caught_up=state.caught_up, rows=state.rows)
                errors.add(state.error)
                skipped = state.skipped
        return HealthResponse(status="ok", views=len(index.views()), batch_watermark_ms=wm,
                              batch_watermark=ms_to_iso(wm), speed=speed,
                              speed_error=next((e for e in errors if e), None), speed_skipped=skipped)

    @app.get("/views", response_model=ViewsResponse, tags=["views"])
    def views() -> ViewsResponse:
        """Every served view with its spec, size and Delta version."""
        return ViewsResponse(views=[_view_info(index, v) for v in index.views()])

    @app.get("/views/{view}", response_model=ViewInfo, responses={**_NOT_FOUND, **_INVALID}, tags=["views"])
    def view(view: str) -> ViewInfo:
        """One served view."""
        return _view_info(index, view)

    @app.get("/views/{view}/keys", response_model=KeysResponse, responses={**_NOT_FOUND, **_INVALID},
             tags=["views"])
    def keys(
        view: str,
        limit: int = Query(1000, ge=1, le=100_000, description="max keys returned"),
        offset: int = Query(0, ge=0, description="keys to skip (sorted order)"),
        q: str | None = Query(None, max_length=MAX_QUERY_LENGTH,
                              description="search: only the keys containing this text, ignoring case; "
                              "those starting with it first, then the others, each in sorted order"),
    ) -> KeysResponse:
        """The sorted keys of a view, paginated; with ``q``, the keys matching it (``total``
        counts the matches)."""
        if not q:
            listed = served.keys(view)
            return KeysResponse(view=view, total=len(listed), offset=offset, limit=limit,
                                keys=listed[offset:offset + limit])
        total, found = search_keys(served.keys(view), q, limit=limit, offset=offset)
        return KeysResponse(view=view, total=total, offset=offset, limit=limit, keys=found)

    @app.get(
        "/views/{view}/keys/{key:path}",
        response_model=KeyRowsResponse,
        responses={**_NEXT_LINK, **_NOT_FOUND, **_BAD_TIME},
        tags=["views"],
    )
    def key_rows(
        request: Request,
        view: str,
        key: str,
        from_: str | None = Query(None, alias="from", pattern=TIME_PATTERN,
                                  description=f"lower bound: {ACCEPTED_TIME_FORMATS}"),
        to: str | None = Query(None, pattern=TIME_PATTERN, description=f"upper bound: {ACCEPTED_TIME_FORMATS}"),
        limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="the most rows in this page"),
        cursor: str | None = Query(None, description="the next_cursor of the previous page (opaque); "
                                   "omitted: the first page"),
    ) -> Response:
        """A page of the rows of ``key`` whose window overlaps ``[from, to]`` (ignored for
        tables), ordered by window start then end, as :class:`KeyRowsResponse`: at most
        ``limit`` rows after ``cursor``. Following ``next_cursor`` (or the ``Link`` header)
        until it is null reads every row once. The body is encoded here, not validated row
        by row through the model."""
        from_ms = _bound(from_, "from")
        to_ms = _bound(to, "to")
        if from_ms is not None and to_ms is not None and from_ms > to_ms:
            raise HTTPException(
                status_code=400,
                detail=f"'from' ({from_ms} ms, {ms_to_iso(from_ms)}) is after "
                f"'to' ({to_ms} ms, {ms_to_iso(to_ms)})",
            )
        after = None if not cursor else decode_cursor(cursor)  # empty: none, as from/to
        page = served.page(view, key, from_ms, to_ms, after=after, limit=limit)
        iso_of: dict[int | None, str | None] = {}  # window bounds repeat: a window's end is a later one's start

        def iso(ms: int | None) -> str | None:
            text = iso_of.get(ms, "")
            if text == "":
                text = iso_of[ms] = ms_to_iso(ms)
            return text

        rows = [
            {
                "key": r["key"],
                "window_start": r["window_start"],
                "window_end": r["window_end"],
                "window_start_iso": iso(r["window_start"]),
                "window_end_iso": iso(r["window_end"]),
                "value": _parse_value(r["value"]),
                "timestamp": r["timestamp"],
                "timestamp_iso": ms_to_iso(r["timestamp"]) or "",
                "source": r["source"],
            }
            for r in page.rows
        ]
        next_cursor = None if page.next is None else encode_cursor(page.next)
        stream_ms = None if page.speed is None else page.speed.stream_time_ms
        response = _json_response({"view": view, "key": key, "from_ms": from_ms, "to_ms": to_ms, "limit": limit,
                                   "rows": rows, "next_cursor": next_cursor, "version": page.version,
                                   "batch_watermark_ms": page.batch_watermark_ms,
                                   "batch_watermark": ms_to_iso(page.batch_watermark_ms),
                                   "speed_stream_time_ms": stream_ms, "speed_stream_time": ms_to_iso(stream_ms),
                                   "live": page.speed is not None and page.speed.caught_up})
        if next_cursor is not None:
            response.headers["Link"] = next_link(str(request.url.include_query_params(cursor=next_cursor)))
        return response

    @app.get("/quality", response_model=dict[str, QualityResult], tags=["quality"])
    def quality() -> dict[str, QualityResult]:
        """The stored Great Expectations results (``<lake>/quality/<view>.json``) by view."""
        return load_results(lake)

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> RedirectResponse:
        """The browser's landing page is the UI."""
        return RedirectResponse(request.scope.get("root_path", "") + "/ui")

    from serving.api.pages import pages_router

    from serving.api.edge import edge_router

    app.include_router(pages_router(index, lake, about, served))
    app.include_router(edge_router(served))
    return app


def serve(lake: Path | str, host: str = "127.0.0.1", port: int = 8000,
          refresh_interval_s: float = 5.0, log_level: str = "info", about: About | None = None,
          bootstrap: str | None = None, live_dir: Path | str | None = None) -> None:
    """Run the API with uvicorn (blocking) on ``host:port`` (``about``, ``bootstrap``,
    ``live_dir``: see :func:`create_app`)."""
    import uvicorn

    uvicorn.run(create_app(lake, refresh_interval_s=refresh_interval_s, about=about, bootstrap=bootstrap,
                           live_dir=live_dir),
                host=host, port=port, log_level=log_level)
