"""``Topology.describe()`` and generated names, pinned to the exact texts of Kafka's own
``TopologyTest`` (kGroupedStream*, timeWindow*, sessionWindow*, table*, kTable* cases)
and the WordCount description in Kafka's documentation."""
from __future__ import annotations

from speed_layer import (
    Consumed, Grouped, Materialized, Named, Serdes, SessionWindows, SlidingWindows, StreamsBuilder, Stores, Suppressed,
    TimeWindows, Topology, BufferConfig,
)
from speed_layer.describe import java_hash_set_order, java_string_hash


def _d(b: StreamsBuilder | Topology) -> str:
    t = b.build() if isinstance(b, StreamsBuilder) else b
    return str(t.describe())


def test_java_string_hash_and_hash_set_order() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    # Java: new HashSet<>(Arrays.asList("store2", "store1")) iterates store1, store2
    assert java_hash_set_order(["store2", "store1"]) == ["store1", "store2"]


def test_empty_topology() -> None:
    assert _d(Topology()) == "Topologies:\n "


def test_kgrouped_stream_zero_arg_count() -> None:
    b = StreamsBuilder()
    b.stream("input-topic").group_by_key().count()
    assert _d(b) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [input-topic])\n"
        "      --> KSTREAM-AGGREGATE-0000000002\n"
        "    Processor: KSTREAM-AGGREGATE-0000000002 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000001])\n"
        "      --> none\n"
        "      <-- KSTREAM-SOURCE-0000000000\n\n"
    )


def test_kgrouped_stream_named_and_anonymous_materialized_count() -> None:
    b = StreamsBuilder()
    b.stream("input-topic").group_by_key().count(Materialized.as_("count-store"))
    assert "Processor: KSTREAM-AGGREGATE-0000000001 (stores: [count-store])" in _d(b)
    # count(Materialized) with no store name burns one extra index, as Kafka
    b = StreamsBuilder()
    b.stream("input-topic").group_by_key().count(Materialized.with_(None, Serdes.Long()))
    assert "Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])" in _d(b)


def test_windowed_counts() -> None:
    for windows in (TimeWindows.of_size_with_no_grace(1), SessionWindows.of_inactivity_gap_with_no_grace(1)):
        b = StreamsBuilder()
        b.stream("input-topic").group_by_key().windowed_by(windows).count()  # type: ignore[union-attr]
        assert "Processor: KSTREAM-AGGREGATE-0000000002 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000001])" in _d(b)
        b = StreamsBuilder()
        b.stream("input-topic").group_by_key().windowed_by(windows).count(Materialized.with_(None, Serdes.Long()))  # type: ignore[union-attr]
        assert "Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])" in _d(b)


def test_table_zero_arg_count() -> None:
    b = StreamsBuilder()
    b.table("input-topic").group_by(lambda k, v: (k, v)).count()
    assert _d(b) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic])\n"
        "      --> KTABLE-SOURCE-0000000002\n"
        "    Processor: KTABLE-SOURCE-0000000002 (stores: [input-topic-STATE-STORE-0000000000])\n"
        "      --> KTABLE-SELECT-0000000003\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "    Processor: KTABLE-SELECT-0000000003 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000005\n"
        "      <-- KTABLE-SOURCE-0000000002\n"
        "    Sink: KSTREAM-SINK-0000000005 (topic: KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition)\n"
        "      <-- KTABLE-SELECT-0000000003\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: KSTREAM-SOURCE-0000000006 (topics: [KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition])\n"
        "      --> KTABLE-AGGREGATE-0000000007\n"
        "    Processor: KTABLE-AGGREGATE-0000000007 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000004])\n"
        "      --> none\n"
        "      <-- KSTREAM-SOURCE-0000000006\n"
        "\n"
    )


def test_table_named_materialized_count() -> None:
    b = StreamsBuilder()
    b.table("input-topic").group_by(lambda k, v: (k, v)).count(Materialized.as_("count-store"))
    assert _d(b) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic])\n"
        "      --> KTABLE-SOURCE-0000000002\n"
        "    Processor: KTABLE-SOURCE-0000000002 (stores: [input-topic-STATE-STORE-0000000000])\n"
        "      --> KTABLE-SELECT-0000000003\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "    Processor: KTABLE-SELECT-0000000003 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000004\n"
        "      <-- KTABLE-SOURCE-0000000002\n"
        "    Sink: KSTREAM-SINK-0000000004 (topic: count-store-repartition)\n"
        "      <-- KTABLE-SELECT-0000000003\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: KSTREAM-SOURCE-0000000005 (topics: [count-store-repartition])\n"
        "      --> KTABLE-AGGREGATE-0000000006\n"
        "    Processor: KTABLE-AGGREGATE-0000000006 (stores: [count-store])\n"
        "      --> none\n"
        "      <-- KSTREAM-SOURCE-0000000005\n"
        "\n"
    )


