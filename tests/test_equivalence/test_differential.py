"""Differential tests on random topologies: the speed layer (TopologyTestDriver, fed in
event-time order) and the batch layer (Spark over Delta) give equal results.

Each hypothesis example is a list of :data:`BATCH` random topologies
(``topology_strategies.examples``). They are built into ONE topology with prefixed names
and recomputed in one Spark run on the general executor (``outputs=True``), so Spark's
per-run overhead is paid once per list; each topology also runs alone in its own driver.
The batch's raw records are ONE Delta table (``equivalence_kit.write_raw_batch``) that
Spark reads once and hands to the plan as ``input_frames``, one filter per topic (a Delta
table per topic cost several Spark snapshot jobs per topic, most of the run); stores and
topics are read back in one Spark job each (``GeneralViews.collect_stores`` /
``collect_topics``). Compared, per topology: every materialized store (as view rows) and
every output topic (per key, in order). A failing topology is reported with its
``describe()`` and inputs; hypothesis shrinks it (ops, terminal, records) to a minimal
reproduction.

``DUET_DIFFERENTIAL_EXAMPLES`` (default 200) sets how many random topologies run, in
batches of ``DUET_DIFFERENTIAL_BATCH`` (default 50) per Spark run.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from batch_layer.compiler import compile_topology
from batch_layer.general import full_history, store_rows
from speed_layer import Serdes, StreamsBuilder
from speed_layer.testing import TopologyTestDriver

sys.path.insert(0, str(Path(__file__).parent))
from equivalence_kit import Raw, batch_order, produce, raw_frames, write_raw_batch  # noqa: E402
from topology_strategies import STREAMS, Example, build, examples, input_topics, register_by_value  # noqa: E402

pytestmark = pytest.mark.spark

TOTAL = int(os.environ.get("DUET_DIFFERENTIAL_EXAMPLES", "200"))
#: topologies per Spark run
BATCH = max(1, min(int(os.environ.get("DUET_DIFFERENTIAL_BATCH", "50")), TOTAL))
#: batch never stops on a failing record (it drops and counts it): the driver is run the
#: same way, so a user function raising on an input drops that record on both sides
CONFIG = {"application.id": "differential", "processing.exception.handler": "log_and_continue",
          "deserialization.exception.handler": "log_and_continue"}
#: the terminal kind of every topology checked (reported at the end of the module)
KINDS: list[str] = []


def prefixed(i: int) -> str:
    return f"e{i:03d}-"


def raws_of(ex: Example, p: str) -> list[Raw]:
    out: list[Raw] = []
    for t in sorted(input_topics(ex)):
        out += produce(p + t, ex.records[t], 1)
    return out


def driver_results(ex: Example, p: str) -> dict[str, Any]:
    """``{"stores": {store: rows}, "topics": {topic: {key: [(value, ts)]}}}`` of ``ex`` alone."""
    b = StreamsBuilder()
    build(b, ex, p)
    topology = b.build()
    tables = {p + t for t in ("t1", "t2", "g1")}
    stores, topics = {}, {}
    with TopologyTestDriver(full_history(topology), CONFIG) as d:
        for r in batch_order(raws_of(ex, p), tables):
            d.pipe_raw(r.topic, r.key, r.value, r.timestamp)
        for name in compile_topology(topology).views:
            if name.startswith(p):
                stores[name] = sorted(store_rows(d.get_state_store(name)))
        for t in d.produced_topic_names():
            per_key: dict[Any, list[Any]] = {}
            for rec in d.create_output_topic(t, Serdes.Bytes(), Serdes.Bytes()).read_records_to_list():
                per_key.setdefault(rec.key, []).append((rec.value, rec.timestamp))
            topics[t] = per_key
    return {"stores": stores, "topics": topics}


def reproduction(ex: Example, p: str) -> str:
    b = StreamsBuilder()
    build(b, ex, p)
    lines = [ex.describe(), str(b.build().describe())]
    for t in sorted(input_topics(ex)):
        lines.append(f"{t}: {[(k, v, ts) for k, v, ts in ex.records[t]]}  # (key, value, timestamp ms)")
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def _workers_get_strategies_by_value() -> None:
    register_by_value()


#: ``DUET_DIFFERENTIAL_SHRINK=0`` reports the first failing batch unshrunk (shrinking
#: re-runs Spark for every attempt)
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if os.environ.get("DUET_DIFFERENTIAL_SHRINK", "1") != "0" else [])


@settings(max_examples=max(1, TOTAL // BATCH), deadline=None, derandomize=True, print_blob=True, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(batch=st.lists(examples(), min_size=BATCH, max_size=BATCH))
def test_random_topologies_agree(spark, tmp_path_factory: pytest.TempPathFactory, batch: list[Example]) -> None:
    lake = tmp_path_factory.mktemp("lake")
    b = StreamsBuilder()
    raws: list[Raw] = []
    topics: list[str] = []
    for i, ex in enumerate(batch):
        build(b, ex, prefixed(i))
        raws += raws_of(ex, prefixed(i))
        topics += [prefixed(i) + t for t in input_topics(ex)]
    topology = b.build()
    frames, table = raw_frames(spark, write_raw_batch(lake, raws), topics)
    try:
        views = compile_topology(topology, config=CONFIG, outputs=True).execute(spark, lake, input_frames=frames)
        try:
            batch_stores = views.collect_stores()
            batch_topics: dict[str, dict[Any, list[Any]]] = {}
            for t, records in views.collect_topics().items():
                per_key: dict[Any, list[Any]] = {}
                for key, value, ts, _, _ in records:
                    per_key.setdefault(None if key is None else bytes(key), []).append(
                        (None if value is None else bytes(value), ts))
                batch_topics[t] = per_key
        finally:
            views.release()
    finally:
        table.unpersist()
    for i, ex in enumerate(batch):
        p = prefixed(i)
        speed = driver_results(ex, p)
        mine = {"stores": {s: rows for s, rows in batch_stores.items() if s in speed["stores"]},
                "topics": {t: v for t, v in batch_topics.items() if t.startswith(p)}}
        if mine != speed:
            note(reproduction(ex, p))
            for part in ("stores", "topics"):
                for name in sorted(set(mine[part]) | set(speed[part])):
                    if mine[part].get(name) != speed[part].get(name):
                        note(f"{part} {name}:\n  batch  {mine[part].get(name)}\n  driver {speed[part].get(name)}")
        KINDS.append(ex.terminal[0])
        assert mine == speed, f"topology {i} of the batch: speed and batch disagree ({ex.describe()})"
        assert set(speed["stores"]) == {s for s in batch_stores if s.startswith(p)}


def test_every_terminal_kind_was_checked() -> None:
    """Runs after the differential test: every node family was checked, 200+ topologies."""
    from collections import Counter

    counts = Counter(k.split("_join")[0] + "_join" if "_join" in k else k for k in KINDS)
    print(f"\ndifferential: {len(KINDS)} random topologies agreed; by terminal: {dict(sorted(counts.items()))}")
    assert len(KINDS) >= TOTAL // BATCH * BATCH
    if "DUET_DIFFERENTIAL_EXAMPLES" not in os.environ:
        assert len(KINDS) >= 200, "issue 8: at least 200 random topologies in make test"
    assert set(counts) == {"agg", "ss_join", "st_join", "sg_join", "tt_join", "fk_join", "table_group", "cogroup", "process"}


def test_every_terminal_kind_is_generated() -> None:
    """The strategy reaches every node family (a guard against a strategy that silently
    stops generating some of them)."""
    from hypothesis import find

    from topology_strategies import _TERMINALS

    for prefix in ("agg", "ss_join", "st_join", "sg_join", "tt_join", "fk_join", "table_group", "cogroup", "process"):
        find(_TERMINALS, lambda t, prefix=prefix: t[0].startswith(prefix))
    assert set(STREAMS) == {"s1", "s2"}
