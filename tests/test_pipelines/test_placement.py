"""Placement of whole sub-topologies on the speed layer's instances (:mod:`pipelines.speed.placement`):
longest processing time first, on measured costs when a run left them, else estimated from
the topology; stage depths give the start order."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from pipelines.examples.flights.topology import build_topology as flights_topology
from pipelines.speed.placement import (
    estimated_costs, load_costs, measured_costs, place_subtopologies, save_costs, stage_depths,
)
from speed_layer import Consumed, Serdes, StreamsBuilder, TimeWindows, Topology


def _one_stage() -> Topology:
    b = StreamsBuilder()
    b.stream("in", Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON())).filter(lambda k, v: True).to("out")
    return b.build()


def test_the_flights_stages_and_their_estimated_costs() -> None:
    topology = flights_topology()
    # 0: flights join planes -> by dest; 1: airports, airlines, seats (24 windows a flight)
    # -> by origin and by tail; 3: departures and same-tz hourly; 4: duty sessions
    assert stage_depths(topology) == {0: 0, 1: 1, 3: 2, 4: 2}
    costs = estimated_costs(topology)
    assert set(costs) == {0, 1, 3, 4}
    assert costs[1] > costs[0] + costs[3] + costs[4]  # the 24 h hopping window advancing by 1 h
    placement = place_subtopologies(topology, 2)
    assert placement.instances == ((1,), (0, 3, 4)) and placement.source == "estimated"
    assert placement.depths == (1, 0)  # the instance running the source stage starts first
    assert place_subtopologies(topology, 1).instances == ((0, 1, 3, 4),)


def test_measured_costs_win_when_they_cover_every_subtopology() -> None:
    topology = flights_topology()
    metrics = {"tasks": {"0_0": {"active-time-ns": 20_000_000_000}, "0_1": {"active-time-ns": 10_000_000_000},
                         "1_0": {"active-time-ns": 10_000_000_000, "process": 5},
                         "3_0": {"active-time-ns": 5_000_000_000}, "4_2": {"active-time-ns": 4_000_000_000},
                         "global": {"active-time-ns": 1}}}
    costs = measured_costs(metrics)
    assert costs == {0: 30.0, 1: 10.0, 3: 5.0, 4: 4.0}
    placement = place_subtopologies(topology, 2, costs)
    assert placement.source == "measured" and placement.instances == ((0,), (1, 3, 4))
    assert placement.depths == (0, 1)
    # costs of an older topology (a sub-topology missing): estimated instead
    assert place_subtopologies(topology, 2, {0: 30.0, 1: 10.0}).source == "estimated"


def test_costs_are_kept_for_the_next_run_of_the_same_topology(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    topology = flights_topology()
    assert load_costs(tmp_path, "flights", topology) == {}
    save_costs(tmp_path, "flights", topology, {})  # nothing measured: nothing kept
    assert not list(tmp_path.iterdir())
    save_costs(tmp_path, "flights", topology, {1: 2.5, 0: 0.5})
    assert load_costs(tmp_path, "flights", flights_topology()) == {0: 0.5, 1: 2.5}  # built again: the same
    assert load_costs(tmp_path, "other", topology) == {}
    assert load_costs(tmp_path, "flights", _one_stage()) == {}  # another topology: its ids mean other stages
    (tmp_path / "flights.subtopology-costs.json").write_text("[1, 2]")
    assert load_costs(tmp_path, "flights", topology) == {}
    assert "ignoring the sub-topology costs" in caplog.text


def test_idle_instances_share_the_subtopologies_that_feed_no_repartition_topic() -> None:
    # one stage: both instances run it, and the group splits its tasks
    assert place_subtopologies(_one_stage(), 2).instances == ((0,), (0,))
    # flights on 5 instances: 4 stages, the fifth shares the terminal ones (3 and 4)
    placement = place_subtopologies(flights_topology(), 5)
    assert placement.instances == ((1,), (3, 4), (0,), (3, 4), (3, 4))
    # a stage feeding a repartition topic is never split: the idle ones share the last stage
    b = StreamsBuilder()
    (b.stream("in", Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON()))
     .group_by(lambda k, v: v["g"]).windowed_by(TimeWindows.of_size_with_no_grace(timedelta(hours=1))).count()
     .to_stream().map(lambda k, v: (k.key, v)).group_by_key().count())
    chain = b.build()
    assert stage_depths(chain) == {0: 0, 1: 1, 2: 2}
    assert place_subtopologies(chain, 5).instances == ((1,), (0,), (2,), (2,), (2,))
    with pytest.raises(ValueError, match="instances must be at least 1"):
        place_subtopologies(chain, 0)
