"""Every error response of the serving API matches the OpenAPI document (issue 25, item 7).

For each route, the codes the app actually returns (400, 404, 422) are declared in the
operation's ``responses``, and the bodies (``{"detail": str}``, the app's exception
handlers) validate against the declared schema with ``jsonschema``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from serving.api.app import create_app


@pytest.fixture
def client_and_doc(lake: Path) -> tuple[TestClient, dict[str, Any]]:
    app = create_app(lake, refresh_interval_s=0)
    return TestClient(app), app.openapi()


def _schema(doc: dict[str, Any], template: str, code: int) -> dict[str, Any]:
    responses = doc["paths"][template]["get"]["responses"]
    assert str(code) in responses, f"GET {template}: {code} not declared (declared: {sorted(responses)})"
    schema = responses[str(code)]["content"]["application/json"]["schema"]
    # resolve "#/components/schemas/..." references against the whole document
    return {**schema, "components": doc["components"]}


def _key(client: TestClient) -> str:
    keys = client.get("/views/dep_counts/keys").json()["keys"]
    assert keys
    return keys[0]


# (OpenAPI path template, request path (KEY: a key of dep_counts), expected status)
CASES = [
    ("/views/{view}", "/views/no_such_view", 404),
    ("/views/{view}/keys", "/views/no_such_view/keys", 404),
    ("/views/{view}/keys", "/views/dep_counts/keys?limit=0", 422),
    ("/views/{view}/keys", "/views/dep_counts/keys?offset=-1", 422),
    ("/views/{view}/keys", "/views/dep_counts/keys?limit=abc", 422),
    ("/views/{view}/keys/{key}", "/views/no_such_view/keys/x", 404),
    ("/views/{view}/keys/{key}", "/views/dep_counts/keys/no-such-key", 404),
    ("/views/{view}/keys/{key}", "/views/dep_counts/keys/KEY?from=yesterday", 422),
    ("/views/{view}/keys/{key}", "/views/dep_counts/keys/KEY?from=2013-13-45T00:00:00", 422),
    ("/views/{view}/keys/{key}", "/views/dep_counts/keys/KEY?from=2013-01-02&to=2013-01-01", 400),
    ("/views/{view}/keys/{key}", "/views/dep_counts/keys/KEY?from=200&to=100", 400),
]


@pytest.mark.parametrize("template,path,status", CASES)
def test_error_bodies_validate_against_the_declared_schema(client_and_doc: Any, template: str, path: str,
                                                           status: int) -> None:
    client, doc = client_and_doc
    if "KEY" in path:
        path = path.replace("KEY", _key(client))
    r = client.get(path)
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body["detail"], str) and body["detail"]
    jsonschema.validate(body, _schema(doc, template, status))


def test_every_declared_error_is_the_detail_string_model(client_and_doc: Any) -> None:
    """No route keeps FastAPI's default 422 schema (``detail`` a list of errors), which the
    validation handler never returns; every 4xx of every route is ``ErrorResponse``."""
    _, doc = client_and_doc
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    for template, ops in doc["paths"].items():
        for code, resp in ops["get"]["responses"].items():
            if code.startswith("4"):
                assert resp["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorResponse"}, \
                    (template, code)
    error = {**doc["components"]["schemas"]["ErrorResponse"], "components": doc["components"]}
    with pytest.raises(jsonschema.ValidationError):  # the shape FastAPI would have returned
        jsonschema.validate({"detail": [{"loc": ["query", "limit"], "msg": "x", "type": "y"}]}, error)


def test_routes_with_parameters_declare_their_error_codes(client_and_doc: Any) -> None:
    _, doc = client_and_doc
    declared = {t: set(ops["get"]["responses"]) for t, ops in doc["paths"].items()}
    assert {"404", "422"} <= declared["/views/{view}"]
    assert {"404", "422"} <= declared["/views/{view}/keys"]
    assert {"400", "404", "422"} <= declared["/views/{view}/keys/{key}"]
    for t in ("/health", "/views", "/quality"):  # no parameters: only 200
        assert declared[t] == {"200"}
