"""The serving API under schemathesis (all checks) on a published lake: no server error, every
response conforms to the OpenAPI schema, bad input gets a 4xx. Also path traversal attempts
in view and key names, and the default bind address of ``duet serve``."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from hypothesis import HealthCheck, given, settings

from serving.api.app import create_app

MAX_EXAMPLES = 60


def test_api_conforms_and_never_errors(lake_with_quality: Path) -> None:
    """Every operation of the OpenAPI schema, ``MAX_EXAMPLES`` generated requests each (valid
    and invalid), under all of schemathesis' checks (no 5xx, responses match the schema,
    bad input rejected with a 4xx...)."""
    app = create_app(lake_with_quality, refresh_interval_s=0)
    # one constraint OpenAPI cannot state: ``from`` after ``to`` is a 400 (documented in the
    # operation's responses); every other check runs with schemathesis' defaults
    config = SchemathesisConfig.from_dict({"checks": {"positive_data_acceptance": {
        "expected-statuses": ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]}}})
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 6
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case: object) -> None:
            case.call_and_validate()

        fuzz()


@pytest.mark.parametrize(
    "path",
    [
        "/views/..%2F..%2Fetc%2Fpasswd",
        "/views/../../etc/passwd",
        "/views/%2e%2e/keys",
        "/views/dep_counts/keys/..%2F..%2F..%2Fetc%2Fpasswd",
        "/views/dep_counts/keys/../../../../etc/passwd",
        "/views/..%5C..%5Cwindows/keys/x",
        "/ui/views/..%2F..%2F_views.json",
        "/views/_views.json",
        "/views/dep_counts%00/keys",
    ],
)
def test_path_traversal_in_view_and_key_names_gets_a_4xx(lake_with_quality: Path, path: str) -> None:
    from fastapi.testclient import TestClient

    with TestClient(create_app(lake_with_quality, refresh_interval_s=0)) as client:
        res = client.get(path)
    assert 400 <= res.status_code < 500, (path, res.status_code, res.text[:200])
    assert "root:" not in res.text


def test_duet_serve_binds_loopback_by_default() -> None:
    from pipelines.cli.serving_commands import serve
    from serving.api.app import serve as serve_app

    assert inspect.signature(serve_app).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
