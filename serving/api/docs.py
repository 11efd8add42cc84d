"""The API's documentation pages, served offline: Swagger UI at ``/docs``, ReDoc at ``/redoc``.

FastAPI's default ``/docs`` and ``/redoc`` load Swagger UI and ReDoc from a CDN (and ReDoc's
fonts from Google Fonts), so they are blank on a host without internet. This module follows
FastAPI's "Self-hosting JavaScript and CSS for docs": the app is built with
``docs_url=None, redoc_url=None``, the assets are mounted with ``StaticFiles`` from the PyPI
package ``fastapi-offline`` (which ships ``swagger-ui-bundle.js``, ``swagger-ui.css``,
``redoc.standalone.js`` and a favicon, refreshed from the upstream releases), and the two
pages are rendered by ``get_swagger_ui_html`` / ``get_redoc_html`` pointing at them. Nothing
on either page is fetched from another origin: no CDN, no web font, no online validator; and
both pages carry a Content-Security-Policy that keeps the browser on this origin (ReDoc's
sidebar shows a "Redocly" logo from ``cdn.redoc.ly`` that no option turns off: the policy
blocks it without a request, and ReDoc hides the image when it fails).

Routes added by :func:`add_offline_docs`:

* ``GET /docs``: Swagger UI over ``/openapi.json``.
* ``GET /docs/oauth2-redirect``: Swagger UI's OAuth2 redirect page.
* ``GET /redoc``: ReDoc over ``/openapi.json``.
* ``GET /static/docs/{file}``: the assets (``swagger-ui-bundle.js``, ``swagger-ui.css``,
  ``redoc.standalone.js``, ``favicon.png``); 404 for any other name.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_URL", "add_offline_docs", "docs_assets_dir"]

#: Where the Swagger UI and ReDoc assets are mounted.
ASSETS_URL = "/static/docs"
#: The files the pages load from :data:`ASSETS_URL`.
ASSET_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
#: The Content-Security-Policy of ``/docs`` and ``/redoc``: scripts, styles, images, fonts and
#: requests from this origin only (the pages' inline start-up script and the inline styles and
#: ``data:`` images both UIs use are allowed; ReDoc's search runs in a ``blob:`` worker).
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
            "object-src 'none'; base-uri 'self'; frame-ancestors 'self'")


def docs_assets_dir() -> Path:
    """The folder of the ``fastapi-offline`` package holding the Swagger UI and ReDoc assets.

    Raises:
        RuntimeError: if the package is missing or lacks one of :data:`ASSET_FILES` (a broken
            install: ``pip install -e .`` installs it).
    """
    try:
        folder = Path(str(importlib.resources.files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        raise RuntimeError("the offline API docs need the package fastapi-offline: "
                           "run `pip install -e .` (or `make setup`)") from None
    missing = [f for f in ASSET_FILES if not (folder / f).is_file()]
    if missing:
        raise RuntimeError(f"fastapi-offline at {folder} lacks {', '.join(missing)}: reinstall it")
    return folder


def _same_origin(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = DOCS_CSP
    return page


def add_offline_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) on ``app`` from local assets.

    ``app`` must have been built with ``docs_url=None, redoc_url=None`` (else FastAPI's CDN
    pages would answer first). URLs honour the ASGI ``root_path`` (behind a proxy prefix).

    Raises:
        ValueError: ``app`` serves FastAPI's own docs pages.
        RuntimeError: see :func:`docs_assets_dir`.
    """
    if app.docs_url is not None or app.redoc_url is not None:
        raise ValueError("build the FastAPI app with docs_url=None, redoc_url=None before add_offline_docs")
    app.mount(ASSETS_URL, StaticFiles(directory=docs_assets_dir()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _same_origin(get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=root + oauth2_redirect_url,
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            # no badge from the online validator (a request to validator.swagger.io)
            swagger_ui_parameters={**(app.swagger_ui_parameters or {}), "validatorUrl": None},
        ))

    @app.get(oauth2_redirect_url, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _same_origin(get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        ))
