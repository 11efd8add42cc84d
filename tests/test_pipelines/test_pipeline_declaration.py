"""The pipeline declaration (:mod:`pipelines.declaration.pipeline`) and how commands find it
(:mod:`pipelines.declaration.resolve`): no broker, no Spark."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from pipelines import Partitioning, Pipeline, PipelineError, Source, View
from pipelines.examples.flights import pipeline as flights
from pipelines.declaration.resolve import DEFAULT_PIPELINE, find_project, load_pipeline, resolve_pipeline
from speed_layer import Consumed, Materialized, Produced, Serdes, SlidingWindows, StreamsBuilder, TimeWindows, Topology

REPO = Path(__file__).resolve().parents[2]


def small_topology(windows: object = None, sink: bool = True) -> Topology:
    """clicks -> count per key (windowed by ``windows`` or not) -> topic ``clicks_per_key``."""
    b = StreamsBuilder()
    grouped = b.stream("clicks", Consumed(key_serde=Serdes.String(), value_serde=Serdes.JSON())).group_by_key()
    if windows is None:
        table = grouped.count(Materialized.as_("clicks_per_key"))
        key_serde = Serdes.String()
    else:
        table = grouped.windowed_by(windows).count(Materialized.as_("clicks_per_key"))
        key_serde = Serdes.WindowedJSON(Serdes.String())
    if sink:
        table.to_stream().to("clicks_per_key", Produced(key_serde=key_serde, value_serde=Serdes.JSON()))
    return b.build()


def declare(**overrides: object) -> Pipeline:
    fields: dict[str, object] = dict(
        name="clicks", topology=small_topology, sources=[Source(topic="clicks", partitions=2)],
        views=[View(store="clicks_per_key", fields={"$": (1, None)})],
        partitions=Partitioning(start=date(2026, 1, 1)),
    )
    fields.update(overrides)
    return Pipeline(**fields)  # type: ignore[arg-type]


def test_the_view_specs_come_from_the_topology() -> None:
    specs = flights.view_specs
    assert specs["departures_hourly"].window_kind == "tumbling" and specs["departures_hourly"].size_ms == 3_600_000
    assert specs["seats_by_dest_daily"].advance_ms == 3_600_000 and specs["seats_by_dest_daily"].size_ms == 86_400_000
    assert specs["plane_duty_sessions"].gap_ms == 4 * 3_600_000 and specs["plane_duty_sessions"].grace_ms == 7_200_000
    assert declare().view_specs["clicks_per_key"].windowed is False
    hourly = declare(topology=lambda: small_topology(TimeWindows.of_size_with_no_grace(timedelta(hours=1))))
    assert hourly.view_specs["clicks_per_key"].window_kind == "tumbling"


def test_names_and_topics_a_pipeline_owns() -> None:
    p = declare(dead_letter_topic="clicks-dlq")
    assert p.archived_topics == ("clicks", "clicks-dlq")
    assert p.streams_config["errors.dead.letter.queue.topic.name"] == "clicks-dlq"
    assert p.streams_config["processing.exception.handler"] == "dead_letter"
    assert p.run_app_id_prefix == "duet-clicks-run" and p.service_app_id == "duet-clicks-service"
    assert p.lake(Path("/data/lake")) == Path("/data/lake/clicks")
    assert flights.archived_topics == ("flights", "planes", "airports", "airlines", "flights-dlq")


def test_expectations_are_the_standard_suite_plus_the_declared_ones() -> None:
    types = [e.type for e in flights.expectations("departures_hourly")]
    assert types[0] == "expect_column_values_to_not_be_null"
    assert "expect_compound_columns_to_be_unique" in types
    assert types[-1] == "expect_column_pair_values_a_to_be_greater_than_b"
    cols = {e.kwargs.get("column") for e in declare().expectations("clicks_per_key")}
    assert {"key", "value.$"} <= cols
    only_fields = declare(views=[View(store="clicks_per_key", fields={"$": (1, None)}, standard_checks=False)])
    assert [e.kwargs["column"] for e in only_fields.expectations("clicks_per_key")] == ["value.$"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "Clicks"}, "pipeline 'Clicks': name: 'Clicks': use lower-case letters"),
        ({"sources": []}, "sources: the topology reads ['clicks'] but they are not declared"),
        ({"sources": [Source(topic="clicks"), Source(topic="users")]}, "sources: ['users'] are not read by the topology"),
        ({"views": [View(store="nope")]}, "views[0].store: 'nope' is not a store written by an aggregation; "
         "stores: clicks_per_key"),
        ({"views": []}, "views: declare at least one view"),
        ({"views": [View(store="clicks_per_key"), View(store="clicks_per_key")]}, "store 'clicks_per_key' is declared twice"),
        ({"topology": lambda: small_topology(sink=False)}, "the topology writes no topic 'clicks_per_key'"),
        ({"topology": lambda: small_topology(SlidingWindows.of_time_difference_with_no_grace(timedelta(minutes=5)))},
         "has sliding windows; served window kinds: tumbling, hopping, session, or none"),
        ({"topology": 42}, "topology: expected a speed_layer.Topology or a function returning one, got int"),
        ({"partitions": {"start": "2026-02-01", "end": "2026-01-01"}}, "must be after start"),
        ({"partitions": {"start": "2026-01-01", "schedule": "hourly"}}, "is not a 5-field cron expression"),
        ({"dead_letter_topic": "a", "config": {"errors.dead.letter.queue.topic.name": "b"}}, "declare it once"),
        ({"colour": "blue"}, "colour: Extra inputs are not permitted"),
        ({"topology": lambda: 1 / 0}, "topology: building it raised ZeroDivisionError: division by zero"),
    ],
)
def test_a_wrong_declaration_is_one_line_naming_the_field(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(PipelineError) as info:
        declare(**overrides)
    text = str(info.value)
    assert "\n" not in text
    assert message in text, text


def test_a_wrong_part_is_one_line_too() -> None:
    with pytest.raises(PipelineError, match=r"^Source: topic: 'a b' is not a Kafka topic name"):
        Source(topic="a b")
    with pytest.raises(PipelineError, match=r"partitions: Input should be greater than or equal to 1"):
        Source(topic="a", partitions=0)


def test_sample_data_is_limited_to_the_first_events() -> None:
    sample = flights.sample_data(10)
    assert len(sample.events) == 10 and {t for t, _ in sample.events} == {"flights"}
    assert set(sample.tables) == {"planes", "airports", "airlines"}
    with pytest.raises(PipelineError, match="declares no sample data"):
        declare().sample_data()


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DUET_PIPELINE", raising=False)
    assert resolve_pipeline(cwd=tmp_path)[0] is flights  # no project: the default
    assert DEFAULT_PIPELINE == "pipelines.examples.flights:pipeline"
    (tmp_path / "pyproject.toml").write_text('[tool.duet]\npipeline = "myproj_pipe:pipeline"\nlake = "data"\n')
    (tmp_path / "myproj_pipe.py").write_text("from pipelines.examples.flights import pipeline\n")
    (tmp_path / "sub").mkdir()
    try:
        project = find_project(tmp_path / "sub")
        assert project is not None and project.root == tmp_path and project.lake == tmp_path / "data"
        pipeline, found = resolve_pipeline(cwd=tmp_path / "sub")  # [tool.duet], from a sub-folder
        assert pipeline is flights and found == project
        monkeypatch.setenv("DUET_PIPELINE", "no_such_mod:pipeline")  # the environment beats [tool.duet]
        with pytest.raises(PipelineError, match="no module 'no_such_mod'"):
            resolve_pipeline(cwd=tmp_path)
        assert resolve_pipeline(DEFAULT_PIPELINE, cwd=tmp_path)[0] is flights  # the option beats both
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("myproj_pipe", None)


def test_a_bad_tool_duet_table(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.duet]\npipelin = "x:y"\n')
    with pytest.raises(PipelineError, match="unknown key 'pipelin'; allowed: pipeline, lake"):
        find_project(tmp_path)


def test_a_module_reference_without_attribute_takes_pipeline() -> None:
    assert load_pipeline("pipelines.examples.flights") is flights


#: what only the flights example may name: its topics, views and fields (whole words/strings)
#: (a view name inside an asset key such as ``view_departures_hourly`` counts too)
FLIGHTS_NAMES = re.compile(
    r"""["'/](flights|planes|airports|airlines|flights-dlq)["'/]"""
    r"|(?<![A-Za-z0-9])(departures_hourly|same_tz_hourly|seats_by_dest_daily|plane_duty_sessions|tailnum|dep_delay"
    r"|time_hour|air_time|DAILY_2013)(?![A-Za-z0-9])"
)


def test_no_framework_module_names_a_flights_topic_view_or_field() -> None:
    """The framework (pipelines/ outside its examples, serving/, batch_layer/, speed_layer/)
    takes a declaration value and never names the flights example's topics, views or fields."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "pipelines", "serving",
                            "batch_layer", "speed_layer"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for rel in files:
        if rel.startswith("pipelines/examples/") or not rel.endswith((".py", ".html", ".js")) \
                or not (REPO / rel).exists():
            continue
        for n, line in enumerate((REPO / rel).read_text().splitlines(), 1):
            if FLIGHTS_NAMES.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
