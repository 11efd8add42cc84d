"""The live merge end to end: a record produced to a pipeline's input reaches the merged
answer through the speed service (a child process running ``serve_speed``, as ``duet speed
--follow --server``) and its view topic, without a publish; the merged answer equals the
speed service's own interactive query."""

from __future__ import annotations

import importlib.util
import signal
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from fastapi.testclient import TestClient

from serving.api.app import create_app
from serving.views import publish

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]


def _speed_kit() -> ModuleType:
    """``tests/test_pipelines/speed_service_kit.py`` (the tiny pipeline and its child service)."""
    if "speed_service_kit" in sys.modules:
        return sys.modules["speed_service_kit"]
    path = Path(__file__).resolve().parents[1] / "test_pipelines" / "speed_service_kit.py"
    spec = importlib.util.spec_from_file_location("speed_service_kit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["speed_service_kit"] = module
    spec.loader.exec_module(module)
    return module


def _count(client: TestClient, view: str, key: str) -> tuple[int, str | None]:
    res = client.get(f"/views/{view}/keys/{key}")
    if res.status_code == 404:
        return 0, None
    rows = res.json()["rows"]
    return rows[-1]["value"], rows[-1]["source"]


def test_an_input_record_reaches_the_merged_answer_without_a_publish(tmp_path: Path, kafka_bootstrap: str) -> None:
    kit = _speed_kit()
    tag = uuid.uuid4().hex[:6]
    prefix, name = f"t-live-{tag}", f"live_{tag}"
    pipeline = kit.tiny_pipeline(prefix, name)
    per_user, per_page = f"{prefix}-per_user", f"{prefix}-per_page"
    lake = tmp_path / "lake"
    publish(lake, pipeline.view_specs.values(), {}, {}, None)  # the catalogue; no batch yet
    state = tmp_path / "speed" / "state"
    state.mkdir(parents=True)
    proc, url = kit.start_child(kafka_bootstrap, prefix, name, state, slow_ms=0.0)
    try:
        app = create_app(lake, refresh_interval_s=0, bootstrap=kafka_bootstrap)
        with TestClient(app) as client:
            kit.produce_clicks(kafka_bootstrap, prefix, 0, 20)  # p0: clicks 0, 5, 10, 15 (minute 0)
            deadline = time.monotonic() + 60
            while _count(client, per_page, "p0") != (4, "speed"):
                assert time.monotonic() < deadline, _count(client, per_page, "p0")
                time.sleep(0.05)
            produced = time.monotonic()
            kit.produce_clicks(kafka_bootstrap, prefix, 20, 1)  # p0, u0
            while _count(client, per_page, "p0") != (5, "speed"):
                assert time.monotonic() - produced < 10, _count(client, per_page, "p0")
                time.sleep(0.02)
            took = time.monotonic() - produced
            body = client.get(f"/views/{per_page}/keys/p0").json()
            iq = httpx.get(f"{url}/speed/stores/{per_page}/keys/p0", timeout=10).json()
            assert [(r["window_start"], r["value"]) for r in body["rows"]] == [
                (w["start"], w["value"]) for w in iq["windows"]]
            assert body["speed_stream_time_ms"] == kit.START_MS + 20_000
            assert _count(client, per_user, "u0") == (3, "speed")  # a table view: clicks 0, 10, 20
            print(f"input record to merged answer: {took * 1000:.0f} ms (commit.interval.ms 500)")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except Exception:
            proc.kill()
            raise
