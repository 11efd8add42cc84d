"""``duet init``'s scaffold (:mod:`pipelines.cli.scaffold`): the project it writes loads through
``[tool.duet]``, validates, passes its own tests, and its sample gives the same views in the
speed layer (TopologyTestDriver, arrival order, out-of-order readings) and the batch layer.

Fast tests need no broker and no Spark; the agreement test is marked ``spark``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.declaration.pipeline import Pipeline
from pipelines.preflight import UserError
from pipelines.declaration.resolve import PIPELINE_ENV, resolve_pipeline
from pipelines.cli.scaffold import TEMPLATES, init_project, pipeline_name_from

REPO = Path(__file__).resolve().parents[2]
FILES = ["pyproject.toml", "README.md", ".gitignore", "{p}/__init__.py", "{p}/sample.py", "tests/test_{p}.py"]


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Undo what importing a scaffolded project does: the folders put on ``sys.path`` and
    the modules imported from them (``<name>_pipeline``, ``<name>_pipeline.sample``)."""
    monkeypatch.delenv(PIPELINE_ENV, raising=False)
    path_before = list(sys.path)
    yield
    sys.path[:] = path_before
    here = str(tmp_path.resolve())
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(here):
            del sys.modules[name]


def load_project(root: Path) -> Pipeline:
    pipeline, project = resolve_pipeline(cwd=root / "tests")  # found from a folder below the project's
    assert project is not None and project.root == root.resolve()
    assert project.lake == (root / "lake").resolve()
    return pipeline


# --------------------------------------------------------------------------- files and names
def test_writes_the_project_files(tmp_path: Path) -> None:
    root = tmp_path / "Cold-Room 2"
    written = init_project(root)
    pkg = "cold_room_2_pipeline"
    assert written == [(root / f.format(p=pkg)).resolve() for f in FILES]
    assert len(written) == len(TEMPLATES) and all(f.is_file() for f in written)
    for f in written:
        text = f.read_text()
        assert "{{" not in text and ("cold_room_2" in text or f.name == ".gitignore"), f
    doc = tomllib.loads((root / "pyproject.toml").read_text())
    assert doc["project"]["name"] == "cold_room_2"
    assert doc["project"]["requires-python"] == ">=3.11"
    assert doc["project"]["dependencies"] == []  # duet comes from its repository, not PyPI
    assert doc["tool"]["duet"] == {"pipeline": f"{pkg}:pipeline", "lake": "lake"}
    assert doc["tool"]["pytest"]["ini_options"]["pythonpath"] == ["."]
    init = (root / pkg / "__init__.py").read_text()
    assert 'name="cold_room_2"' in init and 'DLQ_TOPIC = "cold_room_2-dlq"' in init
    readme = (root / "README.md").read_text()
    for command in ("duet run", f"duet run --pipeline {pkg}:pipeline", "duet serve", "duet ui", "pytest"):
        assert command in readme
    assert {"lake/", ".duet/", "__pycache__/"} <= set((root / ".gitignore").read_text().split())


def test_explicit_name_and_existing_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    written = init_project(tmp_path / "x", "greenhouse")
    assert (tmp_path / "x" / "greenhouse_pipeline" / "sample.py").resolve() in written
    assert (tmp_path / "x" / "tests" / "test_greenhouse_pipeline.py").is_file()


@pytest.mark.parametrize(("folder", "name"), [("sensors", "sensors"), ("My Sensors-2", "my_sensors_2"),
                                              ("2024_data", "data"), ("__x__", "x"), ("été", "t"), ("123", "")])
def test_name_from_folder(folder: str, name: str) -> None:
    assert pipeline_name_from(folder) == name


def test_not_empty_folder_is_refused_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"is not empty: .*--force"):
        init_project(tmp_path, "sensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    init_project(tmp_path, "sensors", force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "pyproject.toml").is_file()


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(UserError, match="is a file"):
        init_project(tmp_path / "f", "sensors")


@pytest.mark.parametrize("bad", ["Sensors", "1sensors", "my-sensors", "_x", "", "x" * 65, "duet"])
def test_bad_name_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UserError) as exc:
        init_project(tmp_path / "p", bad)
    message = str(exc.value)
    assert "\n" not in message and repr(bad) in message
    assert ("lower-case letters" in message) or ("taken" in message)
    assert not (tmp_path / "p").exists()


def test_folder_without_a_usable_name_asks_for_one(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="pass --name"):
        init_project(tmp_path / "2024")