def test_ktable_map_values_and_filter_materialization() -> None:
    b = StreamsBuilder()
    b.table("input-topic").map_values(lambda v: v)
    assert _d(b) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic])\n"
        "      --> KTABLE-SOURCE-0000000002\n"
        "    Processor: KTABLE-SOURCE-0000000002 (stores: [])\n"
        "      --> KTABLE-MAPVALUES-0000000003\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "    Processor: KTABLE-MAPVALUES-0000000003 (stores: [])\n"
        "      --> none\n"
        "      <-- KTABLE-SOURCE-0000000002\n\n"
    )
    b = StreamsBuilder()
    b.table("input-topic").map_values(lambda v: v, materialized=Materialized.with_(None, None))
    assert "Processor: KTABLE-MAPVALUES-0000000004 (stores: [])" in _d(b)
    b = StreamsBuilder()
    b.table("input-topic").map_values(lambda v: v, materialized=Materialized.as_("store-name"))
    assert "Processor: KTABLE-MAPVALUES-0000000003 (stores: [store-name])" in _d(b)
    b = StreamsBuilder()
    b.table("input-topic").filter(lambda k, v: False)
    assert "Processor: KTABLE-FILTER-0000000003 (stores: [])" in _d(b)
    b = StreamsBuilder()
    b.table("input-topic").filter(lambda k, v: False, materialized=Materialized.with_(None, None))
    assert "Processor: KTABLE-FILTER-0000000004 (stores: [])" in _d(b)
    b = StreamsBuilder()
    b.table("input-topic").filter(lambda k, v: False, materialized=Materialized.as_("store-name"))
    assert "Processor: KTABLE-FILTER-0000000003 (stores: [store-name])" in _d(b)


def test_sink_with_topic_extractor() -> None:
    class Extractor:
        def __call__(self, key: object, value: object, ctx: object) -> str:
            return f"{key}"

        def __str__(self) -> str:
            return "anonymous topic name extractor. topic is [recordContext.topic()]-[key]"

    b = StreamsBuilder()
    b.stream("input-topic").to(Extractor())
    assert _d(b) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [input-topic])\n"
        "      --> KSTREAM-SINK-0000000001\n"
        "    Sink: KSTREAM-SINK-0000000001 (extractor class: anonymous topic name extractor. topic is [recordContext.topic()]-[key])\n"
        "      <-- KSTREAM-SOURCE-0000000000\n\n"
    )


def test_word_count_as_in_kafka_docs() -> None:
    """Names of Kafka's WordCountDemo (flatMapValues, groupBy, count(Materialized.as)):
    the repartition nodes take indices 4, 5, 6 and are named after the store."""
    b = StreamsBuilder()
    (b.stream("streams-plaintext-input")
     .flat_map_values(lambda v: v.lower().split())
     .group_by(lambda k, v: v)
     .count(Materialized.as_("counts-store"))
     .to_stream()
     .to("streams-wordcount-output"))
    assert _d(b) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [streams-plaintext-input])\n"
        "      --> KSTREAM-FLATMAPVALUES-0000000001\n"
        "    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])\n"
        "      --> KSTREAM-KEY-SELECT-0000000002\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])\n"
        "      --> counts-store-repartition-filter\n"
        "      <-- KSTREAM-FLATMAPVALUES-0000000001\n"
        "    Processor: counts-store-repartition-filter (stores: [])\n"
        "      --> counts-store-repartition-sink\n"
        "      <-- KSTREAM-KEY-SELECT-0000000002\n"
        "    Sink: counts-store-repartition-sink (topic: counts-store-repartition)\n"
        "      <-- counts-store-repartition-filter\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: counts-store-repartition-source (topics: [counts-store-repartition])\n"
        "      --> KSTREAM-AGGREGATE-0000000003\n"
        "    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts-store])\n"
        "      --> KTABLE-TOSTREAM-0000000007\n"
        "      <-- counts-store-repartition-source\n"
        "    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000008\n"
        "      <-- KSTREAM-AGGREGATE-0000000003\n"
        "    Sink: KSTREAM-SINK-0000000008 (topic: streams-wordcount-output)\n"
        "      <-- KTABLE-TOSTREAM-0000000007\n"
        "\n"
    )


