"""SparkSession set-up and Delta IO helpers: round trips through Spark and through delta-rs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from batch_layer.delta import read_arrow, read_table, table_exists, table_version, write_table
from batch_layer.errors import BatchLayerError
from batch_layer.spark import delta_jars, get_spark

pytestmark = pytest.mark.spark


def test_get_spark_is_cached_and_configured(spark) -> None:
    assert get_spark() is spark
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master").startswith("local")
    assert "delta-spark" in conf.get("spark.jars")
    assert conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf.get("spark.ui.enabled") == "false"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "8"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"


def test_missing_jars_names_make_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(BatchLayerError, match="make setup"):
        delta_jars()


def test_table_exists_and_version_of_no_table(tmp_path: Path) -> None:
    assert not table_exists(tmp_path / "missing")
    (tmp_path / "empty" / "_delta_log").mkdir(parents=True)
    assert not table_exists(tmp_path / "empty")
    assert table_version(tmp_path / "missing") is None


def test_round_trip_spark_writes_both_read(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    rows = [(1, "a", b"\x00\x01", 1356998400000, None), (2, None, None, 1356998400001, 2.5)]
    df = spark.createDataFrame(rows, "id int, s string, b binary, ts long, x double")
    write_table(df, path)
    assert table_exists(path) and table_version(path) == 0

    back = read_table(spark, path).orderBy("id").collect()
    assert [tuple(r) for r in back] == [(1, "a", bytearray(b"\x00\x01"), 1356998400000, None),
                                        (2, None, None, 1356998400001, 2.5)]
    arrow = read_arrow(path).sort_by("id")
    assert arrow.to_pylist() == [
        {"id": 1, "s": "a", "b": b"\x00\x01", "ts": 1356998400000, "x": None},
        {"id": 2, "s": None, "b": None, "ts": 1356998400001, "x": 2.5},
    ]
    assert arrow.schema.field("ts").type == pa.int64()

    write_table(df, path, mode="append")
    assert table_version(path) == 1
    assert read_table(spark, path).count() == 4
    assert read_arrow(path, columns=["id"], filter=pc.field("id") == 2).num_rows == 2
    assert read_table(spark, path, version=0).count() == 2

    write_table(df.limit(1).selectExpr("id"), path)  # overwrite, with a new schema
    assert table_version(path) == 2
    assert read_arrow(path).column_names == ["id"]
    assert read_table(spark, path).count() == 1


def test_round_trip_deltalake_writes_both_read(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = pa.table(
        {
            "key": pa.array(["a", "b", "c"], pa.string()),
            "window_start": pa.array([0, None, 10], pa.int64()),
            "day": pa.array(["2013-01-01", "2013-01-01", "2013-01-02"], pa.string()),
        }
    )
    write_table(table, path, partition_by=["day"])
    assert table_version(path) == 0
    df = read_table(spark, path)
    assert dict(df.dtypes) == {"key": "string", "window_start": "bigint", "day": "string"}
    assert sorted(tuple(r) for r in df.collect()) == [
        ("a", 0, "2013-01-01"), ("b", None, "2013-01-01"), ("c", 10, "2013-01-02")
    ]
    assert read_arrow(path, filter=pc.field("day") == "2013-01-02")["key"].to_pylist() == ["c"]

    write_table(pd.DataFrame({"key": ["d"], "window_start": [5], "day": ["2013-01-03"]}), path, mode="append")
    assert table_version(path) == 1
    assert read_table(spark, path).count() == 4

    # Spark appends to a table delta-rs created, and delta-rs reads Spark's commit.
    more = spark.createDataFrame([("e", 7, "2013-01-03")], "key string, window_start long, day string")
    write_table(more, path, mode="append", partition_by=["day"])
    assert table_version(path) == 2
    assert sorted(read_arrow(path)["key"].to_pylist()) == ["a", "b", "c", "d", "e"]


def test_write_table_rejects_unknown_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_table(pa.table({"a": [1]}), tmp_path / "t", mode="merge")  # type: ignore[arg-type]


def test_checkpoints_of_each_writer_are_read_by_the_other(spark, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    path = tmp_path / "t"
    for i in range(10):  # versions 0..9 by delta-rs
        write_table(pa.table({"i": pa.array([i], pa.int64())}), path, mode="append")
    DeltaTable(str(path)).create_checkpoint()  # delta-rs checkpoint at version 9
    assert read_table(spark, path).count() == 10
    write_table(spark.createDataFrame([(10,)], "i long"), path, mode="append")  # Spark: v10 + checkpoint
    assert table_version(path) == 10
    assert sorted(p.name for p in (path / "_delta_log").glob("*.checkpoint*.parquet")) == [
        "00000000000000000009.checkpoint.parquet", "00000000000000000010.checkpoint.parquet"
    ]
    write_table(pa.table({"i": pa.array([11], pa.int64())}), path, mode="append")
    assert sorted(read_arrow(path)["i"].to_pylist()) == list(range(12))
    assert read_table(spark, path).count() == 12