# --------------------------------------------------------------------------- the project works
def test_resolves_through_tool_duet_and_validates(tmp_path: Path, isolated_imports: None) -> None:
    root = tmp_path / "sensors"
    init_project(root)
    pipeline = load_project(root)
    assert pipeline.name == "sensors"
    assert pipeline.input_topics == {"readings": 2, "sensors": 2}
    assert pipeline.view_names == ("temperature_5min", "readings_per_site")
    assert pipeline.dlq_topic == "sensors-dlq"
    assert pipeline.streams_config["deserialization.exception.handler"] == "dead_letter"
    windows = pipeline.windows_of("temperature_5min")
    assert (windows.size_ms, windows.grace_ms) == (300_000, 120_000)
    assert set(pipeline.view_specs) == set(pipeline.view_names)
    assert pipeline.windows_of("readings_per_site") is None
    assert [e.type for e in pipeline.expectations("temperature_5min")].count("expect_column_values_to_be_between") >= 4
    sample = pipeline.sample_data()
    assert 5_000 <= len(sample.events) <= 20_000 and len(sample.tables["sensors"]) == 6
    assert len(pipeline.sample_data(10).events) == 10
    days = pipeline.partitions
    assert (str(days.start), str(days.end)) == ("2026-03-02", "2026-03-05")
    start, end = days.day_range_ms("2026-03-02", "2026-03-04")  # every event is inside the partitions
    assert all(start <= r.timestamp < end for _, r in sample.events)
    assert all(r.timestamp == start for r in sample.tables["sensors"])


def test_two_projects_in_one_session_do_not_mix(tmp_path: Path, isolated_imports: None) -> None:
    """The import hygiene the other tests rely on: a second project of another name loads its
    own module (the first one's folder and module are still on sys.path / in sys.modules)."""
    init_project(tmp_path / "a")
    init_project(tmp_path / "b")
    assert load_project(tmp_path / "a").name == "a"
    assert load_project(tmp_path / "b").name == "b"
    assert sys.modules["b_pipeline"].__file__ == str((tmp_path / "b" / "b_pipeline" / "__init__.py").resolve())


def test_generated_tests_pass(tmp_path: Path) -> None:
    root = tmp_path / "plant_sensors"
    init_project(root)
    env = {k: v for k, v in os.environ.items() if k not in (PIPELINE_ENV, "PYTHONPATH")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "7 passed" in proc.stdout, proc.stdout[-2000:]


# --------------------------------------------------------------------------- speed == batch
@pytest.mark.spark
def test_sample_views_agree_between_speed_and_batch(spark: Any, tmp_path: Path, isolated_imports: None,
                                                  equivalence_kit: Any) -> None:
    """The template's claim: the sample's readings, piped into the speed layer in ARRIVAL
    order (out-of-order ones included), give exactly the batch layer's views (value JSON text
    and timestamp of every window and every site), and both dead-letter the same 3 records."""
    from batch_layer.run import run_batch
    from pipelines.produce.load import encode_value
    from speed_layer import Serdes
    from speed_layer.testing import TopologyTestDriver

    kit = equivalence_kit
    root = tmp_path / "sensors"
    init_project(root)
    pipeline = load_project(root)
    sample = pipeline.sample_data()

    # batch: the records as Kafka would hold them (murmur2 partitions, offsets in produce order)
    raws = []
    for topic, records in sample.tables.items():
        raws += kit.produce(topic, [(r.key, r.value, r.timestamp) for r in records], pipeline.input_topics[topic])
    for topic in pipeline.input_topics:
        if topic not in sample.tables:
            events = [(r.key, r.value, r.timestamp) for t, r in sample.events if t == topic]
            raws += kit.produce(topic, events, pipeline.input_topics[topic])
    lake = tmp_path / "lake"
    kit.write_raw(lake, raws, pipeline.input_topics)
    # Spark's Python workers do not have the project's folder on sys.path (only this process
    # does): ship the project module's functions by value, not as an import by name
    from pyspark import cloudpickle

    module = sys.modules["sensors_pipeline"]
    cloudpickle.register_pickle_by_value(module)
    try:
        result = run_batch(spark, pipeline.build_topology(), lake, views=list(pipeline.view_names),
                           config=pipeline.streams_config)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert result.dropped == 3  # the sample's dead letters

    # speed: the tables, then the events in arrival order, as `duet run` produces them
    speed: dict[str, dict] = {}
    with TopologyTestDriver(pipeline.build_topology(), pipeline.streams_config) as driver:
        for topic, records in sample.tables.items():
            for r in records:
                driver.pipe_raw(topic, r.key.encode(), encode_value(r.value), r.timestamp)
        for topic, r in sample.events:
            driver.pipe_raw(topic, r.key.encode(), encode_value(r.value), r.timestamp)
        assert driver.dropped_records() == 3  # the dead letters; nothing late
        for view in pipeline.view_names:
            windowed = pipeline.windows_of(view) is not None
            key_serde = Serdes.WindowedJSON(Serdes.String()) if windowed else Serdes.String()
            rows = {}
            for rec in driver.create_output_topic(view, key_serde, Serdes.Bytes()).read_records_to_list():
                ident = (rec.key.key, rec.key.window.start, rec.key.window.end) if windowed else (rec.key, None, None)
                rows[ident] = (rec.value.decode(), rec.timestamp)
            speed[view] = rows
    kit.assert_views_equal(kit.batch_views(lake, pipeline.view_names), speed)
    assert result.views == {v: len(rows) for v, rows in speed.items()}
    assert len(speed["temperature_5min"]) > 4_000 and len(speed["readings_per_site"]) == 3
