"""Interactive queries of the speed layer's stores over HTTP, from any instance.

An instance of a streams application serves :func:`interactive_router` at its
``application.server``. A request for a key is answered locally when this instance's tasks
host the key (``KafkaStreams.query_metadata_for_key``), otherwise forwarded once to the
owner, as Kafka Streams' interactive-query examples do (the RPC layer is the application's).

* ``GET /speed/instances``: every instance, its stores and partitions.
* ``GET /speed/stores/{store}/keys/{key}?from=&to=``: the key's value (key-value store), its
  windows (window store, ``from``/``to`` in epoch ms, default all) or sessions (session store),
  with the instance that answered.

Keys are strings (the store's key serde must take a ``str``). Errors: unknown store -> 404;
no instance owns the key's partition yet (a rebalance) -> 503 with ``Retry-After``; the owner
cannot be reached -> 502. Bodies are ``{"detail": str}``.
"""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import APIRouter, HTTPException, Query, Request, Response

__all__ = ["interactive_router", "FORWARDED_HEADER"]

#: Set on a forwarded request: the receiver answers locally or fails, never forwards again.
FORWARDED_HEADER = "X-Duet-Forwarded-By"


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v


def _local_answer(streams: Any, store: str, key: str, from_ms: int | None, to_ms: int | None) -> dict[str, Any]:
    kind = streams.topology.stores[store].kind
    view = streams.store(store)
    if kind == "window":
        rows = view.fetch(key, from_ms if from_ms is not None else 0, to_ms if to_ms is not None else 2**62)
        return {"windows": [{"start": int(ws), "value": _jsonable(v)} for ws, v in rows]}
    if kind == "session":
        rows = view.fetch(key)
        return {"sessions": [{"start": w.window.start, "end": w.window.end, "value": _jsonable(v)} for w, v in rows]}
    return {"value": _jsonable(view.get(key))}


def interactive_router(streams: Any, timeout_s: float = 10.0) -> APIRouter:
    """Routes over ``streams`` (a started ``KafkaStreams`` with ``application.server`` set to
    the address this router is served at)."""
    from speed_layer.errors import InvalidStateStoreException, StreamsException

    router = APIRouter(prefix="/speed", tags=["speed layer"])
    me = streams.config.application_server

    @router.get("/instances")
    def instances() -> list[dict[str, Any]]:
        """Every instance of the application with its stores and source partitions."""
        try:
            metadata = streams.streams_metadata()
        except StreamsException as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from None
        return [{"host": str(m.host_info), "stores": sorted(m.state_store_names),
                 "partitions": sorted([t, p] for t, p in m.topic_partitions)} for m in metadata]

    @router.get("/stores/{store}/keys/{key:path}")
    def key_value(
        request: Request,
        response: Response,
        store: str,
        key: str,
        from_: int | None = Query(None, alias="from", ge=0, le=2**62, description="window stores: epoch ms"),
        to: int | None = Query(None, ge=0, le=2**62, description="window stores: epoch ms"),
    ) -> dict[str, Any]:
        """The key's value, windows or sessions, from the instance that hosts it."""
        if store not in streams.topology.stores:
            raise HTTPException(status_code=404, detail=f"unknown store {store!r}; stores: "
                                f"{', '.join(sorted(streams.topology.stores))}")
        try:
            if store in streams.global_stores:
                owner = me
                partition = None
            else:
                meta = streams.query_metadata_for_key(store, key)
                owner, partition = str(meta.active_host), meta.partition
                if not meta.available:
                    response.headers["Retry-After"] = "1"
                    raise HTTPException(status_code=503, detail=f"no instance hosts partition {partition} of "
                                        f"{store!r} right now (rebalancing); retry")
            if owner != me:
                if request.headers.get(FORWARDED_HEADER):
                    raise HTTPException(status_code=503, detail=f"{me} does not host {key!r} of {store!r} "
                                        f"(owner {owner}): the assignment is moving; retry")
                return _forward(owner, store, key, request, me, timeout_s)
            answer = _local_answer(streams, store, key, from_, to)
        except (InvalidStateStoreException, StreamsException) as exc:
            response.headers["Retry-After"] = "1"
            raise HTTPException(status_code=503, detail=str(exc)) from None
        return {"store": store, "key": key, "host": me, "partition": partition, **answer}

    return router


def _forward(owner: str, store: str, key: str, request: Request, me: str, timeout_s: float) -> dict[str, Any]:
    from urllib.parse import quote

    url = f"http://{owner}/speed/stores/{quote(store, safe='')}/keys/{quote(key, safe='')}"
    try:
        res = httpx.get(url, params=dict(request.query_params), headers={FORWARDED_HEADER: me}, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise HTTPException(status_code=502, detail=f"the owner {owner} of {key!r} did not answer: {exc}") from None
    if res.status_code != 200:
        raise HTTPException(status_code=res.status_code if res.status_code < 500 else 502,
                            detail=f"the owner {owner} answered {res.status_code}: {res.text[:300]}")
    return dict(res.json())
