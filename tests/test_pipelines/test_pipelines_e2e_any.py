"""Bring your own pipeline, end to end: ``duet run --pipeline`` on the shop example and on a
project freshly made by ``duet init``, then ``duet query`` and ``duet serve`` on what they
published. Real everything (the session's broker, the speed layer, Delta, Spark, GX, FastAPI),
the console script in a subprocess as a user runs it.

The acceptance criterion of each run: 100 % agreement of speed and batch on every compared
(closed) window and table key, comparisons not vacuous, every check passing, exit status 0.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

from pipelines_testkit import log_lines

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.timeout(1800)]

SHOP = "pipelines.examples.shop:pipeline"


def duet(*args: str, cwd: Path | None = None, bootstrap: str | None = None,
         timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "False", "PYSPARK_PYTHON": sys.executable}
    env.pop("DUET_PIPELINE", None)
    env.pop("DUET_LAKE", None)
    if bootstrap:
        env["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def run_json(*args: str, cwd: Path | None = None, bootstrap: str) -> tuple[subprocess.CompletedProcess[str],
                                                                           dict[str, Any], float]:
    t0 = time.monotonic()
    proc = duet("run", "--json", *args, cwd=cwd, bootstrap=bootstrap)
    seconds = time.monotonic() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"stdout must hold one JSON object, got:\n{proc.stdout}\nstderr:\n{proc.stderr[-5000:]}"
    print(f"duet run {' '.join(args)}: {seconds:.1f} s, phases {json.loads(lines[0])['phase_seconds']}")
    return proc, json.loads(lines[0]), seconds


def assert_one_answer(proc: subprocess.CompletedProcess[str], summary: dict[str, Any], views: set[str]) -> None:
    assert set(summary["windows"]) == views and all(n > 0 for n in summary["windows"].values()), summary["windows"]
    assert summary["checks"] == {v: True for v in views}, summary.get("check_failures")
    assert summary["agreement"] == {v: 1.0 for v in views}, summary.get("differences")
    assert summary["unexplained"] == {v: 0 for v in views}, summary.get("differences")
    assert all(summary["compared"][v] > 0 for v in views), summary["compared"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    # a quiet happy path (issue 44): one WARNING per dead-lettered record (the scaffold's sample has 3), nothing else
    assert log_lines(proc.stderr, summary["dead_lettered"]) == [], proc.stderr[-5000:]


@pytest.fixture(scope="module")
def shop_run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    root = tmp_path_factory.mktemp("shop") / "lake"
    proc, summary, _ = run_json("--pipeline", SHOP, "--lake", str(root), bootstrap=kafka_bootstrap)  # the whole month
    return proc, summary, root


def test_the_shop_example_runs_end_to_end(shop_run: tuple[Any, dict[str, Any], Path]) -> None:
    from pipelines.examples.shop import pipeline as shop

    proc, summary, root = shop_run
    assert summary["pipeline"] == "shop" and summary["lake"] == str(root / "shop")
    assert summary["records_in_by_topic"].keys() == set(shop.input_topics)
    assert summary["dropped_late"] > 0  # the sample's hours-late clicks: the exclusions are exercised
    assert summary["expired_join_drops"] == 0  # the join's grace covers them (docs/contracts.md)
    assert_one_answer(proc, summary, set(shop.view_names))
    # a table view (KGroupedTable aggregation) and windowed views are all served
    kinds = {spec.window_kind for spec in shop.view_specs.values()}
    assert None in kinds and "session" in kinds


def test_query_reads_the_shop_views(shop_run: tuple[Any, dict[str, Any], Path]) -> None:
    from pipelines.examples.shop import pipeline as shop

    _, _, root = shop_run
    listed = duet("query", "--pipeline", SHOP, "--list", "--json", "--lake", str(root))
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(listed.stdout)) == sorted(shop.view_names)
    for view in shop.view_names:
        keys = duet("query", view, "--pipeline", SHOP, "--json", "--limit", "3", "--lake", str(root))
        assert keys.returncode == 0, keys.stderr
        doc = json.loads(keys.stdout)
        assert doc["total"] > 0, view
        rows = duet("query", view, doc["keys"][0], "--pipeline", SHOP, "--json", "--lake", str(root))
        assert rows.returncode == 0 and json.loads(rows.stdout), (view, rows.stderr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_and_get(args: list[str], paths: list[str], cwd: Path | None = None) -> dict[str, tuple[int, bytes]]:
    """Start ``duet serve`` with ``args``, GET each path, stop it."""
    port = _free_port()
    env = {**os.environ}
    env.pop("DUET_PIPELINE", None)
    env.pop("DUET_LAKE", None)
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "serve", *args, "--port", str(port)], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"duet serve did not start: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.3)
        out = {}
        for path in paths:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as res:
                out[path] = (res.status, res.read())
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_serves_the_shop_views_and_their_pages(shop_run: tuple[Any, dict[str, Any], Path]) -> None:
    from pipelines.examples.shop import pipeline as shop

    _, _, root = shop_run
    paths = ["/views", "/quality", "/ui", *[f"/ui/views/{v}" for v in shop.view_names]]
    got = _serve_and_get(["--pipeline", SHOP, "--lake", str(root)], paths)
    assert all(status == 200 for status, _ in got.values()), {p: s for p, (s, _) in got.items()}
    views = json.loads(got["/views"][1])
    names = {v["name"] if isinstance(v, dict) else v for v in (views["views"] if isinstance(views, dict) else views)}
    assert names == set(shop.view_names)
    # the index page says what the pipeline and each view are, from the declaration (issue 44)
    index = got["/ui"][1].decode()
    assert "<h1>shop views</h1>" in index and escape(shop.description) in index
    for view in shop.views:
        assert f'<td class="description">{escape(view.description)}</td>' in index, view.store


@pytest.fixture(scope="module")
def scaffold_run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    project = tmp_path_factory.mktemp("scaffold") / "greenhouse"
    init = duet("init", str(project))
    assert init.returncode == 0, init.stderr
    proc, summary, _ = run_json(cwd=project, bootstrap=kafka_bootstrap)  # [tool.duet] names the pipeline
    return proc, summary, project


def test_a_scaffolded_project_runs_as_created(scaffold_run: tuple[Any, dict[str, Any], Path]) -> None:
    proc, summary, project = scaffold_run
    assert summary["pipeline"] == "greenhouse"
    assert summary["lake"] == str(project / "lake" / "greenhouse")  # [tool.duet] lake = "lake"
    assert_one_answer(proc, summary, set(summary["windows"]))
    assert len(summary["windows"]) >= 2


def test_a_scaffolded_project_is_served_from_its_folder(scaffold_run: tuple[Any, dict[str, Any], Path]) -> None:
    _, summary, project = scaffold_run
    listed = duet("query", "--list", "--json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(listed.stdout)) == sorted(summary["windows"])
    got = _serve_and_get([], ["/views", "/ui"], cwd=project)
    assert all(status == 200 for status, _ in got.values())


def test_the_scaffolded_pipeline_runs_by_reference_too(scaffold_run: tuple[Any, dict[str, Any], Path],
                                                       kafka_bootstrap: str) -> None:
    """``duet run --pipeline module:attribute`` from another folder, the module on PYTHONPATH."""
    _, first, project = scaffold_run
    ref = f"{first['pipeline']}_pipeline:pipeline"
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{project}{os.pathsep}{env_path}" if env_path else str(project)
    try:
        proc, summary, _ = run_json("--pipeline", ref, "--lake", str(project / "other-lake"), cwd=project.parent,
                                    bootstrap=kafka_bootstrap)
    finally:
        if env_path:
            os.environ["PYTHONPATH"] = env_path
        else:
            os.environ.pop("PYTHONPATH")
    assert_one_answer(proc, summary, set(first["windows"]))
    assert summary["windows"] == first["windows"]
