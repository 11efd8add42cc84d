"""A small client of the Dagster webserver's GraphQL API (the one ``duet ui`` starts): launch a
run of a partition, launch a partition backfill of the batch views, read their progress.

Used by ``duet backfill`` and by the tests that drive the UI. Queries follow Dagster 1.13's
schema (``launchRun``, ``launchPartitionBackfill``, ``partitionBackfillOrError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from pipelines.preflight import UserError

__all__ = ["DagsterClient", "DagsterClientError", "BackfillProgress", "LOCATION", "asset_path"]

#: The code location of ``workspace.yaml`` (and of ``duet ui``'s ``pipelines.dagster.workspace``).
LOCATION = "duet"
#: Final statuses of a backfill (Dagster's BulkActionStatus).
BACKFILL_DONE = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED", "FAILING"}


class DagsterClientError(UserError):
    """The webserver cannot be reached, or refused a request (the message says why)."""


@dataclass(frozen=True)
class BackfillProgress:
    """Where a backfill stands.

    Attributes:
        status: Dagster's BulkActionStatus (``REQUESTED`` while running, ``COMPLETED_SUCCESS``...).
        partitions: partitions targeted.
        materialized: asset partitions materialized so far (summed over the selected assets).
        failed: asset partitions failed so far.
        targeted: asset partitions targeted (partitions x selected assets).
        runs: ``[(run id, status)]`` of the backfill's runs.
    """

    status: str
    partitions: int
    materialized: int
    failed: int
    targeted: int
    runs: list[tuple[str, str]]

    @property
    def done(self) -> bool:
        return self.status in BACKFILL_DONE


class DagsterClient:
    """GraphQL client of the webserver at ``url`` (e.g. ``http://127.0.0.1:3000``)."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def query(self, query: str, **variables: Any) -> dict[str, Any]:
        """Run ``query``; return its ``data``.

        Raises:
            DagsterClientError: no webserver answers at the URL, or the query has errors.
        """
        try:
            res = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables},
                             timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise DagsterClientError(f"no Dagster UI answers at {self.url} ({exc}); start it with `duet ui`") from None
        if res.status_code != 200:
            raise DagsterClientError(f"{self.url}/graphql answered HTTP {res.status_code}: {res.text[:300]}")
        body = res.json()
        if body.get("errors"):
            raise DagsterClientError("; ".join(e.get("message", str(e)) for e in body["errors"]))
        return body["data"]

    def launch_run(self, job: str, partition: str, run_config: dict[str, Any] | None = None) -> str:
        """Launch ``job`` for one partition; return the run id.

        Raises:
            DagsterClientError: the launch was refused (bad config, unknown job...).
        """
        data = self.query(
            """mutation Launch($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
                 ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
                 ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message }
                 ... on PipelineNotFoundError { message } } }""",
            p={"selector": {"repositoryLocationName": self.location_of(job), "repositoryName": "__repository__",
                            "jobName": job},
               "runConfigData": run_config or {},
               "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]}},
        )["launchRun"]
        if data["__typename"] != "LaunchRunSuccess":
            raise DagsterClientError(f"run of {job} refused: {_reason(data)}")
        return str(data["run"]["runId"])

    def location_of(self, job: str) -> str:
        """The code location holding ``job``: ``duet`` under ``workspace.yaml``, the module's
        name under ``dagster dev -m`` (``pipelines.dagster.workspace``); :data:`LOCATION`
        when no loaded location has it (the launch then says the job is not found)."""
        data = self.query(
            """query { repositoriesOrError { __typename ... on RepositoryConnection {
                 nodes { name location { name } jobs { name } } } } }"""
        )["repositoriesOrError"]
        for repo in data.get("nodes") or []:
            if any(j["name"] == job for j in repo["jobs"]):
                return str(repo["location"]["name"])
        return LOCATION

    def run_status(self, run_id: str) -> str:
        """Dagster's run status (``QUEUED``, ``STARTED``, ``SUCCESS``, ``FAILURE``...)."""
        return str(self.query("query R($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                              id=run_id)["runOrError"]["status"])

    def launch_backfill(self, asset_keys: Sequence[Any], partitions: list[str], title: str | None = None) -> str:
        """Launch a backfill of ``asset_keys`` over ``partitions``; return the backfill id.

        ``asset_keys``: ``dagster.AssetKey`` s, paths (``["shop", "view_conversions_hourly"]``)
        or user strings (``"shop/view_conversions_hourly"``); the mutation takes each as an
        ``AssetKeyInput`` ``{path: [...]}``. The assets must share one partitions definition
        (one pipeline's batch views).

        Raises:
            DagsterClientError: the backfill was refused.
        """
        data = self.query(
            """mutation B($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) { __typename
                 ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
                 ... on PartitionSetNotFoundError { message } ... on InvalidStepError { invalidStepKey }
                 ... on InvalidOutputError { invalidOutputName } ... on UnauthorizedError { message } } }""",
            p={"partitionNames": partitions, "assetSelection": [{"path": asset_path(k)} for k in asset_keys],
               **({"title": title} if title else {})},
        )["launchPartitionBackfill"]
        if data["__typename"] != "LaunchBackfillSuccess":
            raise DagsterClientError(f"backfill refused: {_reason(data)}")
        return str(data["backfillId"])

    def backfill_progress(self, backfill_id: str) -> BackfillProgress:
        """The progress of a backfill."""
        bf = self.query(
            """query B($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
                 ... on PartitionBackfill { status numPartitions runs(limit: 100) { runId status }
                   assetBackfillData { assetBackfillStatuses { ... on AssetPartitionsStatusCounts {
                     numPartitionsTargeted numPartitionsMaterialized numPartitionsFailed } } } }
                 ... on BackfillNotFoundError { message } ... on PythonError { message } } }""",
            id=backfill_id,
        )["partitionBackfillOrError"]
        if bf["__typename"] != "PartitionBackfill":
            raise DagsterClientError(f"backfill {backfill_id}: {_reason(bf)}")
        counts = [c for c in ((bf.get("assetBackfillData") or {}).get("assetBackfillStatuses") or []) if c]
        return BackfillProgress(
            status=bf["status"], partitions=int(bf["numPartitions"] or 0),
            materialized=sum(c["numPartitionsMaterialized"] for c in counts),
            failed=sum(c["numPartitionsFailed"] for c in counts),
            targeted=sum(c["numPartitionsTargeted"] for c in counts),
            runs=[(r["runId"], r["status"]) for r in bf["runs"]],
        )


def asset_path(key: Any) -> list[str]:
    """The path of an asset key: a ``dagster.AssetKey`` (its ``path``), a sequence of parts, or
    a user string ``a/b`` (split at ``/``).

    >>> asset_path("shop/view_conversions_hourly"), asset_path(["shop", "raw_clicks"])
    (['shop', 'view_conversions_hourly'], ['shop', 'raw_clicks'])
    """
    if isinstance(key, str):
        return key.split("/")
    path = getattr(key, "path", key)  # dagster.AssetKey, without importing dagster
    parts = [str(p) for p in path]
    if not parts:
        raise ValueError(f"empty asset key {key!r}")
    return parts


def _reason(data: dict[str, Any]) -> str:
    if data.get("message"):
        return str(data["message"])
    if data.get("errors"):
        return "; ".join(e["message"] for e in data["errors"])
    return str(data)
