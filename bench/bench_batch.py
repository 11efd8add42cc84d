"""Batch-layer speed on the flights views, against baselines measured in the same run.

1. duet's compiled plan (relational path) vs a hand-written PySpark job of the same four
   views (joins, tumbling/hopping windows with ``F.window``, sessions by a gap scan), both
   over the same raw Delta tables and writing Delta; the hand-written views are checked
   against duet's (same rows; values equal as JSON, floats to 1e-9).
2. The general executor (the speed layer's tasks inside Spark) vs the relational path on
   the same views.

Prints median seconds over ``--repeat`` interleaved runs and the ratios
``duet / hand-written`` (target <= 1.2) and ``general / relational``; also the median CPU
seconds of the whole process tree (driver, JVM, Python workers; Linux ``/proc``), a ratio
less sensitive than wall time to other load on the machine. Targets are printed, never
asserted.

    .venv/bin/python bench/bench_batch.py --flights 20000 --repeat 3
    .venv/bin/python bench/bench_batch.py                 # the full year (336,776 flights)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from batch_layer.compiler import BatchOptions
from batch_layer.delta.io import write_table
from batch_layer.ingest import RAW_SCHEMA
from batch_layer.run import read_view, run_batch
from batch_layer.spark import get_spark
from pipelines.examples.flights.data import TOPICS, flight_records, table_records
from pipelines.examples.flights.topology import DAY_MS, HOUR_MS, ORIGIN_TZ, STREAMS_CONFIG, VIEW_NAMES as VIEWS, build_topology
from speed_layer.runtime.partitioning import partition_for_key

GAP_MS = 4 * HOUR_MS


def tree_cpu_seconds() -> float | None:
    """CPU seconds (user + system, with waited-for children) of this process and its live
    descendants (the Spark JVM, its Python daemon and workers); None without ``/proc``."""
    def times(stat: str) -> tuple[int, int]:
        f = stat.rsplit(")", 1)[1].split()
        return int(f[1]), sum(int(x) for x in f[11:15])  # ppid, utime stime cutime cstime

    try:
        by_parent: dict[int, list[tuple[int, int]]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as fh:
                        ppid, ticks = times(fh.read())
                except OSError:
                    continue
                by_parent.setdefault(ppid, []).append((int(d), ticks))
        with open(f"/proc/{os.getpid()}/stat") as fh:
            total = times(fh.read())[1]
    except OSError:
        return None
    stack = [os.getpid()]
    while stack:
        for child, ticks in by_parent.get(stack.pop(), []):
            total += ticks
            stack.append(child)
    return total / os.sysconf("SC_CLK_TCK")


def jvm_cpu_seconds() -> float | None:
    """CPU seconds (user + system) of Spark's JVM, the ``java`` child of this process (the
    rest of :func:`tree_cpu_seconds` is this driver and the Python workers); None without
    ``/proc`` or before Spark started."""
    try:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()
            if name == "java" and int(rest[1]) == os.getpid():
                return sum(int(x) for x in rest[11:13]) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None
    return None


def write_lake(lake: Path, flights: int | None) -> int:
    """Raw Delta tables of the four topics, partitioned as the Java producer would."""
    n = 0
    for topic, parts in TOPICS.items():
        recs = flight_records(flights) if topic == "flights" else table_records(topic)
        offsets = [0] * parts
        rows = []
        for r in recs:
            kb = r.key.encode()
            p = partition_for_key(kb, parts)
            rows.append({"key": kb, "value": json.dumps(r.value).encode(), "timestamp": r.timestamp, "partition": p,
                         "offset": offsets[p], "headers": []})
            offsets[p] += 1
        write_table(pa.Table.from_pylist(rows, schema=RAW_SCHEMA), lake / "raw" / topic, mode="overwrite")
        n += len(rows)
    return n


def hand_written(spark: Any, lake: Path, out: Path) -> None:
    """The four views as a Spark engineer would write them (DataFrame API)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def table(topic: str, schema: str) -> Any:
        df = spark.read.format("delta").load(str(lake / "raw" / topic))
        latest = Window.partitionBy("key").orderBy(F.col("timestamp").desc(), F.col("offset").desc())
        df = df.withColumn("rn", F.row_number().over(latest)).filter("rn = 1")
        return df.select(F.col("key").cast("string").alias("k"), F.from_json(F.col("value").cast("string"), schema).alias("t"))

    fschema = ("origin string, dest string, carrier string, tailnum string, time_hour string, minute long, "
               "dep_time double, dep_delay double, air_time double")
    raw = spark.read.format("delta").load(str(lake / "raw" / "flights"))
    f = raw.select(F.col("key").cast("string").alias("fk"), F.from_json(F.col("value").cast("string"), fschema).alias("f")).select("fk", "f.*")
    f = f.dropna(subset=["origin", "dest", "carrier", "time_hour", "minute"]).filter("minute between 0 and 59")
    f = f.withColumn("ts", F.unix_millis(F.to_timestamp("time_hour")) + F.col("minute") * 60_000)
    planes = table("planes", "seats long").select(F.col("k").alias("fk"), "t.seats")
    airports = table("airports", "tzone string").select(F.col("k").alias("dest"), F.col("t.tzone").alias("dest_tz"))
    airlines = table("airlines", "name string").select(F.col("k").alias("carrier"))
    enriched = (f.join(planes, "fk", "left").join(F.broadcast(airports), "dest", "left")
                .join(F.broadcast(airlines), "carrier", "left")).persist()

    def windowed(df: Any, key: str, size_ms: int, advance_ms: int, aggs: list[Any], value: Any) -> Any:
        w = F.window(F.timestamp_millis("ts"), f"{size_ms // 1000} seconds", f"{advance_ms // 1000} seconds")
        g = df.groupBy(F.col(key).alias("key"), w.alias("w")).agg(F.max("ts").alias("timestamp"), *aggs)
        return g.select("key", F.unix_millis("w.start").alias("window_start"), F.unix_millis("w.end").alias("window_end"),
                        value.alias("value"), "timestamp")

    delay_n = F.count("dep_delay")
    views = {
        "departures_hourly": windowed(
            enriched, "origin", HOUR_MS, HOUR_MS,
            [F.count(F.lit(1)).alias("c"), F.sum(F.col("dep_time").isNull().cast("long")).alias("x"),
             F.coalesce(F.sum("dep_delay"), F.lit(0)).alias("s"), delay_n.alias("n")],
            F.to_json(F.struct(F.col("c").alias("count"), F.col("x").alias("cancelled"), F.col("s").alias("dep_delay_sum"),
                               F.col("n").alias("dep_delay_n"),
                               F.when(F.col("n") > 0, F.col("s") / F.col("n")).alias("mean_dep_delay")),
                      {"ignoreNullFields": "false"})),
        "same_tz_hourly": windowed(enriched.filter(F.col("dest_tz") == ORIGIN_TZ), "origin", HOUR_MS, HOUR_MS,
                                   [F.count(F.lit(1)).alias("c")], F.col("c").cast("string")),
        "seats_by_dest_daily": windowed(enriched, "dest", DAY_MS, HOUR_MS, [F.sum(F.coalesce("seats", F.lit(0))).alias("s")],
                                        F.col("s").cast("string")),
    }
    # sessions (Kafka's SessionWindows): a record joins its key's session when it is at
    # most the gap after the session's last record
    d = enriched.filter(F.col("tailnum").isNotNull() & F.col("dep_time").isNotNull())
    by_plane = Window.partitionBy("tailnum").orderBy("ts")
    d = d.withColumn("new", (F.col("ts") - F.lag("ts").over(by_plane) > GAP_MS).cast("int"))
    d = d.withColumn("sid", F.sum(F.coalesce("new", F.lit(1))).over(by_plane))
    s = d.groupBy("tailnum", "sid").agg(F.min("ts").alias("window_start"), F.max("ts").alias("window_end"),
                                        F.count(F.lit(1)).alias("legs"), F.sum(F.coalesce("air_time", F.lit(0))).cast("long").alias("air"))
    views["plane_duty_sessions"] = s.select(F.col("tailnum").alias("key"), "window_start", "window_end",
                                            F.to_json(F.struct(F.col("legs"), F.col("air").alias("air_time"))).alias("value"),
                                            F.col("window_end").alias("timestamp"))
    for name, df in views.items():
        write_table(df, out / "views" / name, mode="overwrite")
    enriched.unpersist()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def agreement(lake_a: Path, lake_b: Path) -> dict[str, tuple[int, int]]:
    """Per view: (rows equal, rows in either)."""
    out = {}
    for view in VIEWS:
        a, b = read_view(lake_a, view), read_view(lake_b, view)
        ia = {(r.key, int(r.window_start), int(r.window_end)): (json.loads(r.value), int(r.timestamp)) for r in a.itertuples()}
        ib = {(r.key, int(r.window_start), int(r.window_end)): (json.loads(r.value), int(r.timestamp)) for r in b.itertuples()}
        equal = sum(1 for k in ia if k in ib and ia[k][1] == ib[k][1] and _same(ia[k][0], ib[k][0]))
        out[view] = (equal, len(set(ia) | set(ib)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flights", type=int, default=None, help="first N flights (default: the full year)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-general", action="store_true", help="do not time the general executor")
    ap.add_argument("--no-warmup", action="store_true",
                    help="time the first round too (by default one untimed round of duet and the hand-written job runs "
                         "first: Spark's Python workers start and import duet there, the JVM compiles its hot code)")
    ap.add_argument("--unfused", action="store_true",
                    help="also time the relational path with BatchOptions(fuse_aggregations=False) (one pass and one "
                         "shuffle per view, the shared joined stream persisted)")
    args = ap.parse_args()
    spark = get_spark("duet-bench-batch")
    root = Path(tempfile.mkdtemp(prefix="duet-bench-batch-"))
    lake, hand = root / "lake", root / "hand"
    records = write_lake(lake, args.flights)
    (root / "unfused").mkdir()
    (root / "unfused" / "raw").symlink_to(lake / "raw")  # the same raw tables, the views apart
    print(f"records: {records:,} ({args.flights or 'all'} flights)")
    times: dict[str, list[float]] = {"duet": [], "hand": [], "general": [], "unfused": []}
    cpus: dict[str, list[float]] = {k: [] for k in times}
    jvm: dict[str, list[float]] = {k: [] for k in times}  # the JVM's part of cpus
    loads: list[float] = [os.getloadavg()[0]]
    topology = build_topology()

    def timed(name: str, fn: Any) -> None:
        t0, c0, j0 = time.perf_counter(), tree_cpu_seconds(), jvm_cpu_seconds()
        fn()
        times[name].append(time.perf_counter() - t0)
        c1, j1 = tree_cpu_seconds(), jvm_cpu_seconds()
        if c0 is not None and c1 is not None:
            cpus[name].append(c1 - c0)
        if j0 is not None and j1 is not None:
            jvm[name].append(j1 - j0)
        loads.append(os.getloadavg()[0])

    def general() -> None:
        # the same raw tables, the views written under another root
        raw = {t: spark.read.format("delta").load(str(lake / "raw" / t)) for t in TOPICS}
        run_batch(spark, topology, root / "general", views=list(VIEWS), config=STREAMS_CONFIG,
                  options=BatchOptions(executor="general"), input_frames=raw)

    if not args.no_warmup:
        run_batch(spark, topology, lake, views=list(VIEWS), config=STREAMS_CONFIG)
        hand_written(spark, lake, hand)
    for _ in range(args.repeat):
        timed("duet", lambda: run_batch(spark, topology, lake, views=list(VIEWS), config=STREAMS_CONFIG))
        timed("hand", lambda: hand_written(spark, lake, hand))
        if args.unfused:
            timed("unfused", lambda: run_batch(spark, topology, root / "unfused", views=list(VIEWS), config=STREAMS_CONFIG,
                                               options=BatchOptions(fuse_aggregations=False)))
        if not args.skip_general:
            timed("general", general)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    cpu = {k: statistics.median(v) for k, v in cpus.items() if v}
    print(f"duet relational: {med['duet']:.1f} s   hand-written PySpark: {med['hand']:.1f} s   "
          f"ratio duet/hand-written = {med['duet'] / med['hand']:.2f} (target <= 1.2)   load {os.getloadavg()[0]:.1f}")
    if "duet" in cpu and "hand" in cpu:
        print(f"  CPU: duet {cpu['duet']:.1f} s   hand-written {cpu['hand']:.1f} s   ratio {cpu['duet'] / cpu['hand']:.2f}")
    if jvm["duet"] and jvm["hand"]:
        jd, jh = statistics.median(jvm["duet"]), statistics.median(jvm["hand"])
        print(f"  of which the JVM: duet {jd:.1f} s (Python workers and driver {cpu['duet'] - jd:.1f} s)   "
              f"hand-written {jh:.1f} s")
    print(f"  load average (1 min) after each timed run: {' '.join(f'{x:.1f}' for x in loads)}")
    for view, (eq, n) in agreement(lake, hand).items():
        print(f"  {view}: hand-written == duet on {eq:,}/{n:,} rows ({eq / max(n, 1):.2%})")
    if "unfused" in med:
        print(f"duet relational unfused: {med['unfused']:.1f} s   ratio unfused/hand-written = "
              f"{med['unfused'] / med['hand']:.2f}" + (f"   CPU {cpu['unfused']:.1f} s, ratio {cpu['unfused'] / cpu['hand']:.2f}"
                                                         if "unfused" in cpu and "hand" in cpu else ""))
        for view, (eq, n) in agreement(lake, root / "unfused").items():
            print(f"  {view}: unfused == fused on {eq:,}/{n:,} rows")
    if "general" in med:
        print(f"duet general executor: {med['general']:.1f} s   ratio general/relational = {med['general'] / med['duet']:.2f}")
        if "general" in cpu and "duet" in cpu:
            print(f"  CPU: general {cpu['general']:.1f} s   ratio general/relational {cpu['general'] / cpu['duet']:.2f}")
        for view, (eq, n) in agreement(lake, root / "general").items():
            print(f"  {view}: general == relational on {eq:,}/{n:,} rows")


if __name__ == "__main__":
    main()