def test_generated_repartition_names_for_generated_stores() -> None:
    """A generated store name matches ``KSTREAM.*-<10 digits>``: the repartition nodes get
    the generated sink/filter/source names (KStreamImpl#createRepartitionedSource)."""
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v).group_by_key().count()
    text = _d(b)
    assert "Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition)" in text
    assert "Processor: KSTREAM-FILTER-0000000005 (stores: [])" in text
    assert "Source: KSTREAM-SOURCE-0000000006 (topics: [KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition])" in text
    assert "Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])" in text
    # a Grouped name names the topic and the nodes
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v, Grouped.as_("by-value")).count()
    text = _d(b)
    assert "Sink: by-value-repartition-sink (topic: by-value-repartition)" in text
    assert "Source: by-value-repartition-source (topics: [by-value-repartition])" in text
    # repartition() uses KSTREAM-REPARTITION-<n> as the prefix
    b = StreamsBuilder()
    b.stream("in").repartition().to("out")
    text = _d(b)
    assert "Sink: KSTREAM-SINK-0000000002 (topic: KSTREAM-REPARTITION-0000000001-repartition)" in text
    assert "Source: KSTREAM-SOURCE-0000000004 (topics: [KSTREAM-REPARTITION-0000000001-repartition])" in text
    assert "Sink: KSTREAM-SINK-0000000005 (topic: out)" in text


def test_to_table_names() -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v).to_table(materialized=Materialized.as_("prices-table")).to_stream().to("prices")
    text = _d(b)
    # name first (2), then store index (no index: named), repartition prefix = the name
    assert "Sink: KSTREAM-SINK-0000000003 (topic: KSTREAM-TOTABLE-0000000002-repartition)" in text
    assert "Processor: KSTREAM-TOTABLE-0000000002 (stores: [prices-table])" in text
    assert "Processor: KTABLE-TOSTREAM-0000000006 (stores: [])" in text


def test_global_store_sub_topology_ids_follow_declaration_order() -> None:
    """Kafka numbers global-store groups with the others, in order of their first node
    (the quarkus/weather-stations example: the global table first gets id 0)."""
    b = StreamsBuilder()
    stations = b.global_table("weather-stations")
    s = b.stream("temperature.values")
    s.left_join(stations, lambda k, v: k, lambda v, st: v).group_by_key().aggregate(
        lambda: 0, lambda k, v, a: a, Materialized.as_("weather-stations-store")).to_stream().to("out")
    text = _d(b)
    assert text.startswith(
        "Topologies:\n"
        "   Sub-topology: 0 for global store (will not generate tasks)\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [weather-stations])\n"
        "      --> KTABLE-SOURCE-0000000002\n"
        "    Processor: KTABLE-SOURCE-0000000002 (stores: [weather-stations-STATE-STORE-0000000000])\n"
        "      --> none\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "  Sub-topology: 1\n"
        "    Source: KSTREAM-SOURCE-0000000003 (topics: [temperature.values])\n"
        "      --> KSTREAM-LEFTJOIN-0000000004\n"
    )
    assert "Processor: KSTREAM-AGGREGATE-0000000005 (stores: [weather-stations-store])" in text
    assert [s.id for s in b.build().subtopologies()] == [1]
    assert [s.id for s in b.build().task_subtopologies()] == [1]


def test_processor_api_topology_and_node_order() -> None:
    """Nodes sort by the size of the sub-tree below them, then by name (NodeComparator)."""
    t = Topology()
    t.add_source("source", "topic")
    t.add_processor("b-processor", lambda: None, "source")
    t.add_processor("a-processor", lambda: None, "source")
    t.add_processor("child", lambda: None, "b-processor")
    t.add_state_store(Stores.key_value_store("store2"), "b-processor")
    t.add_state_store(Stores.key_value_store("store1"), "b-processor")
    t.add_sink("sink", "out", "child", "a-processor")
    assert _d(t) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: source (topics: [topic])\n"
        "      --> b-processor, a-processor\n"
        "    Processor: b-processor (stores: [store1, store2])\n"
        "      --> child\n"
        "      <-- source\n"
        "    Processor: a-processor (stores: [])\n"
        "      --> sink\n"
        "      <-- source\n"
        "    Processor: child (stores: [])\n"
        "      --> sink\n"
        "      <-- b-processor\n"
        "    Sink: sink (topic: out)\n"
        "      <-- a-processor, child\n"
        "\n"
    )


