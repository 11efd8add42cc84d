"""``LakeLayout``: every location of a pipeline's lake folder, for a local path and a URI, and
the writers and readers of the three layers finding each other through it (no Spark: the
tables are written with delta-rs, the JSON files with the layers' own writers)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from batch_layer.delta import LakeLayout
from batch_layer.delta.io import write_table
from batch_layer.ingest import RAW_SCHEMA, archived_offsets, raw_table_path
from batch_layer.run import _write_json, read_view, view_path

WATERMARK = 1_357_000_000_000


def test_locations_of_a_local_folder() -> None:
    for root in ("/data/lake/flights", Path("/data/lake/flights")):
        lake = LakeLayout(root)
        base = Path("/data/lake/flights")
        assert lake.raw_table("flights") == base / "raw" / "flights"
        assert lake.batch_view("departures_hourly") == base / "views" / "departures_hourly"
        assert lake.batch_info == base / "views" / "_batch.json"
        assert lake.serving_view("departures_hourly") == base / "serving" / "departures_hourly"
        assert lake.serving_folder == base / "serving"
        assert lake.catalogue == base / "serving" / "_views.json"
        assert lake.quality_folder == base / "quality"
        assert lake.quality_result("departures_hourly") == base / "quality" / "departures_hourly.json"
        assert all(isinstance(p, Path) for p in (lake.raw_table("t"), lake.batch_info, lake.catalogue))
    assert LakeLayout("lake/flights").batch_view("v") == Path("lake/flights/views/v")  # relative stays relative


@pytest.mark.parametrize("root", ["s3a://bucket/lake/flights", "s3a://bucket/lake/flights/",
                                  Path("s3a://bucket/lake/flights")])
def test_locations_of_a_uri(root: str | Path) -> None:
    lake = LakeLayout(root)
    base = "s3a://bucket/lake/flights"
    assert lake.raw_table("flights") == f"{base}/raw/flights"
    assert lake.batch_view("departures_hourly") == f"{base}/views/departures_hourly"
    assert lake.batch_info == f"{base}/views/_batch.json"
    assert lake.serving_view("departures_hourly") == f"{base}/serving/departures_hourly"
    assert lake.serving_folder == f"{base}/serving"
    assert lake.catalogue == f"{base}/serving/_views.json"
    assert lake.quality_folder == f"{base}/quality"
    assert lake.quality_result("departures_hourly") == f"{base}/quality/departures_hourly.json"
    assert LakeLayout("file:///data/lake/flights").raw_table("t") == "file:///data/lake/flights/raw/t"


def test_parts_are_the_first_step_of_every_location() -> None:
    lake = LakeLayout(Path("/lake/p"))
    assert LakeLayout.PARTS == ("raw", "views", "serving", "quality")
    locations = [lake.raw_table("t"), lake.batch_view("s"), lake.batch_info, lake.serving_view("v"),
                 lake.serving_folder, lake.catalogue, lake.quality_folder, lake.quality_result("v")]
    assert {Path(p).relative_to("/lake/p").parts[0] for p in locations} == set(LakeLayout.PARTS)


def test_the_layers_path_helpers_are_the_layout(tmp_path: Path) -> None:
    from serving.quality import quality_path
    from serving.views import catalogue_path, served_view_path
    from serving.views.batch import batch_view_path

    for root in (tmp_path, "s3a://bucket/lake/p"):
        lake = LakeLayout(root)
        assert raw_table_path(root, "t") == lake.raw_table("t")
        assert view_path(root, "s") == lake.batch_view("s")
    # serving reads local lakes: Paths
    lake = LakeLayout(tmp_path)
    assert batch_view_path(tmp_path, "s") == lake.batch_view("s")
    assert served_view_path(str(tmp_path), "v") == lake.serving_view("v")
    assert catalogue_path(tmp_path) == lake.catalogue
    assert quality_path(tmp_path, "v") == lake.quality_result("v")


def test_batch_info_written_by_the_batch_layer_is_read_by_serving(tmp_path: Path) -> None:
    from serving.views.batch import read_batch_info, read_batch_watermark

    lake = LakeLayout(tmp_path)
    doc = {"watermark_ms": WATERMARK, "finished_at": "2013-01-01T00:00:00+00:00",
           "views": {"counts": {"rows": 2}}, "dropped": 0}
    _write_json(lake.batch_info, doc)  # as run_batch writes it
    assert Path(lake.batch_info).is_file()
    assert read_batch_info(tmp_path) == doc
    assert read_batch_watermark(str(tmp_path)) == WATERMARK


def test_tables_written_at_the_layout_are_read_by_each_layer(tmp_path: Path) -> None:
    from serving.views.batch import read_batch_view
    from serving.views.index import ViewIndex
    from serving.views.model import ViewSpec, load_catalogue, save_catalogue
    from serving.views.publish import write_served_view

    lake = LakeLayout(tmp_path)
    # raw: an archived record, found by ingest's offset reader
    raw = pa.Table.from_pylist([{"key": b"k", "value": b"v", "timestamp": WATERMARK, "partition": 0,
                                 "offset": 7, "headers": []}], schema=RAW_SCHEMA)
    write_table(raw, lake.raw_table("clicks"))
    assert archived_offsets(tmp_path, "clicks") == {0: 7}
    # views/<store>: read by the batch layer's and serving's readers
    view = pd.DataFrame({"key": ["a"], "window_start": [None], "window_end": [None],
                         "value": ['{"count": 1}'], "timestamp": [WATERMARK]})
    write_table(view.astype({"window_start": "Int64", "window_end": "Int64"}), lake.batch_view("counts"))
    assert read_view(tmp_path, "counts")["key"].tolist() == ["a"]
    assert read_batch_view(tmp_path, "counts")["key"].tolist() == ["a"]
    # serving/<view> and serving/_views.json: published, then loaded by the view index
    write_served_view(tmp_path, "counts", view.assign(source="batch"))
    save_catalogue(tmp_path, [ViewSpec.table("counts")])
    assert Path(lake.catalogue).is_file() and (Path(lake.serving_view("counts")) / "_delta_log").is_dir()
    assert set(load_catalogue(tmp_path)) == {"counts"}
    assert ViewIndex(tmp_path).views() == ["counts"]


def test_quality_results_are_stored_and_loaded_at_the_layout(tmp_path: Path) -> None:
    from serving.quality import QualityResult, load_results, save_result

    lake = LakeLayout(tmp_path)
    result = QualityResult.from_gx_json("counts", {"success": True, "statistics": {}, "results": []})
    assert save_result(tmp_path, result) == lake.quality_result("counts")
    assert json.loads(Path(lake.quality_result("counts")).read_text())["success"] is True
    assert set(load_results(tmp_path)) == {"counts"}
    assert [p.name for p in Path(lake.quality_folder).iterdir()] == ["counts.json"]


def test_lake_tables_names_the_parts_present(tmp_path: Path) -> None:
    from pipelines.cli.support import lake_tables

    lake = LakeLayout(tmp_path)
    write_table(pa.table({"x": [1]}), lake.batch_view("s"))
    Path(lake.quality_folder).mkdir()  # empty: not listed
    assert lake_tables(tmp_path) == ["views"]
