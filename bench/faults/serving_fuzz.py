"""The serving API under schemathesis, all checks, on a published lake; prints the figures.

    .venv/bin/python -m bench.faults.serving_fuzz [--examples 500]

For every operation of the OpenAPI schema, ``--examples`` generated requests (valid and
schema-violating) go through every schemathesis check (no server error, responses conform to
the schema, invalid input rejected, valid input accepted; ``from`` after ``to`` is the one
documented 400). Then path-traversal attempts in view and key names. Prints, per operation,
the requests sent, the status codes seen and the failures; exits 1 on any failure.
``tests/test_serving/test_serving_fuzz.py`` is the small version run by ``make test``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

TRAVERSALS = [
    "/views/..%2F..%2Fetc%2Fpasswd", "/views/../../etc/passwd", "/views/%2e%2e/keys",
    "/views/dep_counts/keys/..%2F..%2F..%2Fetc%2Fpasswd", "/views/dep_counts/keys/../../../../etc/passwd",
    "/views/..%5C..%5Cwindows/keys/x", "/ui/views/..%2F..%2F_views.json", "/views/_views.json",
    "/views/dep_counts%00/keys", "/ui/views/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
]


def build_lake(root: Path) -> Path:
    """A lake with a tumbling, a session and a table view, a watermark and a GX result."""
    from serving.quality import run_suite, save_result, standard_expectations
    from serving.views import ViewSpec, publish

    t0, hour = 1356998400000, 3_600_000
    spec = ViewSpec.tumbling("dep_counts", hour, grace_ms=600_000)
    sessions = ViewSpec.session("sessions", gap_ms=1_800_000)
    table = ViewSpec.table("latest")
    import pandas as pd

    def frame(rows: list[tuple]) -> pd.DataFrame:
        return pd.DataFrame([(k, s, e, json.dumps(v), ts) for k, s, e, v, ts in rows],
                            columns=["key", "window_start", "window_end", "value", "timestamp"])

    batch = {"dep_counts": frame([(k, t0 + h * hour, t0 + (h + 1) * hour, {"count": h}, t0 + h * hour)
                                  for h in range(48) for k in ("EWR", "JFK", "a/b", "ü ", "%2F")]),
             "sessions": frame([("N1", t0, t0 + hour, {"n": 3}, t0 + hour)]),
             "latest": frame([("UA", None, None, {"name": "United"}, t0)])}
    publish(root, [spec, sessions, table], batch, {}, t0 + 40 * hour)
    (root / "views").mkdir(parents=True, exist_ok=True)
    (root / "views" / "_batch.json").write_text(json.dumps({"watermark_ms": t0 + 40 * hour}))
    from deltalake import DeltaTable

    df = DeltaTable(str(root / "serving" / "dep_counts")).to_pyarrow_table().to_pandas()
    save_result(root, run_suite("dep_counts", df, standard_expectations(spec, {"count": (0, None)})))
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="generated requests per operation")
    args = parser.parse_args()

    import schemathesis
    from fastapi.testclient import TestClient
    from hypothesis import HealthCheck, given, settings
    from schemathesis.config import SchemathesisConfig

    from serving.api.app import create_app

    lake = build_lake(Path(tempfile.mkdtemp(prefix="duet-fuzz-")) / "lake")
    app = create_app(lake, refresh_interval_s=0)
    config = SchemathesisConfig.from_dict({"checks": {"positive_data_acceptance": {
        "expected-statuses": ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]}}})
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    statuses: dict[str, collections.Counter[int]] = {}
    failures: dict[str, str] = {}
    for result in schema.get_all_operations():
        op = result.ok()
        seen = statuses.setdefault(op.label, collections.Counter())

        @given(case=op.as_strategy())
        @settings(max_examples=args.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def fuzz(case: object) -> None:
            response = case.call()  # type: ignore[attr-defined]
            seen[response.status_code] += 1
            case.validate_response(response)  # type: ignore[attr-defined]

        try:
            fuzz()
        except Exception as exc:  # a failure is a figure: print it, exit 1
            failures[op.label] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    with TestClient(app) as client:
        traversal = {path: client.get(path).status_code for path in TRAVERSALS}

    print(f"{'operation':45} {'requests':>8}  statuses")
    for label, seen in statuses.items():
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(seen.items()))
        print(f"{label:45} {sum(seen.values()):8}  {codes}  {'FAILED: ' + failures[label] if label in failures else ''}")
    server_errors = sum(n for seen in statuses.values() for c, n in seen.items() if c >= 500)
    bad_traversals = {p: c for p, c in traversal.items() if not 400 <= c < 500}
    print(f"requests {sum(sum(s.values()) for s in statuses.values())}, server errors {server_errors}, "
          f"failed operations {len(failures)}, path traversals {len(traversal)} -> all 4xx: {not bad_traversals}")
    from pipelines.cli.serving_commands import serve

    import inspect

    print(f"duet serve binds {inspect.signature(serve).parameters['host'].default} by default")
    return 1 if failures or server_errors or bad_traversals else 0


if __name__ == "__main__":
    sys.exit(main())