def test_multiple_sources_distinct_subtopologies_and_global_store_last() -> None:
    t = Topology()
    t.add_source("source1", "topic1")
    t.add_source("source2", "topic2")
    t.add_global_store(Stores.with_logging_disabled(Stores.key_value_store("globalStore")), "gsource", "globalTopic", "gprocessor")
    text = _d(t)
    assert text == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: source1 (topics: [topic1])\n"
        "      --> none\n\n"
        "  Sub-topology: 1\n"
        "    Source: source2 (topics: [topic2])\n"
        "      --> none\n\n"
        "  Sub-topology: 2 for global store (will not generate tasks)\n"
        "    Source: gsource (topics: [globalTopic])\n"
        "      --> gprocessor\n"
        "    Processor: gprocessor (stores: [globalStore])\n"
        "      --> none\n"
        "      <-- gsource\n"
    )


def test_branch_names() -> None:
    b = StreamsBuilder()
    branches = (b.stream("in").split()
                .branch(lambda k, v: v > 0)
                .branch(lambda k, v: v < 0, name="neg")
                .default_branch())
    assert list(branches) == ["KSTREAM-BRANCH-00000000011", "KSTREAM-BRANCH-0000000001neg", "KSTREAM-BRANCH-00000000010"]
    b = StreamsBuilder()
    branches = b.stream("in").split(Named.as_("s-")).branch(lambda k, v: True, name="a").default_branch()
    assert list(branches) == ["s-a", "s-0"]
    # each branch burns a KSTREAM-BRANCHCHILD index (1 and 2): the next node is -0000000003
    branches["s-a"].to("x")
    assert "Sink: KSTREAM-SINK-0000000003 (topic: x)" in _d(b)
    # the deprecated branch(): KSTREAM-BRANCHCHILD-<n> children
    b = StreamsBuilder()
    streams = b.stream("in").branch(lambda k, v: True, lambda k, v: False)
    assert [s.node for s in streams] == ["KSTREAM-BRANCHCHILD-0000000002", "KSTREAM-BRANCHCHILD-0000000003"]


def test_table_and_global_table_with_named_consumed() -> None:
    b = StreamsBuilder()
    b.table("t", Consumed(name="users"))
    text = _d(b)
    assert "Source: users-source (topics: [t])" in text and "Processor: users (stores: [])" in text


def test_suppress_and_cogroup_names() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10)).count().suppress(
        Suppressed.until_window_closes(BufferConfig.unbounded()))
    assert "Processor: KTABLE-SUPPRESS-0000000003 (stores: [KTABLE-SUPPRESS-STATE-STORE-0000000004])" in _d(b)
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10)).count().suppress(
        Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("final"))
    assert "Processor: final (stores: [final-store])" in _d(b)
    b = StreamsBuilder()
    g1 = b.stream("a").group_by_key()
    g2 = b.stream("b").group_by_key()
    g1.cogroup(lambda k, v, a: a).cogroup(g2, lambda k, v, a: a).aggregate(lambda: 0, named="agg")
    text = _d(b)
    assert "Processor: agg-cogroup-agg-0 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002])" in text
    assert "Processor: agg-cogroup-merge (stores: [])" in text


def test_sliding_window_store_names() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(SlidingWindows.of_time_difference_with_no_grace(10)).reduce(lambda a, v: v)
    assert "Processor: KSTREAM-REDUCE-0000000002 (stores: [KSTREAM-REDUCE-STATE-STORE-0000000001])" in _d(b)


def test_changelog_and_repartition_topic_names() -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v).group_by_key().count()
    t = b.build()
    spec = t.stores["KSTREAM-AGGREGATE-STATE-STORE-0000000002"]
    assert spec.changelog_topic("app") == "app-KSTREAM-AGGREGATE-STATE-STORE-0000000002-changelog"
    assert t.internal_topics["KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition"].full_name("app") == \
        "app-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition"
