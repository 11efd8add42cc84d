"""Session windows (Kafka's KStreamSessionWindowAggregate) through the TopologyTestDriver:
merges and their tombstones, close time ``stream time - gap - grace``, output timestamps
(the session end), caching (Kafka's default: updates folded per session per commit),
the session store's read API and retention."""
from __future__ import annotations

from typing import Any

import pytest

from speed_layer import Materialized, Produced, Serdes, SessionWindows, StreamsBuilder, TopologyException, Window, Windowed
from speed_layer.testing import TopologyTestDriver

S = Serdes.String()
CONFIG = {"default.key.serde": S, "default.value.serde": S}


def _run(pipes: list[tuple[Any, Any, int]], gap: int = 5, grace: int = 0, *, caching: bool = False, kind: str = "count") -> tuple[list[tuple[str, Any, int]], TopologyTestDriver]:
    b = StreamsBuilder()
    m = Materialized.as_("sessions") if caching else Materialized.as_("sessions").with_caching_disabled()
    g = b.stream("in").group_by_key().windowed_by(SessionWindows.of_inactivity_gap_and_grace(gap, grace))
    if kind == "count":
        t = g.count(m)
    elif kind == "reduce":
        t = g.reduce(lambda a, v: a + v, m)
    else:
        t = g.aggregate(lambda: "", lambda k, v, a: a + v, lambda k, a1, a2: a1 + "|" + a2, m)
    t.to_stream().to("out", Produced.with_(Serdes.Pickle(), Serdes.Pickle()))
    d = TopologyTestDriver(b.build(), CONFIG)
    inp = d.create_input_topic("in")
    for k, v, ts in pipes:
        inp.pipe_input(k, v, ts)
    out = [(str(r.key), r.value, r.timestamp) for r in d.create_output_topic("out", Serdes.Pickle(), Serdes.Pickle()).read_records_to_list()]
    return out, d


def test_uncached_merge_forwards_tombstone_then_merged_session() -> None:
    """Kafka's SuppressScenarioTest#shouldSupportFinalResultsForSessionWindows (raw output)."""
    out, d = _run([("k1", "v1", 0), ("k1", "v1", 5), ("k1", "v1", 1), ("k2", "v1", 11), ("k1", "v1", 5), ("k1", "v1", 30)])
    assert out == [("[k1@0/0]", 1, 0), ("[k1@0/0]", None, 0), ("[k1@0/5]", 2, 5), ("[k1@0/5]", None, 5), ("[k1@0/5]", 3, 5),
                   ("[k2@11/11]", 1, 11), ("[k1@30/30]", 1, 30)]
    assert d.dropped_records() == 1  # k1@5 after stream time 11: session [0,5] ends before 11 - 5 - 0
    d.close()


def test_cached_merge_folds_remove_and_put_of_the_same_session() -> None:
    """With caching (Kafka's default), removing and re-putting ``[0,5]`` within one commit is
    one cache entry: one update instead of a tombstone and an update."""
    out, d = _run([("k1", "v1", 0), ("k1", "v1", 5), ("k1", "v1", 1), ("k2", "v1", 11)], caching=True)
    assert out == [("[k1@0/0]", 1, 0), ("[k1@0/0]", None, 0), ("[k1@0/5]", 2, 5), ("[k1@0/5]", 3, 5), ("[k2@11/11]", 1, 11)]
    d.close()


def test_bridging_record_merges_two_sessions() -> None:
    out, d = _run([("a", "x", 0), ("a", "y", 20), ("a", "z", 10)], gap=10, grace=20, kind="aggregate")
    # Kafka starts from initializer() and merges every found session into it:
    # merger("", "x") = "|x", merger("|x", "y") = "|x|y", then the aggregator adds "z"
    assert out == [("[a@0/0]", "x", 0), ("[a@20/20]", "y", 20), ("[a@0/0]", None, 0), ("[a@20/20]", None, 20), ("[a@0/20]", "|x|yz", 20)]
    store = d.get_session_store("sessions")
    assert store.fetch("a") == [(Windowed("a", Window(0, 20)), "|x|yz")]
    assert store.fetch_session("a", 0, 20) == "|x|yz"
    assert store.find_sessions("a", 15, 30) == [(Windowed("a", Window(0, 20)), "|x|yz")]
    assert store.find_sessions("a", 21, 30) == []
    d.close()


def test_closed_session_is_not_merged() -> None:
    """With grace 0 the session ``[0,0]`` (gap 10) is closed at stream time 20: the store
    no longer returns it (its retention is gap + grace, as Kafka's segmented store's
    ``observedStreamTime - retention + 1`` lower bound), so a record at 10 only joins
    ``[20,20]``."""
    out, d = _run([("a", "x", 0), ("a", "y", 20), ("a", "z", 10)], gap=10, grace=0, kind="reduce")
    assert out == [("[a@0/0]", "x", 0), ("[a@20/20]", "y", 20), ("[a@20/20]", None, 20), ("[a@10/20]", "yz", 20)]
    d.close()


def test_reduce_merger_and_count_merger() -> None:
    out, d = _run([("a", "x", 0), ("a", "y", 20), ("a", "z", 10)], gap=10, grace=20, kind="reduce")
    assert out[-1] == ("[a@0/20]", "xyz", 20)
    d.close()
    out, d = _run([("a", "x", 0), ("a", "y", 20), ("a", "z", 10)], gap=10, grace=20)
    assert out[-1] == ("[a@0/20]", 3, 20)
    d.close()


def test_close_time_formula() -> None:
    """Dropped iff the merged session's end < observed stream time - grace - gap."""
    out, d = _run([("a", "x", 100), ("a", "x", 94)], gap=5, grace=1)
    assert out == [("[a@100/100]", 1, 100), ("[a@94/94]", 1, 94)]  # close time 94: end 94 kept
    out2, d2 = _run([("a", "x", 100), ("a", "x", 93)], gap=5, grace=1)
    assert out2 == [("[a@100/100]", 1, 100)]  # end 93 < 94: dropped
    assert d.dropped_records() == 0 and d2.dropped_records() == 1
    out3, d3 = _run([("a", "x", 0), ("a", "x", 15), ("a", "x", 3)], gap=5, grace=10)
    # close time 0: [0,0] is not closed for the processor, but the store (retention gap +
    # grace = 15) no longer returns a session ending at 0 <= 15 - 15; as in Kafka the
    # record starts a session of its own instead of merging
    assert out3[-1] == ("[a@3/3]", 1, 3)
    d.close()
    d2.close()
    d3.close()


def test_null_key_dropped_null_value_aggregated() -> None:
    out, d = _run([(None, "x", 1), ("a", None, 2)])
    assert out == [("[a@2/2]", 1, 2)]
    assert d.dropped_records() == 1
    d.close()


def test_session_store_retention_and_validation() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 3)).count(Materialized.as_("s"))
    assert b.build().stores["s"].retention_ms == 8 and b.build().stores["s"].caching
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="session inactivity gap plus the grace period"):
        b.stream("in").group_by_key().windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 3)).count(Materialized.as_("s").with_retention(7))
    out, d = _run([("a", "x", 0), ("a", "x", 100)], gap=5)
    assert [w for w, _ in d.get_session_store("sessions").all()] == [Windowed("a", Window(100, 100))]
    d.close()
